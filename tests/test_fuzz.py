"""Seeded fuzzing of damaged artifacts and images through the real verbs: never a traceback, never "a vitdeploy
bug", never a death by signal or a hang. Bounded: a fixed number of cases, one worker process, a time limit.

Mutations (tests/fuzz_worker.py): byte-flipped and truncated ONNX files through inspect, validate and predict;
metadata values of the wrong type, or contradicting the graph, through the same three; engine sidecars with
fields removed or retyped and plans flipped, through inspect; byte-flipped JPEG and PNG images through predict;
deployment profiles with a field removed or retyped through predict; SAM 2 decoders with metadata of the wrong type
and damaged frame folders (gaps, bad names, directories, empty, other-size and flipped frames, dangling links)
through track; image lists with missing files, folders, devices and junk lines through embed.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import TINY_RECIPE
from tests.sam_tiny import DECODER_RECIPE
from vitdeploy.cli import cli

COUNTS = {"onnx": 60, "metadata": 36, "sidecar": 40, "image": 30, "profile": 30, "sam2": 12, "frames": 12, "list": 12}
SEED = 20261124
TIME_LIMIT_S = 600


pytest_plugins = ["tests.sam2_video_fixtures"]


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    from vitdeploy.engine.sidecar import make_sidecar, write_sidecar

    work = tmp_path_factory.mktemp("fuzz")
    (work / "tiny.toml").write_text(TINY_RECIPE)
    (work / "tiny_decoder.toml").write_text(DECODER_RECIPE)  # the decoder of that encoder: images reach the decoder
    for name, recipe in (("enc", str(work / "tiny.toml")), ("dec", str(work / "tiny_decoder.toml"))):
        result = CliRunner().invoke(cli, ["export", "-r", recipe, "--random-weights", "-o", str(work / f"{name}.onnx")])
        assert result.exit_code == 0, result.output
    # A plan with the sidecar vitdeploy would write (the bytes are not an engine: inspect reads sidecars only).
    plan = work / "enc.plan"
    content = b"\x00vitdeploy-fuzz-plan" * 64
    plan.write_bytes(content)
    write_sidecar(plan, make_sidecar(
        plan_file=plan.name, plan_size=len(content), plan_sha256=hashlib.sha256(content).hexdigest(), onnx_file="enc.onnx",
        onnx_sha256="0" * 64, external_data={}, metadata={"family": "sam_image_encoder", "input_size": [64, 64],
                                                            "precision": "fp32", "input_name": "image"},
        precision="fp32", network="strongly_typed", tensorrt_version="1.7.1.116", tensorrt_library="tensorrt-rtx",
        gpu={"name": None, "compute_capability": None, "targets": ["8.6"]}, profiles=[],
        io={"inputs": [{"name": "image", "dtype": "float32", "shape": [1, 3, 64, 64]}], "outputs": []},
        build_options={}, build_seconds=0.1,
        layers={"count": 1, "by_precision": {"fp32": 1}, "by_type_and_precision": {"gemm:fp32": 1}, "list": []}))
    try:  # the SAM 2 graphs the run exports once (needs the official sam2 package), for track's cases
        sam2_video = request.getfixturevalue("sam2_video")
    except pytest.skip.Exception:
        return work
    files = {k: str(sam2_video[k]) for k in ("encoder", "decoder", "memory_encoder", "memory_attention")}
    (work / "sam2.json").write_text(json.dumps(files))
    return work


def test_damaged_files_and_images_never_crash_a_verb(fuzz_dir: Path) -> None:
    worker = Path(__file__).with_name("fuzz_worker.py")
    try:
        done = subprocess.run([sys.executable, str(worker), str(fuzz_dir), str(SEED), json.dumps(COUNTS)],
                              capture_output=True, text=True, timeout=TIME_LIMIT_S)
    except subprocess.TimeoutExpired:
        last = (fuzz_dir / "progress.txt").read_text().splitlines()[-1:]
        pytest.fail(f"the fuzz worker hung for {TIME_LIMIT_S} s at {last}")
    progress = (fuzz_dir / "progress.txt").read_text().splitlines()
    assert done.returncode == 0, f"worker died (exit {done.returncode}) at case {progress[-1:]}: {done.stderr[-2000:]}"
    assert progress[-1] == "DONE"
    rows = [json.loads(line) for line in (fuzz_dir / "results.jsonl").read_text().splitlines()]
    expected = {k: n for k, n in COUNTS.items() if (fuzz_dir / "sam2.json").is_file() or k not in ("sam2", "frames")}
    assert len(rows) == sum(expected.values())
    bad = [r for r in rows if r["traceback"] or r["bug"] or r["exit"] not in (0, 1)]
    outcomes = Counter((r["case"].split()[0], r["exit"]) for r in rows)
    print(f"fuzz: {len(rows)} cases, outcomes {dict(sorted(outcomes.items()))}")
    assert not bad, "\n".join(f"{r['case']}: exit {r['exit']}: {r['error']}" for r in bad[:15])
    # Refused files are refused in one line that names something: no bare "error:".
    assert all(len(r["error"]) > len("error: ") + 10 for r in rows if r["exit"] == 1)
    # The cases reach what they aim at: some damaged images still decode into masks, some are refused.
    images = Counter(r["exit"] for r in rows if r["case"].startswith("image"))
    assert images[0] > 0 and images[1] > 0, images
