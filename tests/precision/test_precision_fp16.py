"""FP16 pass: overflow kept FP32 where a naive conversion breaks, ordinary tiny models within the fp16 tolerance."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from precision_fixtures import calib_cache, calibration_feeds, cosine, tiny_exports  # noqa: F401  (fixtures)
from vitdeploy.precision.checks import graph_problems
from vitdeploy.precision.evaluation import ort_session, run_all, run_faithful
from vitdeploy.precision.half_precision import HalfConfig, convert_half
from vitdeploy.precision.islands import structural_fp32_nodes
from vitdeploy.parity import TOLERANCES

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

    result = convert_half(model, cal, held)
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
    result = convert_half(model, cal, held)
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
    result = convert_half(model, cal[:3], held, HalfConfig(drift_max=1e-5))
    assert any(r.startswith("FP16 drift") for r in result.kept.values())


def test_kept_nodes_keep_their_weights_in_fp32():
    """A blocked MatMul whose weights are FP16 subnormals (~4e-7, as the stress model's fc2) must compute on the FP32
    weights: onnxconverter-common rounded them (its casts hide the weight from its own block list), which cost the
    stress model cosine 0.99975 whatever was kept. Here: bit-identical weights, output error at FP16 storage level."""
    from onnx import TensorProto, helper, numpy_helper

    from vitdeploy.precision.half_precision import rewrite_to_half

    rng = np.random.default_rng(0)
    weight = (rng.standard_normal((64, 32)) * 4e-7).astype(np.float32)
    scale = (rng.standard_normal((32,)) + 2).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("MatMul", ["r", "w"], ["y0"], name="small_weights"),
         helper.make_node("Mul", ["y0", "s"], ["y"], name="scale")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 32])],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(scale, "s")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    # torch.onnx.export (dynamo) writes value_info for weights too; that is what misled the converter
    model.graph.value_info.extend([helper.make_tensor_value_info("w", TensorProto.FLOAT, [64, 32]),
                                   helper.make_tensor_value_info("s", TensorProto.FLOAT, [32])])
    converted = rewrite_to_half(model, ["small_weights"])
    inits = {t.name: t for t in converted.graph.initializer}
    assert inits["w"].data_type == TensorProto.FLOAT and np.array_equal(numpy_helper.to_array(inits["w"]), weight)
    assert inits["s"].data_type == TensorProto.FLOAT16  # weights of FP16 nodes are FP16
    x = (rng.standard_normal((8, 64)) * 1e4).astype(np.float32)  # large activations (inside FP16), small weights
    expected = np.maximum(x, 0) @ weight.astype(np.float64) * scale
    got = run_faithful(converted, [{"x": x}])[0]["y"]
    rel = float(np.linalg.norm(got - expected) / np.linalg.norm(expected))
    assert rel < 2e-3, rel  # FP16 storage of x, y0 and y: a few 1e-4; FP16 weights: ~3e-2
    naive = rewrite_to_half(model, [])
    naive_rel = float(np.linalg.norm(run_faithful(naive, [{"x": x}])[0]["y"] - expected) / np.linalg.norm(expected))
    assert naive_rel > 10 * rel, (naive_rel, rel)  # the weights' rounding is what the island avoids


def test_a_graph_output_that_is_read_again_stays_one_type():
    """A tensor that is a graph output and the input of another node (SAM 2's and SAM 3's decoders return
    ``mask_tokens`` and gather from it): with FP32 outputs the converter casts it back to FP32 under its name, and the
    reader -- typed FP16 -- must read the FP16 tensor, or ``onnx.checker`` and ONNX Runtime refuse the graph."""
    import onnx
    from onnx import TensorProto, helper

    from vitdeploy.precision.half_precision import rewrite_to_half

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["tokens"], name="relu"),
         helper.make_node("Gather", ["tokens", "index"], ["first"], axis=0, name="select")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("tokens", TensorProto.FLOAT, [3, 4]),
         helper.make_tensor_value_info("first", TensorProto.FLOAT, [4])],
        [helper.make_tensor("index", TensorProto.INT64, [], [0])])
    half = rewrite_to_half(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), keep_fp32=[])
    onnx.checker.check_model(half, full_check=True)
    x = np.array([[1.5, -2.0, 3.25, 4.0], [0.5, 1.0, -1.0, 2.0], [3.0, 2.0, 1.0, 0.0]], np.float32)
    tokens, first = ort_session(half).run(None, {"x": x})
    np.testing.assert_array_equal(tokens, np.maximum(x, 0))
    np.testing.assert_array_equal(first, np.maximum(x[0], 0))


def test_a_cast_from_bool_to_float_becomes_a_cast_to_fp16():
    """onnxconverter-common types a converted Cast's output FP16 but leaves ``to=FLOAT`` (a boolean mask cast to float,
    as SAM 3's detector pools its prompt): the rewrite retargets it, so ONNX Runtime loads the graph and the values
    hold."""
    from onnx import TensorProto, helper

    from vitdeploy.precision.half_precision import rewrite_to_half

    graph = helper.make_graph(
        [helper.make_node("Not", ["mask"], ["valid"], name="not"),
         helper.make_node("Cast", ["valid"], ["weight"], to=TensorProto.FLOAT, name="cast"),
         helper.make_node("Mul", ["x", "weight"], ["y"], name="mul")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
              helper.make_tensor_value_info("mask", TensorProto.BOOL, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    half = rewrite_to_half(model, keep_fp32=[])
    cast = next(n for n in half.graph.node if n.name == "cast")
    assert cast.attribute[0].i == TensorProto.FLOAT16
    x = np.array([1.5, -2.0, 3.25, 4.0], np.float32)
    mask = np.array([False, True, False, True])
    (y,) = ort_session(half).run(None, {"x": x, "mask": mask})
    np.testing.assert_array_equal(y, x * ~mask)
