"""The OpenVINO load-time form of vitdeploy/runtime/forms/openvino_heads.py: a heads transpose whose token and head
axes are equal is written in 5-D, because OpenVINO's fused attention computed a wrong result from the 4-D one.

The attention chain here is built by hand as an exporter writes it (``q`` as ``(B, L, H, d)`` moved to ``(B, H, L, d)``,
``MatMul(q, k^T) -> Softmax -> MatMul(., v)``) and judged against NumPy in float64. SAM 2's tiny image encoder holds
such a transpose at its third stage: there the form is what keeps its BF16 embedding as close to FP32 as the official
BF16 autocast is (tests/validation/test_official_practice.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import IR_VERSION
from vitdeploy.parity import TOLERANCES, compare

pytest.importorskip("openvino")


def attention_chain(path: Path, batch: int, tokens: int, heads: int, dim: int, keys: int) -> Path:
    """The chain as ``torch.onnx`` writes a scaled attention whose query arrives with its heads split last."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    scale = numpy_helper.from_array(np.array([dim ** -0.25], np.float32), "scale")
    nodes = [helper.make_node("Transpose", ["q"], ["q_heads"], perm=[0, 2, 1, 3]),
             helper.make_node("Mul", ["q_heads", "scale"], ["q_scaled"]),
             helper.make_node("Transpose", ["k"], ["k_t"], perm=[0, 1, 3, 2]),
             helper.make_node("Mul", ["k_t", "scale"], ["k_scaled"]),
             helper.make_node("MatMul", ["q_scaled", "k_scaled"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["weights"], axis=-1),
             helper.make_node("MatMul", ["weights", "v"], ["out"])]
    value = lambda name, shape: helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
    graph = helper.make_graph(nodes, "attention", [value("q", [batch, tokens, heads, dim]),
                                                    value("k", [batch, heads, keys, dim]),
                                                    value("v", [batch, heads, keys, dim])],
                              [value("out", [batch, heads, tokens, dim])], [scale])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION), str(path))
    return path


def exact_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    logits = q.transpose(0, 2, 1, 3) @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    return (weights / weights.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("precision", ["f32", "bf16"])
@pytest.mark.parametrize(("tokens", "heads", "square"), [(4, 4, True), (16, 16, True), (4, 2, False), (16, 4, False)])
def test_a_square_heads_transpose_runs_in_5d_and_the_attention_is_right(tmp_path: Path, precision: str, tokens: int,
                                                                       heads: int, square: bool) -> None:
    from vitdeploy.runtime.backends.openvino_runner import OpenVinoRunner

    path = attention_chain(tmp_path / "attention.onnx", 64, tokens, heads, 16, keys=4 * tokens)
    rng = np.random.default_rng(tokens * heads)
    feeds = {"q": 2 * rng.standard_normal((64, tokens, heads, 16)).astype(np.float32),
             "k": 2 * rng.standard_normal((64, heads, 4 * tokens, 16)).astype(np.float32),
             "v": 2 * rng.standard_normal((64, heads, 4 * tokens, 16)).astype(np.float32)}
    want = exact_attention(feeds["q"], feeds["k"], feeds["v"])
    runner = OpenVinoRunner(path, threads=2, inference_precision=precision)
    if runner.inference_precision != precision:
        pytest.skip(f"OpenVINO runs {runner.inference_precision} here, not {precision}")
    assert runner.heads_in_5d == int(square)
    assert ("written in 5-D" in runner.provider) is square
    budget = TOLERANCES["fp32" if precision == "f32" else "bf16"]
    got = compare(want, runner.run(feeds)["out"], budget, label=f"attention, {tokens} tokens, {heads} heads")
    assert got, got.summary()  # stock OpenVINO 2026.4.1 on this file, AMX Xeon, f32, tokens == heads: cosine 0.54-0.64
