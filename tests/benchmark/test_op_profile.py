"""ONNX Runtime's profiler through OnnxRuntimeRunner, summed by operator kind (vitdeploy.benchmark.op_profile)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import IR_VERSION, tiny_encoder
from vitdeploy.benchmark.op_profile import KINDS, read_ort_profile, weight_nodes
from vitdeploy.errors import InputError
from vitdeploy.onnx_export.sam_encoder import export_sam_image_encoder
from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner

RUNS = 3


def _profile(path: Path, tmp_path: Path, feeds: dict[str, np.ndarray]):
    optimized = tmp_path / f"{path.stem}.optimized.onnx"
    runner = OnnxRuntimeRunner(path, threads=1, optimized_model_path=optimized, profile_prefix=tmp_path / path.stem)
    for _ in range(RUNS):
        runner.run(feeds)
    return read_ort_profile(runner.end_profiling(), weight_nodes(optimized)), onnx.load(str(optimized))


def test_kinds_of_a_hand_built_graph(tmp_path: Path) -> None:
    """x @ W is a linear layer (W is a weight), y @ y an attention-like product, then a Transpose: layout."""
    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"], name="linear"),
         helper.make_node("MatMul", ["y", "y"], ["z"], name="product"),
         helper.make_node("Transpose", ["z"], ["out"], name="transpose")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [64, 64])], [weight])
    path = tmp_path / "three.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION), str(path))
    profile, _ = _profile(path, tmp_path, {"x": np.ones((64, 64), np.float32)})
    assert len(profile.runs) == RUNS
    for run in profile.runs:
        assert run.nodes == 3
        assert set(run.by_kind) == {"linear", "attention", "layout"}
        assert run.by_op.keys() == {"MatMul", "Transpose"}
        assert run.by_op["MatMul"] == pytest.approx(run.by_kind["linear"] + run.by_kind["attention"])
        assert run.kernel_ms <= run.run_ms
    steady = profile.steady()
    assert steady.linear_gflop == pytest.approx(2 * 64 * 64 * 64 / 1e9)  # x @ W only: y @ y is not a linear layer
    assert list(profile.to_dict()["steady"]["by_kind"]) == list(KINDS)


@pytest.mark.parametrize("target", ["generic", "onnxruntime-cpu"])
def test_every_node_of_the_tiny_encoder_is_counted_once_per_run(target: str, tmp_path: Path) -> None:
    path = export_sam_image_encoder(tiny_encoder(seed=0), tmp_path / f"{target}.onnx", target=target).path
    image = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
    profile, optimized = _profile(path, tmp_path, {"image": image})
    weight_gemms = len(weight_nodes(tmp_path / f"{target}.optimized.onnx") &
                       {n.name for n in optimized.graph.node if n.op_type in ("MatMul", "Gemm", "FusedMatMul")})
    assert weight_gemms >= 3 * 4  # 3 blocks x (qkv, proj, lin1, lin2), wherever ONNX Runtime kept them
    for run in profile.runs:
        assert run.nodes == len(optimized.graph.node)
        assert sum(run.by_kind.values()) == pytest.approx(run.kernel_ms)
        assert run.by_kind["linear"] > 0 and run.by_kind["attention"] > 0
    if target == "onnxruntime-cpu":
        assert "MultiHeadAttention" in profile.first.by_op  # ONNX Runtime's fused attention ran
    assert profile.session_init_ms > 0


def test_a_trace_that_is_not_a_profile_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="cannot read the ONNX Runtime profile"):
        read_ort_profile(bad)
    bad.write_text(json.dumps([{"cat": "Session", "name": "session_initialization", "ts": 0, "dur": 5}]))
    with pytest.raises(InputError, match="holds no model_run"):
        read_ort_profile(bad)
    with pytest.raises(InputError, match="without profile_prefix"):
        OnnxRuntimeRunner(_any_model(tmp_path)).end_profiling()


def _any_model(tmp_path: Path) -> Path:
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    path = tmp_path / "identity.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION), str(path))
    return path
