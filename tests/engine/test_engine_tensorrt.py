"""TensorRT end to end on a GPU: build, sidecar, runner parity, profiles, cache, log, and every bad input.

Marked ``tensorrt`` and ``gpu``; they skip (with the reason) where TensorRT or a GPU is missing and run
unchanged where both exist (``scripts/gpu-check.sh`` runs them with ``-m "tensorrt or gpu"``), with the
library ``build-engine --builder auto`` takes there: classic TensorRT where it imports, else TensorRT for
RTX (whose build side test_engine_tensorrt_rtx.py also runs without a GPU).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import helper

from tests.cli_helpers import run
from tests.conftest import IR_VERSION
from vitdeploy.doctor import tensorrt_unavailable_reason
from vitdeploy.engine.builder import BuildOptions, build_engine
from vitdeploy.engine.library import load_library
from vitdeploy.engine.profiles import BatchProfile
from vitdeploy.engine.sidecar import sidecar_path
from vitdeploy.errors import EngineError, InputError
from vitdeploy.fileio import sha256_file
from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner
from vitdeploy.runtime.backends.tensorrt_runner import TensorRTRunner
from vitdeploy.parity import compare

TRT_REASON = tensorrt_unavailable_reason()
LIB = None if TRT_REASON else load_library("auto", "the GPU tests")
pytestmark = [pytest.mark.tensorrt, pytest.mark.gpu,
              pytest.mark.skipif(TRT_REASON is not None, reason=f"needs TensorRT and a GPU: {TRT_REASON}")]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from tests.conftest import TINY_RECIPE
    from vitdeploy.pipeline import export_from_recipe

    root = tmp_path_factory.mktemp("trt")
    (root / "tiny.toml").write_text(TINY_RECIPE)
    export_from_recipe(str(root / "tiny.toml"), root / "static.onnx", random_weights=True, seed=11, layernorm2d="native")
    export_from_recipe(str(root / "tiny.toml"), root / "dynamic.onnx", random_weights=True, seed=11, dynamic_batch=True,
                       layernorm2d="native")
    return {"static": root / "static.onnx", "dynamic": root / "dynamic.onnx", "root": root}


@pytest.fixture(scope="module")
def fp32_plan(models: dict[str, Path]) -> Path:
    plan = models["root"] / "static.plan"
    build_engine(models["static"], plan)
    return plan


def _image(batch: int = 1, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 3, 64, 64)).astype(np.float32)


def _eager(onnx_path: Path, x: np.ndarray) -> np.ndarray:
    from vitdeploy.families import eager_reference
    from vitdeploy.validation.torch_runner import TorchRunner

    meta = OnnxRuntimeRunner(onnx_path).metadata
    return TorchRunner(eager_reference(meta), ["image"], ["image_embeddings"]).run({"image": x})["image_embeddings"]


def test_fp32_engine_sidecar_and_parity_with_eager(models: dict[str, Path], fp32_plan: Path) -> None:
    from vitdeploy.cuda import query_gpu

    side = json.loads(sidecar_path(fp32_plan).read_text())
    gpu = query_gpu(0)
    assert side["tensorrt"] == {"version": LIB.version, "library": LIB.name}
    if LIB.targets_compute_capabilities:  # built ahead of time for compute capabilities, not on this GPU
        assert side["gpu"]["name"] is None and side["gpu"]["targets"]
    else:
        assert side["gpu"]["name"] == gpu.name and side["gpu"]["compute_capability"] == gpu.compute_capability
    assert side["precision"] == "fp32" and side["network"] == "strongly_typed"
    assert side["onnx"]["sha256"] == sha256_file(models["static"])
    assert side["plan"]["sha256"] == sha256_file(fp32_plan) and side["plan"]["size_bytes"] == fp32_plan.stat().st_size
    assert side["metadata"]["family"] == "sam_image_encoder" and side["build_options"]["tf32"] is False
    runner = TensorRTRunner(fp32_plan)
    assert runner.metadata["precision"] == "fp32"
    assert runner.warnings == []  # a GPU TensorRT-RTX runs nothing on (an H100, 9.0) skips this module (TRT_REASON)
    for seed in (0, 1):
        x = _image(seed=seed)
        result = compare(_eager(models["static"], x), runner.run({"image": x})["image_embeddings"], "fp32", label=f"trt fp32 {seed}")
        assert result, result.summary()
    runner.close()
    with pytest.raises(InputError, match="is closed"):
        runner.run({"image": _image()})


def test_fp16_onnx_builds_a_strongly_typed_fp16_engine(models: dict[str, Path]) -> None:
    float16 = pytest.importorskip("onnxconverter_common.float16", reason="onnxconverter-common makes the FP16 test graph")
    fp16_path = models["root"] / "static_fp16.onnx"
    onnx.save(float16.convert_float_to_float16(onnx.load(str(models["static"])), keep_io_types=True), str(fp16_path))
    plan = models["root"] / "static_fp16.plan"
    result = build_engine(fp16_path, plan)
    assert result.sidecar["precision"] == "fp16"
    x = _image(seed=2)
    parity = compare(_eager(models["static"], x), TensorRTRunner(plan).run({"image": x})["image_embeddings"], "fp16")
    assert parity, parity.summary()


def test_bf16_onnx_from_calibrate_builds_a_bf16_engine_within_the_bf16_budget(models: dict[str, Path]) -> None:
    """``calibrate -p bf16`` -> a strongly typed BF16 engine (compute capability 8.0+) whose embeddings meet the
    'bf16' budget against the eager official model, as the CPU emulation measured when the file was written."""
    bf16_path = models["root"] / "static_bf16.onnx"
    code, output = run("calibrate", str(models["static"]), "-p", "bf16", "-o", str(bf16_path), "--no-eager",
                       "--max-images", "10")
    assert code == 0, output
    plan = models["root"] / "static_bf16.plan"
    result = build_engine(bf16_path, plan)
    assert result.sidecar["precision"] == "bf16"
    runner = TensorRTRunner(plan)
    for seed in (4, 5):
        x = _image(seed=seed)
        parity = compare(_eager(models["static"], x), runner.run({"image": x})["image_embeddings"], "bf16", label=f"bf16 {seed}")
        assert parity, parity.summary()
    runner.close()


def test_legacy_fp16_follows_the_installed_tensorrt(models: dict[str, Path]) -> None:
    plan = models["root"] / "legacy.plan"
    if not LIB.weak_typing:
        with pytest.raises(InputError, match="--legacy-fp16 (needs TensorRT 10|is a TensorRT 10 option)"):
            build_engine(models["static"], plan, BuildOptions(legacy_fp16=True))
        return
    result = build_engine(models["static"], plan, BuildOptions(legacy_fp16=True))
    assert result.sidecar["network"] == "weakly_typed_fp16" and result.sidecar["precision"] == "fp16"
    x = _image(seed=3)
    parity = compare(_eager(models["static"], x), TensorRTRunner(plan).run({"image": x})["image_embeddings"], "fp16")
    assert parity, parity.summary()


def test_dynamic_batch_profile(models: dict[str, Path]) -> None:
    plan = models["root"] / "dynamic.plan"
    result = build_engine(models["dynamic"], plan, BuildOptions(batch_profile=BatchProfile(1, 2, 4)))
    assert result.sidecar["profiles"] == [{"image": {"min": [1, 3, 64, 64], "opt": [2, 3, 64, 64], "max": [4, 3, 64, 64]}}]
    runner = TensorRTRunner(plan)
    assert runner.input_range("image") == ((1, 3, 64, 64), (4, 3, 64, 64))
    ort = OnnxRuntimeRunner(models["dynamic"])
    for batch in (1, 3, 4):
        x = _image(batch, seed=batch)
        parity = compare(ort.run({"image": x})["image_embeddings"], runner.run({"image": x})["image_embeddings"], "fp32")
        assert parity, parity.summary()
    with pytest.raises(InputError, match=r"between \[1, 3, 64, 64\] and \[4, 3, 64, 64\]"):
        runner.run({"image": _image(5)})


def test_timing_cache_is_written_then_reused_and_log_file_is_full(models: dict[str, Path]) -> None:
    if not LIB.has_timing_cache:
        pytest.skip("TensorRT-RTX has no timing cache (its refusal is tested in test_engine_tensorrt_rtx.py)")
    root = models["root"]
    cache, log = root / "trt.cache", root / "build.log"
    code, output = run("build-engine", str(models["static"]), "-o", str(root / "c1.plan"), "--timing-cache", str(cache),
                       "--log-file", str(log), "--optimization-level", "1", "--workspace", "512")
    assert code == 0, output
    assert "new, written after the build" in output and cache.stat().st_size > 0
    text = log.read_text()
    assert "[vitdeploy] vitdeploy build-engine" in text and ("[V]" in text or "[I]" in text)
    code, output = run("build-engine", str(models["static"]), "-o", str(root / "c2.plan"), "--timing-cache", str(cache))
    assert code == 0 and "reusing" in output, output


def test_engine_from_another_tensorrt_or_gpu_is_refused(models: dict[str, Path], fp32_plan: Path, tmp_path: Path) -> None:
    plan = tmp_path / "copy.plan"
    plan.write_bytes(fp32_plan.read_bytes())
    side = json.loads(sidecar_path(fp32_plan).read_text())
    side["tensorrt"]["version"] = "9.0.1"
    sidecar_path(plan).write_text(json.dumps(side))
    with pytest.raises(EngineError, match="was built with TensorRT(-RTX)? 9.0.1 and this is TensorRT"):
        TensorRTRunner(plan)
    side = json.loads(sidecar_path(fp32_plan).read_text())
    side["gpu"] = {"name": "NVIDIA Imaginary", "compute_capability": "1.0", "targets": ["7.5"] if LIB.targets_compute_capabilities else None}
    sidecar_path(plan).write_text(json.dumps(side))
    wrong_gpu = "built for compute capability 7.5 and this GPU" if LIB.targets_compute_capabilities else "built on NVIDIA Imaginary .* do not move between GPU architectures"
    with pytest.raises(EngineError, match=wrong_gpu):
        TensorRTRunner(plan)
    assert TensorRTRunner(plan, check_compatibility=False).run({"image": _image()})["image_embeddings"].shape == (1, 16, 8, 8)


def test_truncated_plan_is_refused(fp32_plan: Path, tmp_path: Path) -> None:
    plan = tmp_path / "cut.plan"
    plan.write_bytes(fp32_plan.read_bytes()[:4096])
    sidecar_path(plan).write_text(sidecar_path(fp32_plan).read_text())
    with pytest.raises(EngineError, match="the plan is truncated"):
        TensorRTRunner(plan)


def test_onnx_tensorrt_rejects_names_the_node(tmp_path: Path) -> None:
    node = helper.make_node("NoSuchOp", ["x"], ["y"], name="/bad/NoSuchOp", domain="vitdeploy.test")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("vitdeploy.test", 1)],
                              ir_version=IR_VERSION)
    onnx.save(model, str(tmp_path / "bad.onnx"))
    code, output = run("build-engine", str(tmp_path / "bad.onnx"), "-o", str(tmp_path / "bad.plan"))
    assert code == 1, output
    assert "cannot parse 'bad.onnx'" in output and "NoSuchOp" in output
    assert not (tmp_path / "bad.plan").exists()


def test_benchmark_times_the_engine_with_the_others(models: dict[str, Path], fp32_plan: Path, tmp_path: Path) -> None:
    code, output = run("benchmark", str(models["static"]), str(fp32_plan), "--runs", "3", "--warmup", "1",
                       "--report", str(tmp_path / "b.json"))
    assert code == 0, output
    rows = json.loads((tmp_path / "b.json").read_text())["rows"]
    trt_rows = [r for r in rows if r["backend"] == "tensorrt"]
    assert trt_rows and trt_rows[0]["latency"]["median_ms"] > 0 and trt_rows[0]["device"].startswith("cuda:0")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="PyTorch sees no CUDA GPU (a CPU-only build or no driver)")
def test_benchmark_eager_autocast_on_the_gpu(models: dict[str, Path], fp32_plan: Path, tmp_path: Path) -> None:
    code, output = run("benchmark", str(fp32_plan), "--device", "cuda", "--eager-precision", "fp32",
                       "--eager-precision", "fp16", "--runs", "3", "--warmup", "1", "--report", str(tmp_path / "g.json"))
    assert code == 0, output
    labels = [r["label"] for r in json.loads((tmp_path / "g.json").read_text())["rows"]]
    assert labels[:2] == ["torch-eager fp32 cuda", "torch-eager fp16 autocast cuda"]
