"""BF16 pass: the same rules as FP16 with BF16's facts (FP32's range, 8 significant bits), a graph TensorRT and
OpenVINO run, weights rounded from their FP32 originals, and ONNX Runtime's CPU refusing it in one line."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from precision_fixtures import calib_cache, calibration_feeds, cosine, tiny_exports  # noqa: F401  (fixtures)
from tests.cli_helpers import run
from tests.conftest import IR_VERSION
from vitdeploy.engine.onnx_facts import graph_precision
from vitdeploy.precision.checks import graph_problems
from vitdeploy.precision.evaluation import ort_session, run_all, run_faithful
from vitdeploy.precision.half_formats import BF16, FP16
from vitdeploy.precision.half_precision import HalfConfig, convert_half, rewrite_to_half
from vitdeploy.precision.islands import structural_fp32_nodes
from vitdeploy.precision.segments import SegmentRunner
from vitdeploy.parity import TOLERANCES

BF16_COSINE = TOLERANCES["bf16"].cosine_min


def _bf16(array: np.ndarray) -> np.ndarray:
    """``array`` rounded to BF16 (nearest even) and widened back to FP32."""
    return np.asarray(array, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def _matmul_graph(weight: np.ndarray) -> onnx.ModelProto:
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, weight.shape[0]])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, weight.shape[1]])],
                              [numpy_helper.from_array(weight, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=IR_VERSION)


def test_bf16_storage_and_drift_are_bf16_rounding_around_fp32_arithmetic() -> None:
    """The two measurements the pass rests on, against NumPy: the stored graph rounds inputs, weights and outputs
    to BF16 and multiplies in FP32; a node's local drift is that rounding's relative L2 against FP32."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((64, 32)).astype(np.float32)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    model = _matmul_graph(weight)
    converted = rewrite_to_half(model, [], fmt=BF16)
    assert graph_precision(converted) == "bf16"
    (got,) = run_faithful(converted, [{"x": x}])
    expected = _bf16(_bf16(x) @ _bf16(weight))
    np.testing.assert_allclose(got["y"], expected, rtol=1e-6, atol=1e-6)

    drift = SegmentRunner(onnx.ModelProto.FromString(model.SerializeToString()), ranges="all", drift=BF16).run({"x": x}).drift["y"]
    exact = x @ weight
    want = np.linalg.norm(expected - exact) / np.linalg.norm(exact)
    assert drift == pytest.approx(want, rel=1e-3)
    assert 1e-4 < drift < 4 * BF16.unit_roundoff  # a BF16 rounding, ~8x what FP16 gives on the same node
    fp16_drift = SegmentRunner(onnx.ModelProto.FromString(model.SerializeToString()), ranges="all", drift=FP16).run({"x": x}).drift["y"]
    assert drift > 4 * fp16_drift


def test_weights_are_rounded_from_fp32_never_through_fp16() -> None:
    """A weight beyond FP16's range (1e6) and one below its subnormals (1e-9) keep their BF16 values; a weight as
    large as a full-size model's (128 KiB, handed to ONNX Runtime beside the graph) runs as it is stored."""
    rng = np.random.default_rng(1)
    weight = rng.standard_normal((256, 256)).astype(np.float32)
    weight[0, 0], weight[1, 1] = 1.0e6, 1.0e-9
    converted = rewrite_to_half(_matmul_graph(weight), [], fmt=BF16)
    (stored,) = [t for t in converted.graph.initializer if t.name == "w"]
    assert stored.data_type == TensorProto.BFLOAT16
    np.testing.assert_array_equal(numpy_helper.to_array(stored).astype(np.float32), _bf16(weight))
    assert graph_problems(converted) == []
    x = rng.standard_normal((4, 256)).astype(np.float32)
    (got,) = run_faithful(converted, [{"x": x}])
    np.testing.assert_allclose(got["y"], _bf16(_bf16(x) @ _bf16(weight)), rtol=1e-6, atol=1e-6)


def test_bf16_keeps_no_node_for_range_where_fp16_must(tiny_exports, calib_cache):
    """The overflow model (activations ~2e4 x weights, which overflow FP16) converts to BF16 whole, and its
    output stays within the 'bf16' budget; the FP16 pass keeps nodes in FP32 for range on the same model."""
    model = onnx.load(str(tiny_exports["overflow"]))
    cal, held = calibration_feeds(tiny_exports["overflow"], calib_cache)
    bf16 = convert_half(model, cal, held, HalfConfig(format=BF16))
    fp16 = convert_half(model, cal, held)
    range_kept = lambda kept: [n for n, r in kept.items() if "activations reach" in r or "overflows" in r]  # noqa: E731
    assert range_kept(fp16.kept) and not range_kept(bf16.kept), (fp16.kept, bf16.kept)
    assert bf16.cosine >= BF16_COSINE and all(p.nan_count == p.inf_count == 0 for p in bf16.parity)
    reference = run_all(ort_session(model), held)
    for ref, out in zip(reference, bf16.outputs):
        assert cosine(ref["image_embeddings"], out["image_embeddings"]) >= BF16_COSINE


def test_tiny_sam_bf16_islands_and_budget(tiny_exports, calib_cache):
    model = onnx.load(str(tiny_exports["matmul"]))
    cal, held = calibration_feeds(tiny_exports["matmul"], calib_cache)
    result = convert_half(model, cal, held, HalfConfig(format=BF16))
    print(f"bf16 worst cosine {result.cosine:.8f}, {len(result.kept)} of {result.node_count} nodes FP32")
    assert result.cosine >= BF16_COSINE
    assert graph_precision(result.model) == "bf16" and graph_problems(result.model) == []
    for value in [*result.model.graph.input, *result.model.graph.output]:
        assert value.type.tensor_type.elem_type == TensorProto.FLOAT
    for name in structural_fp32_nodes(model):  # normalization and softmax stay FP32, as in FP16
        assert name in result.kept
    convs = [n.name for n in model.graph.node if n.op_type == "Conv"]
    assert convs and all(result.kept[c] == "Conv has no BF16 type in ONNX opset 18" for c in convs)
    types = {t.data_type for t in result.model.graph.initializer}
    assert TensorProto.BFLOAT16 in types and TensorProto.FLOAT16 not in types


@pytest.fixture(scope="module")
def bf16_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.conftest import TINY_RECIPE

    root = tmp_path_factory.mktemp("bf16")
    (root / "tiny.toml").write_text(TINY_RECIPE)
    code, output = run("export", "-r", str(root / "tiny.toml"), "--random-weights", "--seed", "5", "-o", str(root / "tiny.onnx"))
    assert code == 0, output
    code, output = run("calibrate", str(root / "tiny.onnx"), "-p", "bf16", "-o", str(root / "tiny.bf16.onnx"), "--max-images", "10")
    assert code == 0, output
    assert "within 'bf16'" in output and "parity vs eager official: worst cosine" in output, output
    return root / "tiny.bf16.onnx"


def test_calibrate_writes_a_bf16_file_that_openvino_runs_within_the_budget(bf16_file: Path) -> None:
    pytest.importorskip("openvino")
    from vitdeploy.metadata import read_onnx_metadata

    assert read_onnx_metadata(bf16_file)["precision"] == "bf16"
    code, output = run("validate", str(bf16_file), "--runtime", "openvino", "--random-inputs", "2", "--runs", "1")
    assert code == 0, output
    assert output.count("[bf16] ok") == 2, output  # judged by the 'bf16' budget against the eager official model
    code, output = run("validate", str(bf16_file), "--runtime", "auto", "--random-inputs", "1", "--runs", "1")
    assert code == 0 and "chosen by --runtime auto: openvino file" in output and "ONNX Runtime's CPU has no BF16 kernels" in output, output


def test_onnx_runtime_cpu_refuses_a_bf16_file_in_one_line(bf16_file: Path) -> None:
    code, output = run("validate", str(bf16_file), "--runtime", "onnxruntime", "--random-inputs", "1", "--runs", "1")
    assert code == 1 and "Traceback" not in output, output
    (line,) = [ln for ln in output.splitlines() if ln.startswith("error:")]
    assert "is a BF16 graph and ONNX Runtime's CPU has no BF16 kernels" in line and "--runtime openvino" in line


@pytest.mark.parametrize("units", [(), ("amx_bf16",)])
def test_openvino_runs_a_bf16_file_in_bf16_only_where_the_cpu_has_bf16_units(bf16_file: Path, monkeypatch,
                                                                            units: tuple[str, ...]) -> None:
    """The ``file`` policy on a BF16 file asks OpenVINO for BF16 inference where the CPU has BF16 units (AMX,
    AVX512-BF16), f32 elsewhere. A CPU mask cannot add units, so the CPU is constructed; on this machine's plugin a
    BF16 request on a CPU without them runs f32 and the runner says so."""
    pytest.importorskip("openvino")
    import vitdeploy.cpu_features as features_module
    from vitdeploy.cpu_features import CpuFeatures
    from vitdeploy.runtime.backends.base import RunnerOptions
    from vitdeploy.runtime.backends.openvino_runner import OpenVinoRunner

    real = features_module.cpu_features()
    without_units = frozenset(real.flags) - frozenset(features_module.BF16_FLAGS)  # holds on AMX CPUs too
    constructed = CpuFeatures(real.model, real.machine, without_units | frozenset(units))
    monkeypatch.setattr(features_module, "cpu_features", lambda *a, **k: constructed)
    runner = OpenVinoRunner.from_options(bf16_file, RunnerOptions(threads=1))
    fell_back = [w for w in runner.warnings if "not the bf16 asked for" in w]
    if not units:  # f32 asked: nothing to fall back from
        assert runner.inference_precision == "f32" and not fell_back, runner.warnings
    else:
        assert runner.inference_precision == "bf16" or (not real.bf16_units and fell_back), runner.warnings
