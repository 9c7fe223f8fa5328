"""ONNX Runtime's CUDA provider on a GPU: every family through ``--device cuda`` against the official eager model,
FP32 meaning FP32 (TF32 only when asked for), and no quiet fall-back to the CPU.

Marked ``gpu``: skipped (with the reason) without onnxruntime-gpu and an NVIDIA GPU; ``pytest -m gpu`` runs them
unchanged where both exist (``scripts/gpu-check.sh`` does, with or without TensorRT).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import (IR_VERSION, TINY_TIMM_RECIPE, assert_matches_official, export_tiny_targets, max_abs_rel,
                            tiny_encoder)
from vitdeploy.cli import cli
from vitdeploy.metadata import encode
from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner


def _cuda_reason() -> str | None:
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return f"this onnxruntime {ort.__version__} has no CUDAExecutionProvider (pip install onnxruntime-gpu)"
    if not torch.cuda.is_available():
        return "no NVIDIA GPU visible (torch.cuda.is_available() is False)"
    return None


CUDA_REASON = _cuda_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(CUDA_REASON is not None, reason=f"needs a CUDA GPU: {CUDA_REASON}")]

#: A K=4096 FP32 GEMM is within 1e-5 of float64 (3.5e-7 on the CPU); TF32's 10-bit mantissa inputs err ~1e-3, so
#: "TF32 took effect" means > 1e-4. Both bounds held on an H100 (onnxruntime-gpu 1.31.1, 2026-11-24).
FP32_GEMM_MAX_REL = 1e-5
TF32_GEMM_MIN_REL = 1e-4
IMAGES = Path(__file__).resolve().parents[3] / "calibration" / "images"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


@pytest.mark.parametrize("target", ["generic", "tensorrt"])
def test_verified_encoder_targets_match_official_on_cuda_in_fp32(tmp_path: Path, target: str) -> None:
    path = export_tiny_targets(tmp_path, "padded_windows", seed=5, targets=(target,))[target]
    runner = OnnxRuntimeRunner(path, device="cuda")
    assert runner.session.get_providers()[0] == "CUDAExecutionProvider"
    assert "TF32 off" in runner.provider and "H100" in runner.provider
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    assert_matches_official(tiny_encoder("padded_windows", seed=5), runner, x, f"cuda/{target}")


def _matmul_model(path: Path, k: int) -> tuple[Path, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, k)).astype(np.float32)
    b = rng.standard_normal((k, 64)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "gemm",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [64, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])],
                              [numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)
    for key, value in encode({"family": "unknown", "precision": "fp32"}).items():
        model.metadata_props.add(key=key, value=value)
    onnx.save(model, path)
    return path, a, b


def test_fp32_means_fp32_and_tf32_only_when_asked(tmp_path: Path) -> None:
    path, a, b = _matmul_model(tmp_path / "gemm.onnx", k=4096)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    fp32 = OnnxRuntimeRunner(path, device="cuda", allow_unverified=True).run({"a": a})["y"]
    tf32 = OnnxRuntimeRunner(path, device="cuda", allow_unverified=True, tf32=True).run({"a": a})["y"]
    fp32_err, tf32_err = max_abs_rel(fp32, exact), max_abs_rel(tf32, exact)
    assert fp32_err <= FP32_GEMM_MAX_REL, f"use_tf32=0 still erred {fp32_err:.2e} (TF32 kept?)"
    assert tf32_err >= TF32_GEMM_MIN_REL, f"tf32=True erred only {tf32_err:.2e}: the switch did nothing"


def _export(tmp_path: Path, recipe: str, name: str, *extra: str) -> Path:
    out = tmp_path / f"{name}.onnx"
    code, output = run("export", "--recipe", recipe, "--random-weights", "--seed", "3", "-o", str(out), *extra)
    assert code == 0, output
    return out


def _validate_on_cuda(model: Path, *extra: str) -> str:
    code, output = run("validate", str(model), "--device", "cuda", "--runs", "2", *extra)
    assert code == 0, output
    assert "runs on CUDAExecutionProvider, TF32 off" in output, output
    assert "parity: all comparisons within tolerance" in output, output
    return output


def test_cli_validate_on_cuda_sam_encoder_and_decoder(tmp_path: Path) -> None:
    encoder = _export(tmp_path, "sam_tiny", "encoder")
    assert "NOT verified" not in _validate_on_cuda(encoder, "--images", str(IMAGES))
    decoder = _export(tmp_path, "sam_tiny_decoder", "decoder")
    assert "NOT verified" not in _validate_on_cuda(decoder)


def test_cli_validate_on_cuda_timm_vit(tmp_path: Path) -> None:
    recipe = tmp_path / "tiny_vit.toml"
    recipe.write_text(TINY_TIMM_RECIPE)
    assert "NOT verified" in _validate_on_cuda(_export(tmp_path, str(recipe), "vit"))  # validate is the check, so it runs


@pytest.mark.parametrize("recipe", ["sam3_tiny", "sam3_tiny_text", "sam3_tiny_interactive"])
def test_cli_validate_on_cuda_sam3_parts_verified_on_an_h200(tmp_path: Path, recipe: str) -> None:
    """SAM 3's vision encoder (and its FP16 file), text encoder and interactive decoder: verified on CUDA from full-size
    runs on an H200 (2026-11-28), so ``--device cuda`` runs them without --allow-unverified, within the budgets."""
    pytest.importorskip("sam3", reason="the official sam3 package is not installed")
    model = _export(tmp_path, recipe, recipe)
    images = ("--images", str(IMAGES)) if recipe == "sam3_tiny" else ()
    assert "NOT verified" not in _validate_on_cuda(model, *images)
    if recipe == "sam3_tiny":
        fp16 = tmp_path / "sam3_tiny.fp16.onnx"
        code, output = run("calibrate", str(model), "-p", "fp16", "-o", str(fp16), "--holdout", "2", "--no-eager")
        assert code == 0, output
        assert "NOT verified" not in _validate_on_cuda(fp16, *images)


@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_cli_calibrated_files_validate_on_cuda(tmp_path: Path, precision: str) -> None:
    fp32 = _export(tmp_path, "sam_tiny", "encoder")
    out = tmp_path / f"encoder.{precision}.onnx"
    code, output = run("calibrate", str(fp32), "-p", precision, "-o", str(out), "--holdout", "2", "--no-eager")
    assert code == 0, output
    _validate_on_cuda(out, "--images", str(IMAGES))  # the tolerance named by the file's precision


def test_cli_benchmark_on_cuda_against_eager_on_the_gpu(tmp_path: Path) -> None:
    encoder = _export(tmp_path, "sam_tiny", "encoder")
    code, output = run("benchmark", str(encoder), "--device", "cuda", "--eager-precision", "fp32",
                       "--eager-precision", "fp16", "--runs", "5", "--warmup", "2")
    assert code == 0, output
    assert "torch-eager fp16 autocast cuda" in output and "onnxruntime-cuda fp32" in output, output


def test_cpu_only_target_is_refused_on_cuda_even_when_allowed(tmp_path: Path) -> None:
    path = export_tiny_targets(tmp_path, "padded_windows", seed=5, targets=("onnxruntime-cpu",))["onnxruntime-cpu"]
    code, output = run("validate", str(path), "--device", "cuda", "--runs", "0")
    assert code == 1 and "runs on the CPU only" in output, output
