"""One Runner interface for eager PyTorch, ONNX Runtime and TensorRT, and the TensorRT runner's load checks.

The conformance test runs every backend available here on the same tiny SAM encoder (TensorRT is a
marked case that skips without TensorRT and a GPU, and runs unchanged with them). The load checks
run the real TensorRTRunner on real files up to the point where TensorRT would be needed.
"""

from __future__ import annotations

import json

import hashlib
import sys
from pathlib import Path

import numpy as np
import pytest

from vitdeploy.doctor import tensorrt_unavailable_reason
from vitdeploy.engine.sidecar import make_sidecar, write_sidecar
from vitdeploy.errors import EngineError, InputError, MissingDependencyError
from vitdeploy.runtime.deploy.loader import open_runner
from vitdeploy.runtime.backends.base import Runner
from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner
from vitdeploy.runtime.backends.tensorrt_runner import TensorRTRunner, check_feed
from vitdeploy.parity import compare

TRT_REASON = tensorrt_unavailable_reason()


@pytest.fixture(scope="module")
def tiny_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.conftest import TINY_RECIPE
    from vitdeploy.pipeline import export_from_recipe

    root = tmp_path_factory.mktemp("runners")
    (root / "tiny.toml").write_text(TINY_RECIPE)
    export_from_recipe(str(root / "tiny.toml"), root / "tiny.onnx", random_weights=True, seed=5)
    return root / "tiny.onnx"


def _runner(kind: str, model: Path) -> Runner:
    if kind == "onnxruntime":
        return OnnxRuntimeRunner(model, threads=2)
    if kind == "torch-eager":
        from vitdeploy.families import eager_reference
        from vitdeploy.validation.torch_runner import TorchRunner

        ort = OnnxRuntimeRunner(model, threads=2)
        return TorchRunner(eager_reference(ort.metadata), ort.input_names, ort.output_names, threads=2, metadata=ort.metadata)
    from vitdeploy.engine.builder import build_engine

    plan = model.with_suffix(".plan")
    if not plan.exists():
        build_engine(model, plan)
    return TensorRTRunner(plan)


@pytest.mark.parametrize(
    "kind",
    ["onnxruntime", "torch-eager",
     pytest.param("tensorrt", marks=[pytest.mark.tensorrt, pytest.mark.gpu,
                                     pytest.mark.skipif(TRT_REASON is not None, reason=f"needs TensorRT and a GPU: {TRT_REASON}")])],
)
def test_every_backend_speaks_the_runner_interface(kind: str, tiny_onnx: Path) -> None:
    runner = _runner(kind, tiny_onnx)
    assert isinstance(runner, Runner)
    assert runner.input_names == ["image"] and runner.output_names == ["image_embeddings"]
    assert runner.metadata["family"] == "sam_image_encoder" and runner.metadata["variant"] == "tiny"
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
    out = runner.run({"image": x})
    assert set(out) == {"image_embeddings"}
    y = out["image_embeddings"]
    assert y.shape == (1, 16, 8, 8) and y.dtype == np.float32 and np.isfinite(y).all()
    reference = OnnxRuntimeRunner(tiny_onnx, threads=2).run({"image": x})["image_embeddings"]
    result = compare(reference, y, "fp32", label=kind)
    assert result, result.summary()
    if kind != "torch-eager":  # TorchRunner is validation's runner; the deployed runners check their feeds
        with pytest.raises(InputError, match=r"missing inputs \['image'\]"):
            runner.run({})


def test_open_runner_picks_the_backend_by_suffix(tiny_onnx: Path, tmp_path: Path) -> None:
    assert isinstance(open_runner(tiny_onnx, threads=1), OnnxRuntimeRunner)
    with pytest.raises(InputError, match=r"'m\.bin' is neither an ONNX model \(\.onnx\) nor a TensorRT engine"):
        open_runner(tmp_path / "m.bin")


def _fake_plan(tmp_path: Path, content: bytes = b"\x00plan" * 100) -> Path:
    plan = tmp_path / "m.plan"
    plan.write_bytes(content)
    write_sidecar(plan, make_sidecar(
        plan_file=plan.name, plan_size=len(content), plan_sha256=hashlib.sha256(content).hexdigest(), onnx_file="m.onnx",
        onnx_sha256="0" * 64, external_data={}, metadata={"family": "sam_image_encoder"}, precision="fp32",
        network="strongly_typed", tensorrt_version="10.13.0.35", gpu={"name": "NVIDIA L4", "compute_capability": "8.9"},
        profiles=[], io={"inputs": [], "outputs": []}, build_options={}, build_seconds=1.0))
    return plan


def test_tensorrt_runner_checks_files_before_importing_tensorrt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    with pytest.raises(InputError, match=r"engine file '.*none\.plan' not found"):
        TensorRTRunner(tmp_path / "none.plan")
    plan = _fake_plan(tmp_path)
    with pytest.raises(MissingDependencyError, match="running 'm.plan' needs the 'tensorrt' package"):
        TensorRTRunner(plan)
    side = json.loads((tmp_path / "m.plan.json").read_text())
    side["tensorrt"]["library"] = "tensorrt-rtx"  # the sidecar decides which library loads the plan
    (tmp_path / "m.plan.json").write_text(json.dumps(side))
    monkeypatch.setitem(sys.modules, "tensorrt_rtx_bindings", None)
    with pytest.raises(MissingDependencyError, match="running 'm.plan' needs the 'tensorrt-rtx' package.*vitdeploy\\[tensorrt-rtx\\]"):
        TensorRTRunner(plan)
    plan.write_bytes(plan.read_bytes()[:-7])
    with pytest.raises(EngineError, match="the plan is truncated or was replaced"):
        TensorRTRunner(plan)
    (tmp_path / "m.plan.json").unlink()
    with pytest.raises(EngineError, match="has no sidecar"):
        TensorRTRunner(plan)


def test_check_feed_casts_float_widths_and_rejects_the_rest() -> None:
    f16 = np.dtype(np.float16)
    x = np.ones((2, 3), np.float32)
    out = check_feed("x", x, f16, (1, 3), (4, 3))
    assert out.dtype == f16 and out.flags.c_contiguous
    strided = np.arange(12, dtype=np.float32).reshape(2, 6)[:, ::2]
    assert not strided.flags.c_contiguous
    np.testing.assert_array_equal(check_feed("x", strided, np.dtype(np.float32), (2, 3), (2, 3)), strided)
    assert check_feed("x", strided, np.dtype(np.float32), (2, 3), (2, 3)).flags.c_contiguous
    with pytest.raises(InputError, match="input 'x' is int64, the engine takes float32"):
        check_feed("x", np.ones((2, 3), np.int64), np.dtype(np.float32), (2, 3), (2, 3))
    with pytest.raises(InputError, match=r"shape \[5, 3\], the engine takes between \[1, 3\] and \[4, 3\]"):
        check_feed("x", np.ones((5, 3), np.float32), np.dtype(np.float32), (1, 3), (4, 3))
    with pytest.raises(InputError, match=r"shape \[2, 3, 1\], the engine takes \[2, 3\]"):
        check_feed("x", np.ones((2, 3, 1), np.float32), np.dtype(np.float32), (2, 3), (2, 3))
