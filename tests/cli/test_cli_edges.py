"""Edges a real client hits, each loud and safe: signals, '-' as an output, two runs writing one file, a reversed
box, huge images and decompression bombs. Each checks the exit code, the one line the user reads, and that
nothing was left behind."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from vitdeploy.cli import cli
from vitdeploy.errors import InputError
from vitdeploy.fileio import claim_outputs, lock_output, output_locks, release_output_locks

IMAGE = Path(__file__).resolve().parents[2] / "calibration" / "images" / "calib_00_landscape.jpg"


def run(*args: str, env: dict | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False, env=env)
    return result.exit_code, result.output


def one_error_line(code: int, output: str, *needles: str, exit_code: int = 1) -> str:
    assert code == exit_code, output
    errors = [ln for ln in output.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in output and "a vitdeploy bug" not in output, output
    for needle in needles:
        assert needle in errors[0], output
    return errors[0]


@pytest.fixture(scope="module")
def sam_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny SAM pair (``sam_tiny``, ``sam_tiny_decoder``: tests/family_exports.py, made once per run), copied."""
    from tests.family_exports import family_export_copy

    root = tmp_path_factory.mktemp("edges")
    return {"enc": family_export_copy(tmp_path_factory, "sam_image_encoder", root, "enc"),
            "dec": family_export_copy(tmp_path_factory, "sam_mask_decoder", root, "dec"), "root": root}


# --- signals -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_during_export_leaves_nothing_and_exits_128_plus_the_signal(tmp_path: Path, signum: int) -> None:
    """What kill, timeout, docker stop and CI cancellation send (SIGTERM), and Ctrl-C (SIGINT), handled alike."""
    command = [sys.executable, "-m", "vitdeploy", "export", "-r", "sam_vit_b", "--random-weights", "--input-size", "512",
               "-o", str(tmp_path / "b.onnx")]
    proc = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".vitdeploy-export-*")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # the export is under way once its staging folder exists
    assert proc.poll() is None, proc.communicate()[0]
    proc.send_signal(signum)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, output
    errors = [ln for ln in output.splitlines() if ln.startswith("error:")]
    assert errors == [f"error: stopped by {signal.Signals(signum).name}: outputs not yet complete were removed "
                      "(those already reported as written are whole)"], output
    assert "Traceback" not in output
    assert sorted(p.name for p in tmp_path.iterdir()) == [], list(tmp_path.iterdir())


# --- outputs -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["export", "-r", "sam_tiny", "--random-weights", "-o", "-"],
    ["calibrate", "{enc}", "-p", "int8", "--no-eager", "-o", "-"],
    ["validate", "{enc}", "--runs", "0", "--report", "-"],
    ["doctor", "--report", "-"],
], ids=["export -o", "calibrate -o", "validate --report", "doctor --report"])
def test_dash_is_not_an_output_file(sam_files: dict[str, Path], tmp_path: Path, args: list[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, output = run(*[a.format(enc=sam_files["enc"]) for a in args])
    one_error_line(code, output, "'-' as an output path would write a file named '-'", "./-")
    assert not (tmp_path / "-").exists()


def test_a_second_writer_of_one_output_is_refused_before_any_work(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / ".m.onnx.vitdeploy-lock").write_text(str(holder.pid))  # another live vitdeploy writes m.onnx
        code, output = run("export", "-r", "sam_tiny", "--random-weights", "-o", str(tmp_path / "m.onnx"))
        one_error_line(code, output, f"'{tmp_path / 'm.onnx'}' is being written by another vitdeploy process (pid {holder.pid})")
        assert not (tmp_path / "m.onnx").exists() and "exporting" not in output
    finally:
        holder.kill()
        holder.wait()
    # Its process is gone (SIGKILL leaves the lock): the lock is stale and taken over.
    code, output = run("export", "-r", "sam_tiny", "--random-weights", "-o", str(tmp_path / "m.onnx"))
    assert code == 0, output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]  # the lock went with the verb


def test_two_concurrent_exports_to_one_output_one_wins_one_is_told(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "vitdeploy", "export", "-r", "sam_tiny", "--random-weights", "-o", str(tmp_path / "same.onnx")]
    procs = [subprocess.Popen(command + ["--seed", str(seed)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for seed in (1, 2)]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 1], outputs
    loser = outputs[[p.returncode for p in procs].index(1)]
    assert "is being written by another vitdeploy process" in loser or "already exists" in loser, loser
    assert sorted(p.name for p in tmp_path.iterdir()) == ["same.onnx"]


def test_locks_last_a_verb_are_reentrant_and_the_python_api_takes_none(tmp_path: Path) -> None:
    with output_locks():
        claim_outputs([tmp_path / "a.json"], force=False)
        lock_output(tmp_path / "a.json")  # the same process again: fine
        assert (tmp_path / ".a.json.vitdeploy-lock").read_text() == str(os.getpid())
    assert not (tmp_path / ".a.json.vitdeploy-lock").exists()
    claim_outputs([tmp_path / "b.json"], force=False)  # a program using the API: no lock file left behind
    assert list(tmp_path.iterdir()) == []
    release_output_locks()


# --- prompts and images --------------------------------------------------------------------------------------

def test_a_reversed_box_is_refused_before_the_encoder_runs(sam_files: dict[str, Path], tmp_path: Path) -> None:
    code, output = run("predict", "-e", str(sam_files["enc"]), "-d", str(sam_files["dec"]), "-i", str(IMAGE),
                       "--box", "200,150,20,10", "-o", str(tmp_path / "m.png"))
    one_error_line(code, output, "is not x0, y0, x1, y1 with x0 <= x1 and y0 <= y1", "did you mean [20.0, 10.0, 200.0, 150.0]")
    assert "encoding" not in output and not list(tmp_path.iterdir())


def _bomb(path: Path, width: int, height: int) -> Path:
    """A PNG of a few dozen bytes whose header claims ``width`` x ``height`` pixels."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b""))
    return path


def test_a_decompression_bomb_is_refused_in_one_line_without_decoding(sam_files: dict[str, Path], tmp_path: Path) -> None:
    bomb = _bomb(tmp_path / "bomb.png", 100_000, 100_000)
    start = time.perf_counter()
    code, output = run("predict", "-e", str(sam_files["enc"]), "-d", str(sam_files["dec"]), "-i", str(bomb),
                       "--point", "1,1", "-o", str(tmp_path / "m.png"))
    one_error_line(code, output, "'bomb.png' is 100000x100000 (10000 megapixels), over this machine's limit",
                   "downscale it", "VITDEPLOY_MAX_IMAGE_PIXELS")
    assert time.perf_counter() - start < 20 and not (tmp_path / "m.png").exists()
    assert "DecompressionBomb" not in output


def test_the_image_limit_can_be_set_and_large_images_get_a_memory_note(sam_files: dict[str, Path], tmp_path: Path) -> None:
    picture = tmp_path / "wide.png"
    Image.fromarray(np.zeros((300, 400, 3), np.uint8)).save(picture)
    args = ["predict", "-e", str(sam_files["enc"]), "-d", str(sam_files["dec"]), "-i", str(picture), "--point", "10,10",
            "-o", str(tmp_path / "m.png")]
    code, output = run(*args, env={"VITDEPLOY_MAX_IMAGE_PIXELS": "100000"})
    one_error_line(code, output, "400x300 (0 megapixels), over this machine's limit of 0 megapixels "
                                 "(VITDEPLOY_MAX_IMAGE_PIXELS=100000")
    code, output = run(*args, env={"VITDEPLOY_MAX_IMAGE_PIXELS": "lots"})
    one_error_line(code, output, "VITDEPLOY_MAX_IMAGE_PIXELS='lots' is not a whole number")
    from vitdeploy.runtime.processing import images

    notes: list[str] = []
    images.check_pixels(picture, 12000, 9000, notes)  # a 108-megapixel photo: decoded, with the memory it takes
    assert notes == ["large image: 12000x9000 (108 megapixels); full-size masks take about 4.3 GiB of memory"]
    with pytest.raises(InputError, match="over this machine's limit"):
        images.check_pixels(picture, 10**6, 10**6, None)


LOCKER = """
import sys, time
from pathlib import Path
from vitdeploy.errors import InputError
from vitdeploy.fileio import claim_outputs, output_locks
start = float(sys.argv[2])
while time.time() < start:  # every process tries at the same instant
    pass
try:
    with output_locks():
        claim_outputs([Path(sys.argv[1])], force=False)
        time.sleep(1.0)
    print("won")
except InputError as exc:
    print("refused:", exc)
"""


def test_only_one_of_many_simultaneous_writers_wins(tmp_path: Path) -> None:
    """The race that once let two through: a lock file seen between its creation and the pid written into it."""
    target, start = tmp_path / "contended.onnx", time.time() + 3.0
    procs = [subprocess.Popen([sys.executable, "-c", LOCKER, str(target), str(start)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for _ in range(8)]
    outcomes = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert sum(o == "won" for o in outcomes) == 1, outcomes
    assert all(o == "won" or "is being written by another vitdeploy process" in o for o in outcomes), outcomes
    assert list(tmp_path.iterdir()) == []  # no lock, no private file left
