"""``vitdeploy benchmark``: statistics, batch handling, the report, and bad input, on eager PyTorch and ONNX Runtime.

TensorRT contenders are covered in tests/engine/test_engine_tensorrt.py (GPU). Timing values themselves are
machine noise; what is asserted is what the harness computes from them (ordering of percentiles,
throughput and speed-up from the medians) and what it must record.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.cli_helpers import run
from vitdeploy.benchmark.autocast import AutocastModule
from vitdeploy.benchmark.contenders import Contender, input_template
from vitdeploy.benchmark.harness import make_feeds, run_benchmark
from vitdeploy.errors import InputError
from vitdeploy.parity import compare

pytest_plugins = ["tests.sam_tiny_fixtures"]  # tiny_sam_artifacts


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from tests.conftest import TINY_RECIPE
    from vitdeploy.pipeline import export_from_recipe

    root = tmp_path_factory.mktemp("bench")
    (root / "tiny.toml").write_text(TINY_RECIPE)
    export_from_recipe(str(root / "tiny.toml"), root / "static.onnx", random_weights=True, seed=2)
    export_from_recipe(str(root / "tiny.toml"), root / "dynamic.onnx", random_weights=True, seed=2, dynamic_batch=True)
    return {"static": root / "static.onnx", "dynamic": root / "dynamic.onnx"}


class SleepRunner:
    """A runner whose latency is known: it sleeps ``ms`` per item of the batch."""

    def __init__(self, ms: float):
        self.ms, self.name = ms, f"sleep{ms}"
        self.input_names, self.output_names, self.metadata = ["image"], ["out"], {}

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        time.sleep(self.ms * feeds["image"].shape[0] / 1000)
        return {"out": feeds["image"]}


def test_statistics_throughput_and_speedup_follow_from_the_samples() -> None:
    slow = Contender("slow", SleepRunner(4.0), "test", "fp32", "cpu")
    fast = Contender("fast", SleepRunner(1.0), "test", "fp32", "cpu", batch_range=(1, 1), batch_note="static batch 1")
    rows = run_benchmark([slow, fast], {"image": ["batch", 2]}, [1, 2], runs=5, warmup=1)
    assert [(r.label, r.batch, r.skipped) for r in rows] == [
        ("slow", 1, None), ("fast", 1, None), ("slow", 2, None), ("fast", 2, "static batch 1")]
    for r in rows[:3]:
        lat = r.latency
        assert lat is not None and lat.runs == 5 and lat.warmup == 1
        assert lat.min_ms <= lat.median_ms <= lat.p90_ms <= lat.p99_ms
        assert r.throughput == pytest.approx(r.batch * 1000 / lat.median_ms)
    assert rows[0].speedup == 1.0 and rows[2].speedup == 1.0
    assert rows[1].speedup == pytest.approx(rows[0].latency.median_ms / rows[1].latency.median_ms)
    assert rows[1].speedup > 2  # 1 ms vs 4 ms of sleep: the ordering is not noise
    assert rows[2].latency.median_ms >= 8.0  # 2 items x 4 ms
    assert rows[3].latency is None and rows[3].to_dict()["throughput_per_s"] is None


def test_feeds_are_seeded_and_batched() -> None:
    a = make_feeds({"image": ["batch", 3, 8, 8]}, 4, seed=1)
    b = make_feeds({"image": ["batch", 3, 8, 8]}, 4, seed=1)
    assert a["image"].shape == (4, 3, 8, 8) and a["image"].dtype == np.float32
    np.testing.assert_array_equal(a["image"], b["image"])
    with pytest.raises(InputError, match="symbolic axis besides the batch"):
        make_feeds({"points": ["batch", "n", 2]}, 1)
    with pytest.raises(InputError, match="--runs must be at least 1"):
        run_benchmark([Contender("x", SleepRunner(0), "t", "fp32", "cpu")], {"image": ["batch", 1]}, [1], runs=0)


def test_input_template_marks_the_batch(models: dict[str, Path]) -> None:
    from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner

    assert input_template(OnnxRuntimeRunner(models["static"])) == {"image": ["batch", 3, 64, 64]}
    assert input_template(OnnxRuntimeRunner(models["dynamic"])) == {"image": ["batch", 3, 64, 64]}


def test_autocast_baseline_stays_close_to_fp32_and_returns_float32() -> None:
    from tests.conftest import tiny_encoder

    encoder = tiny_encoder(seed=4).eval()
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        ref = encoder(x)
        low = AutocastModule(encoder, "cpu", "bf16")(x)
    assert low.dtype == torch.float32
    result = compare(ref, low, "int8", label="bf16 autocast")  # bf16 keeps 8 mantissa bits: judged by direction
    assert result and result.rel_l2 > 0, result.summary()  # and it did run in lower precision
    with pytest.raises(ValueError, match="autocast precision must be one of"):
        AutocastModule(encoder, "cpu", "fp8")


def test_cli_table_and_report(models: dict[str, Path], tmp_path: Path) -> None:
    report = tmp_path / "bench.json"
    code, output = run("benchmark", str(models["static"]), str(models["dynamic"]), "--batch", "1", "--batch", "2",
                       "--eager-precision", "fp32", "--eager-precision", "bf16", "--runs", "3", "--warmup", "1",
                       "--threads", "2", "--report", str(report))
    assert code == 0, output
    assert "RANDOM WEIGHTS" in output and "median ms" in output and "skipped: static batch 1" in output
    data = json.loads(report.read_text())
    assert data["settings"]["runs"] == 3 and data["settings"]["batches"] == [1, 2] and "synchronized" in data["settings"]["timing"]
    env = data["environment"]
    assert env["threads"] == 2 and env["devices"] == ["cpu"] and env["versions"]["onnxruntime"] and env["versions"]["torch"]
    assert all(p == ["CPUExecutionProvider"] for p in env["onnxruntime_providers"].values())
    rows = data["rows"]
    assert [(r["backend"], r["precision"], r["batch"]) for r in rows] == [
        ("torch", "fp32", 1), ("torch", "bf16", 1), ("onnxruntime", "fp32", 1), ("onnxruntime", "fp32", 1),
        ("torch", "fp32", 2), ("torch", "bf16", 2), ("onnxruntime", "fp32", 2), ("onnxruntime", "fp32", 2)]
    static_b2 = rows[6]
    assert static_b2["skipped"].startswith("static batch 1") and static_b2["latency"] is None
    timed = [r for r in rows if r["latency"]]
    assert all(r["latency"]["median_ms"] <= r["latency"]["p99_ms"] for r in timed)
    assert rows[0]["speedup_vs_baseline"] == 1.0 and rows[4]["speedup_vs_baseline"] == 1.0


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["{d}/absent.onnx"], "absent.onnx' not found"),
        (["{d}/notes.txt"], "is neither an ONNX model"),
        (["{static}", "--no-eager", "--eager-precision", "bf16"], "--eager-precision needs the eager baseline"),
        (["{static}", "--report", "{d}/no_dir/r.json"], "does not exist"),
    ],
)
def test_cli_bad_input(models: dict[str, Path], tmp_path: Path, args: list[str], needle: str) -> None:
    (tmp_path / "notes.txt").write_text("x")
    code, output = run("benchmark", *[a.format(d=tmp_path, static=models["static"]) for a in args], "--runs", "1")
    assert code == 1, output
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and needle in errors[0] and "Traceback" not in output, output


@pytest.mark.skipif("CUDAExecutionProvider" in __import__("onnxruntime").get_available_providers(),
                    reason="this ONNX Runtime has the CUDA provider, so --device cuda is not an error here")
def test_cli_device_cuda_without_cuda_onnxruntime(models: dict[str, Path]) -> None:
    code, output = run("benchmark", str(models["static"]), "--device", "cuda", "--runs", "1")
    assert code == 1 and "needs ONNX Runtime's CUDAExecutionProvider, which this install lacks" in output, output


def test_cli_usage_and_help() -> None:
    assert run("benchmark")[0] == 2
    assert run("benchmark", "m.onnx", "--eager-precision", "fp8")[0] == 2
    code, output = run("benchmark", "--help")
    assert code == 0 and "vitdeploy benchmark sam_vit_b.onnx --runs 10" in output


def test_the_decoder_is_benchmarked_at_given_point_counts(tiny_sam_artifacts, tmp_path) -> None:
    """benchmark refused the decoder (dynamic num_points); --shapes gives the sizes, as trtexec's --shapes does."""
    from click.testing import CliRunner

    from vitdeploy.cli import cli

    decoder = str(tiny_sam_artifacts.decoder)
    refused = CliRunner().invoke(cli, ["benchmark", decoder, "--no-eager", "--runs", "1"])
    assert refused.exit_code == 1 and "--shapes point_coords:1x" in refused.output, refused.output
    for bad, needle in (("point_coords:1x5", "does not fit"), ("nosuch:1x2", "not inputs of the model"),
                        ("point_coords=1x5x2", "is not NAME:DxDx")):
        result = CliRunner().invoke(cli, ["benchmark", decoder, "--no-eager", "--shapes", bad])
        assert result.exit_code == 1 and needle in result.output, (bad, result.output)
    report = tmp_path / "b.json"
    timed = CliRunner().invoke(cli, ["benchmark", decoder, "--runs", "2", "--warmup", "1", "--threads", "1",
                                     "--shapes", "point_coords:1x5x2", "--shapes", "point_labels:1x5", "--report", str(report)])
    assert timed.exit_code == 0, timed.output
    import json

    data = json.loads(report.read_text())
    assert data["settings"]["input_shapes"]["point_coords"] == [5, 2]
    timed = [row for row in data["rows"] if row["latency"] is not None]
    assert [row["backend"] for row in timed] == ["torch", "onnxruntime"], data["rows"]
    assert all(row["latency"]["median_ms"] > 0 and row["skipped"] is None for row in timed), data["rows"]
