"""Progress for people: a bar with an ETA on a terminal, sparse plain lines in logs, stage times; --threads default."""

from __future__ import annotations

import io

import click
from click.testing import CliRunner

from vitdeploy.cli.options import available_cores, threads_option
from vitdeploy.cli.progress import LOG_EVERY_S, StageProgress, format_seconds


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_terminal_bar_redraws_one_line_with_an_eta():
    stream, clock = io.StringIO(), FakeClock()
    progress = StageProgress(stream, tty=True, clock=clock)
    progress("measuring activations", 0, 4)
    clock.now += 30
    progress("measuring activations", 1, 4)
    text = stream.getvalue()
    assert "\r  measuring activations [######------------------] 1/4  25%  30.0 s elapsed, ETA 1:30" in text
    assert "\n" not in text  # redrawn in place until the stage ends
    clock.now += 90
    progress("measuring activations", 4, 4)
    assert stream.getvalue().endswith("\n") and "ETA" not in stream.getvalue().rsplit("\r", 1)[1]


def test_log_gets_sparse_plain_lines_and_stage_times_add_up():
    stream, clock = io.StringIO(), FakeClock()
    progress = StageProgress(stream, tty=False, clock=clock)
    for k in range(1, 101):  # 100 steps of 1 s: lines at most every LOG_EVERY_S, plus the last
        clock.now += 1
        progress("collecting", k, 100)
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue()
    assert len(lines) == int(100 // LOG_EVERY_S) + (100 % LOG_EVERY_S != 0)
    assert lines[-1] == "  collecting: 100/100 (100%), 1:39 elapsed"  # timed from its first call
    for attempt in (1, 2):  # a stage that runs again adds up
        clock.now += 5
        progress("parity", 0, 1)
        clock.now += 2 * attempt
        progress("parity", 1, 1)
    times = progress.times()
    assert list(times) == ["collecting", "parity"]
    assert times["collecting"] == 99.0 and times["parity"] == 6.0


def test_format_seconds():
    assert [format_seconds(s) for s in (4.25, 61, 3723)] == ["4.2 s", "1:01", "1:02:03"]


def test_threads_default_to_the_cores_this_process_may_use(monkeypatch):
    @click.command()
    @threads_option
    def show(threads: int) -> None:
        click.echo(threads)

    monkeypatch.setattr("os.sched_getaffinity", lambda _pid: {0, 1, 2, 5, 7})
    assert available_cores() == 5
    assert CliRunner().invoke(show, []).output.strip() == "5"
    assert CliRunner().invoke(show, ["--threads", "3"]).output.strip() == "3"
