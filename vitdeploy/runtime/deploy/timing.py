"""Timing candidates on the probe's part: every candidate opened, warmed up and judged against the file's math on
ONNX Runtime, then timed, fastest warm-up first, within the cutoffs below (:func:`measure`); in a worker process
where a runtime may crash (:func:`measure_isolated`). :func:`timed_runs` is the one timing loop of the package
(``vitdeploy tune`` and :func:`vitdeploy.validation.latency.measure_latency` time with it too).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from vitdeploy.cpu_features import available_cores, physical_cores
from vitdeploy.errors import InputError, VitdeployError
from vitdeploy.parity import Tolerance, budget_for
from vitdeploy.precisions import Precision
from vitdeploy.runtime.backends.registry import DEFAULT_RUNTIME, RUNTIMES
from vitdeploy.runtime.deploy.deployment import Deployment
from vitdeploy.runtime.deploy.graph_part import ProbePart, probe_part

#: A candidate whose warm-up run took more than this many times the best warm-up so far is not timed further: a
#: first run took at most 1.6x a later one (SAM ViT-B blocks 0 and 2 at 1024, Xeon with AMX, 2 threads: ONNX Runtime
#: 2458 against 1555 ms, OpenVINO f32 1621 against 1408, OpenVINO bf16 713 against 544), so such a candidate's best
#: run is more than 1.1x behind the leader's warm-up already.
CUTOFF = 1.8
#: A candidate whose warm-up run took more than this many times the fastest candidate's best timed run is not timed:
#: by the same bound (a first run at most 1.6x a later one), its best run would be more than 1.1x behind the leader's.
#: The candidates are timed fastest warm-up first, so the leader's best is usually known before the others are timed
#: (SAM ViT-B's blocks 0 and 2 on the Xeon with AMX hidden, 2 threads: OpenVINO f32's best 716-734 ms; BF16 warmed
#: up in 1328 ms and ONNX Runtime in 1408-1494, and their timed runs, 1105-1145 and 1193-1210 ms, were 1.1 s each of a
#: 15 s probe that could not change its choice). Only where the leader's best run is at least :data:`SHORT_RUN_MS`:
#: the bound was measured on runs of about a second, and a short run's first has a larger share of one-time work.
LEADER_CUTOFF = 1.6 * 1.1
#: Timed runs per candidate after its warm-up (the minimum is kept: the least disturbed run on a shared machine).
TIMED_RUNS = 2
#: A candidate whose timed run took more than this many times the fastest candidate's best so far is not run again:
#: another run cannot win it the choice (run-to-run noise on these machines is 10-25 %). SAM ViT-B's blocks 0 and 2
#: at 1024 on an AMD EPYC Zen 4, 2 threads: OpenVINO f32 1000-1113 ms and ONNX Runtime 1196 ms against OpenVINO
#: BF16's 538-550 ms, each timed twice before.
BEHIND = 1.5
#: A candidate whose warm-up took longer than this (ms) is timed once: a second run of seconds costs more than its
#: noise can change (SAM 2's memory attention over a full bank on an AMD EPYC Zen 4, 2 threads: 3-5 s a run, 58 s to
#: probe with two timed runs and the threads step, 28.5 s with one and without).
LONG_RUN_MS = 2000.0
#: The threads step (the fastest once more at half its threads) runs where this process's CPUs include SMT siblings,
#: or where the fastest run is shorter than this (ms): there thread start-up and synchronisation weigh, elsewhere one
#: thread per physical core is compute-bound and half of them only lose (AMD EPYC Zen 4, 2 cores, no SMT: SAM ViT-B's
#: cut-out blocks at 1024 on OpenVINO BF16 in 992-1075 against 533-591 ms, three probes; SAM 2's memory attention at
#: one thread warmed up in 7853 ms, against about 4 s a run at two).
SHORT_RUN_MS = 250.0


@dataclass
class Timing:
    """One candidate on the probe part: its warm-up and best timed run (None: not timed further, or it failed), its
    cosine against the file's math on ONNX Runtime, and why it cannot be chosen (empty: it can)."""

    deployment: Deployment
    load_ms: float | None = None
    warmup_ms: float | None = None
    best_ms: float | None = None
    cosine: float | None = None
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.deployment.label(), "deployment": self.deployment.to_dict(), "load_ms": self.load_ms,
                "warmup_ms": self.warmup_ms, "best_ms": self.best_ms, "cosine": self.cosine, "reason": self.reason}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Timing:
        """The timing :meth:`to_dict` wrote (the probe's worker to its parent)."""
        return cls(Deployment.from_dict(data["deployment"], "probe"), data["load_ms"], data["warmup_ms"],
                   data["best_ms"], data["cosine"], data["reason"])


@dataclass
class Decision:
    """A probe's result: the chosen deployment, every timing, what ran and how long the probe took."""

    chosen: Deployment | None  # None: no candidate held its budget, where the caller did not require a choice
    timings: list[Timing]
    part: str
    seconds: float
    left_out: tuple[str, ...] = ()
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))

    def ranking(self) -> list[Timing]:
        """Choosable candidates, fastest first, then the rest."""
        return sorted(self.timings, key=lambda t: (bool(t.reason), t.best_ms if t.best_ms is not None else float("inf"),
                                                   t.warmup_ms if t.warmup_ms is not None else float("inf")))

    def summary(self) -> str:
        """``openvino bf16 (412 ms on blocks.0, blocks.2 of 12 ...; onnxruntime file 1534 ms, ...)``: the choice and why."""
        def ms(value: float) -> str:
            return f"{value:.0f} ms" if value >= 10 else f"{value:.2f} ms"

        several = len({t.deployment.threads for t in self.timings}) > 1

        def line(t: Timing) -> str:
            label = t.deployment.label() + (f" {t.deployment.threads} thr" if several else "")
            if t.reason:
                return f"{label} {t.reason}"
            if t.best_ms is None:
                return f"{label} left after a {ms(t.warmup_ms or 0)} warm-up"
            return f"{label} {ms(t.best_ms)}"

        times = ", ".join(line(t) for t in self.ranking())
        return f"probed on this CPU in {self.seconds:.1f} s on {self.part}: {times}"


def _compare(reference: dict[str, np.ndarray], got: dict[str, np.ndarray], budget: Tolerance) -> tuple[float, str]:
    from vitdeploy.parity import compare

    cosines, failures = [], []
    for name, value in reference.items():
        result = compare(value, got[name], budget, label=name)
        cosines.append(result.cosine)
        failures += result.failures
    return min(cosines), (f"over its '{budget.name}' budget against the file's math ({failures[0]})" if failures else "")


def _is_reference(deployment: Deployment) -> bool:
    """The file's own math on ONNX Runtime, as written: what every candidate's outputs are held against."""
    return deployment.runtime == DEFAULT_RUNTIME and deployment.precision == "file" and not deployment.settings


def measure(model: Path, metadata: dict[str, Any], candidates: tuple[Deployment, ...], whole_below: int,
            on_start: Any = None, workdir: str | None = None, fewer_threads: bool = False,
            rank: bool = False) -> tuple[list[Timing], str]:
    """(every candidate's timing on the probe part of ``model``, in the order of ``candidates``; what the part is).

    Every candidate is opened and warmed up first, the reference (the file's math on ONNX Runtime, where it is a
    candidate) before the others: each other is held to its budget against it right after its own warm-up, and one
    that misses is closed and not timed. Those that held are then timed on the sessions their warm-ups ran (kept
    open, so none is loaded and warmed up twice: 2.6 s of SAM ViT-B's probe on the Zen 4), the fastest warm-up first,
    so the likely leader sets the bar the others are held to: one whose warm-up is behind the best by more than
    :data:`CUTOFF`, or behind the fastest best run so far by more than :data:`LEADER_CUTOFF`, is not timed, and a
    timed run :data:`BEHIND` the fastest so far is not repeated (on the Xeon with AMX hidden, timing in the eligible
    order put OpenVINO f32, the leader, third, and BF16 and FP16 ran their second runs before it: 2 s of a 15 s
    probe). ``fewer_threads``: then the fastest once more at half its threads (the threads axis, one candidate more),
    where it can win (:data:`SHORT_RUN_MS`). A candidate whose warm-up is longer than :data:`LONG_RUN_MS` is timed
    once. ``rank``: every candidate within :data:`CUTOFF`
    is timed, those behind the leader too (``tune`` judges the fastest few in full, not only the one that can win).
    ``on_start(i)`` is called before candidate ``i`` is opened (the extra one is ``len(candidates)``); the part is
    written into ``workdir`` (default: a temporary folder of its own)."""
    from vitdeploy.runtime.backends.base import RunnerOptions

    file_budget, family = Precision.of(metadata).value, metadata.get("family")
    timings = [Timing(d) for d in candidates]
    reference: dict[str, np.ndarray] | None = None
    best_warmup = float("inf")

    def failed(timing: Timing, exc: Exception) -> None:
        """A runtime's own failure on one candidate rules out that candidate, in one line."""
        timing.reason = (f"could not run: {str(exc).splitlines()[0]}" if isinstance(exc, VitdeployError) else
                         f"could not run: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")

    def judged(index: int, timing: Timing, part: ProbePart) -> Any:
        """Open ``timing``'s candidate, warm it up and judge it (the reference is the judge): its runner, still open,
        where it ran and held its budget; None (closed, the reason recorded) where not."""
        nonlocal best_warmup, reference
        if on_start is not None:
            on_start(index)
        deployment = timing.deployment
        runner = None
        try:
            t0 = time.perf_counter()
            runner = RUNTIMES[deployment.runtime].open(
                part.path, RunnerOptions(threads=deployment.threads, policy=deployment.precision),
                **dict(deployment.settings))
            timing.load_ms = (time.perf_counter() - t0) * 1e3
            t0 = time.perf_counter()
            outputs = runner.run(part.feeds)
            timing.warmup_ms = (time.perf_counter() - t0) * 1e3
            if _is_reference(deployment) and reference is None:
                reference = outputs
            if reference is not None:
                budget = budget_for(file_budget if deployment.precision == "file" else deployment.precision, family)
                timing.cosine, timing.reason = _compare(reference, outputs, budget)  # over it: no speed makes up for it
        except Exception as exc:  # noqa: BLE001 - a runtime's own failure on one candidate rules out that candidate
            failed(timing, exc)
        if timing.reason:
            if runner is not None:
                runner.close()
            return None
        best_warmup = min(best_warmup, timing.warmup_ms)
        return runner

    def timed(timing: Timing, runner: Any, part: ProbePart) -> None:
        """Time a judged candidate on its warm ``runner`` where its warm-up is within the cutoffs; close the runner."""
        try:
            fastest = min((t.best_ms for t in timings if t.best_ms is not None and not t.reason), default=None)
            behind_leader = (not rank and fastest is not None and fastest >= SHORT_RUN_MS
                             and timing.warmup_ms > LEADER_CUTOFF * fastest)
            if timing.warmup_ms <= CUTOFF * best_warmup and not behind_leader:
                runs = timed_runs(lambda: runner.run(part.feeds), TIMED_RUNS if timing.warmup_ms < LONG_RUN_MS else 1,
                                  fastest)
                timing.best_ms = min(runs)
        except Exception as exc:  # noqa: BLE001 - as in judged
            failed(timing, exc)
        finally:
            runner.close()

    with tempfile.TemporaryDirectory(prefix="vitdeploy-probe-") as own:
        part = probe_part(model, metadata, workdir or own, whole_below)
        first = next((i for i, d in enumerate(candidates) if _is_reference(d)), None)
        order = ([first] if first is not None else []) + [i for i in range(len(candidates)) if i != first]
        warm = {}  # every candidate that held its budget, its runner still open
        try:
            for index in order:  # the reference first: its outputs judge the others
                if (runner := judged(index, timings[index], part)) is not None:
                    warm[index] = runner
            for index in sorted(warm, key=lambda i: timings[i].warmup_ms):  # the fastest warm-up first: the bar
                if on_start is not None:
                    on_start(index)  # a crash from here on is this candidate's
                timed(timings[index], warm.pop(index), part)
        finally:
            for runner in warm.values():
                runner.close()
        held = [t for t in timings if t.best_ms is not None and not t.reason]
        leader = min(held, key=lambda t: t.best_ms) if held else None
        if fewer_threads and leader and (leader.best_ms < SHORT_RUN_MS or _shares_cores()):
            fewer = replace(leader.deployment, threads=(leader.deployment.threads or 1) // 2)
            if fewer.threads and fewer not in candidates:
                timings.append(Timing(fewer))
                if (runner := judged(len(candidates), timings[-1], part)) is not None:
                    timed(timings[-1], runner, part)
    return timings, part.what


def timed_runs(run: Callable[[], Any], count: int, fastest_ms: float | None = None, clock: Callable[[], float] | None = None,
               synchronize: Callable[[], None] | None = None) -> list[float]:
    """Up to ``count`` timed runs of ``run`` (milliseconds each; ``clock`` default ``time.perf_counter``, read at the
    call): the package's one timing loop. It stops after a run more than :data:`BEHIND` times ``fastest_ms`` (the
    fastest candidate's best so far): so far behind, another run cannot win the choice. ``synchronize`` is called
    before and after each run (a GPU runner's stream synchronisation: the time covers the work, not its launch)."""
    clock = clock or time.perf_counter
    runs: list[float] = []
    for _ in range(count):
        if synchronize is not None:
            synchronize()
        t0 = clock()
        run()
        if synchronize is not None:
            synchronize()
        runs.append((clock() - t0) * 1e3)
        if fastest_ms is not None and runs[-1] > BEHIND * fastest_ms:
            break
    return runs


def _shares_cores() -> bool:
    """Whether this process's CPUs include SMT siblings (or the topology cannot be read: then they may)."""
    physical = physical_cores()
    return physical is None or physical < available_cores()


def measure_isolated(model: Path, candidates: tuple[Deployment, ...], whole_below: int,
                     fewer_threads: bool = False, rank: bool = False) -> tuple[list[Timing], str]:
    """:func:`measure` in a worker process (``python -m vitdeploy.runtime.deploy.timing``): a runtime that crashes
    the process on a candidate (a native fault) rules out that candidate instead of ending the user's program, and
    the parsed graph and each candidate's sessions never count toward the user's process's memory. After a crash the
    worker runs again without the candidate it was on."""
    import signal
    import subprocess

    remaining = list(range(len(candidates)))
    crashed: dict[int, str] = {}
    done: dict[str, Any] | None = None
    while remaining:
        with tempfile.TemporaryDirectory(prefix="vitdeploy-probe-") as workdir:  # removed even when the worker crashed
            spec = {"model": str(model), "whole_below": whole_below, "workdir": workdir, "fewer_threads": fewer_threads,
                    "rank": rank, "candidates": [candidates[i].to_dict() for i in remaining]}
            worker = subprocess.run([sys.executable, "-m", "vitdeploy.runtime.deploy.timing"], input=json.dumps(spec),
                                    capture_output=True, text=True)
        lines = [json.loads(line) for line in worker.stdout.splitlines() if line.startswith("{")]
        done = next((line["result"] for line in lines if "result" in line), None)
        if worker.returncode == 0 and done is not None:
            break
        started = [line["start"] for line in lines if "start" in line]
        tail = (worker.stderr.strip().splitlines() or ["no output"])[-1][:200]
        if not started:
            raise InputError(f"the probe's worker stopped before it ran a candidate ({tail})")
        try:
            how = f"signal {signal.Signals(-worker.returncode).name}" if worker.returncode < 0 else f"exit {worker.returncode}"
        except ValueError:
            how = f"exit {worker.returncode}"
        if started[-1] == len(remaining):  # the threads step: the next run leaves it out
            fewer_threads = False
            continue
        crashed[remaining[started[-1]]] = f"could not run: it ended the probe's worker process ({how}: {tail})"
        del remaining[started[-1]]
        done = None
    measured = iter([Timing.from_dict(data) for data in done["timings"]] if done else [])
    # the candidates in their order, the crashed ones among them; then the threads step's candidate, if it ran
    timings = [Timing(d, reason=crashed[i]) if i in crashed else next(measured) for i, d in enumerate(candidates)]
    return timings + list(measured), (done["part"] if done else "nothing (every candidate ended the worker)")


def _worker() -> None:
    """The worker :func:`measure_isolated` starts: reads its spec on standard input, says which candidate it starts
    (``{"start": i}``, one line each, flushed), then writes every timing (``{"result": ...}``)."""
    from vitdeploy.metadata import read_onnx_metadata

    spec = json.loads(sys.stdin.read())
    model = Path(spec["model"])
    candidates = tuple(Deployment.from_dict(d, "probe") for d in spec["candidates"])

    def started(index: int) -> None:
        print(json.dumps({"start": index}), flush=True)

    timings, part = measure(model, read_onnx_metadata(model), candidates, spec["whole_below"], started, spec["workdir"],
                             spec["fewer_threads"], spec["rank"])
    print(json.dumps({"result": {"part": part, "timings": [t.to_dict() for t in timings]}}), flush=True)


__all__ = ["BEHIND", "CUTOFF", "LEADER_CUTOFF", "LONG_RUN_MS", "SHORT_RUN_MS", "TIMED_RUNS", "Decision", "Timing",
           "measure", "measure_isolated", "timed_runs"]


if __name__ == "__main__":
    _worker()
