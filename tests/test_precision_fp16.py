"""FP16 pass: overflow kept FP32 where a naive conversion breaks, ordinary tiny models within the fp16 tolerance."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from precision_fixtures import calib_cache, calibration_feeds, cosine, tiny_exports  # noqa: F401  (fixtures)
from vitdeploy.precision.checks import graph_problems
from vitdeploy.precision.evaluation import ort_session, run_all, run_faithful
from vitdeploy.precision.fp16 import Fp16Config, convert_fp16
from vitdeploy.precision.islands import structural_fp32_nodes
from vitdeploy.validation.parity import TOLERANCES

FP16_COSINE = TOLERANCES["fp16"].cosine_min


def _fp16_initializers(model: onnx.ModelProto) -> int:
    return sum(1 for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT16)


def test_naive_conversion_overflows_and_ours_does_not(tiny_exports, calib_cache):
    from onnxconverter_common import float16

    model = onnx.load(str(tiny_exports["overflow"]))
    cal, held = calibration_feeds(tiny_exports["overflow"], calib_cache)
    reference = run_all(ort_session(model), held)
    naive = float16.convert_float_to_float16(onnx.load(str(tiny_exports["overflow"])), keep_io_types=True,
                                             max_finite_val=65504.0)
    naive_out = run_faithful(naive, held)
    assert any(not np.isfinite(o["image_embeddings"]).all() for o in naive_out), "the test model must overflow naive FP16"

    result = convert_fp16(model, cal, held)
    ours = run_faithful(result.model, held)
    for ref, out in zip(reference, ours):
        assert np.isfinite(out["image_embeddings"]).all()
        assert cosine(ref["image_embeddings"], out["image_embeddings"]) >= FP16_COSINE
    reasons = " ".join(result.kept.values())
    assert "activations reach" in reasons or "overflows" in reasons
    mlp_matmuls = [n for n, r in result.kept.items() if ("activations reach" in r or "overflows" in r)]
    assert mlp_matmuls, result.kept
    assert _fp16_initializers(result.model) > 0  # the rest really is FP16


@pytest.mark.parametrize("which", ["matmul", "native"])
def test_ordinary_tiny_models_meet_fp16_tolerance(tiny_exports, calib_cache, which):
    model = onnx.load(str(tiny_exports[which]))
    cal, held = calibration_feeds(tiny_exports[which], calib_cache)
    result = convert_fp16(model, cal, held)
    print(f"{which}: fp16 worst cosine {result.cosine:.8f}, {len(result.kept)} of {result.node_count} nodes FP32")
    assert result.cosine >= FP16_COSINE
    assert all(p.nan_count == p.inf_count == 0 for p in result.parity)
    assert graph_problems(result.model) == []  # onnx.checker full check + hygiene
    # Graph I/O stays FP32.
    for value in [*result.model.graph.input, *result.model.graph.output]:
        assert value.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert _fp16_initializers(result.model) > 0
    # Every normalization op and Softmax stays FP32 and is reported.
    for name in structural_fp32_nodes(model):
        assert name in result.kept


def test_matmul_layernorm2d_is_kept_fp32(tiny_exports, calib_cache):
    model = onnx.load(str(tiny_exports["matmul"]))
    kept = structural_fp32_nodes(model)
    ops = {n.name: n.op_type for n in model.graph.node}
    island_ops = sorted({ops[n] for n, r in kept.items() if "normalization written out" in r})
    assert island_ops == ["Add", "Div", "MatMul", "Mul", "Sqrt", "Sub"]
    assert sum(1 for r in kept.values() if "normalization written out" in r) == 14  # 2 LayerNorm2d x 7 nodes
    native = onnx.load(str(tiny_exports["native"]))
    assert not any("written out" in r for r in structural_fp32_nodes(native).values())


def test_drift_rule_keeps_nodes_when_the_threshold_is_tight(tiny_exports, calib_cache):
    model = onnx.load(str(tiny_exports["matmul"]))
    cal, held = calibration_feeds(tiny_exports["matmul"], calib_cache)
    result = convert_fp16(model, cal[:3], held, Fp16Config(drift_max=1e-5))
    assert any(r.startswith("FP16 drift") for r in result.kept.values())
