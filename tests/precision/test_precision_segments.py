"""The segmented measurement gives what running every node alone gives, at a fraction of the sessions.

The oracle is the node-by-node runner vitdeploy used before (tests/node_by_node_reference.py): each
node in its own ONNX Runtime session, fed exactly its inputs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from node_by_node_reference import NodeByNodeRunner, collect_node_stats as reference_stats
from precision_fixtures import calib_cache, calibration_feeds, tiny_exports  # noqa: F401  (fixtures)
from vitdeploy.precision.activation_stats import collect_node_stats
from vitdeploy.precision.half_precision import HalfConfig, measured_fp32_nodes, rewrite_to_half
from vitdeploy.precision.half_formats import FP16
from vitdeploy.precision.evaluation import run_faithful
from vitdeploy.precision.segments import SegmentRunner, ensure_node_names

#: Ranges: the same kernels on the same inputs (only the threads' reduction order may differ).
STATS_RTOL = 1e-5
#: Drift: the oracle runs a node in ONNX Runtime's FP16 kernel where one exists; the shadow computes in FP32
#: between FP16-rounded inputs and output (TensorRT's FP16 kernels accumulate in FP32). Same decisions.
DRIFT_RTOL = 2e-2
#: A drift estimated on >= 1024 sampled rows vs over all rows (softmax errors are heavy-tailed: 5.5 % measured at 512).
SAMPLED_DRIFT_RTOL = 0.10
#: Budgets for exposed tensors: everything in one session, and a few KiB (many segments, some single nodes).
BUDGETS = {"one segment": 1 << 40, "many segments": 48 << 10}


def _named(path: Path) -> onnx.ModelProto:
    return ensure_node_names(onnx.load(str(path)))


@pytest.mark.parametrize("budget", list(BUDGETS))
def test_partition_covers_every_node_once_within_budget(tiny_exports, budget: str) -> None:
    model = _named(tiny_exports["matmul"])
    every = [o for n in model.graph.node for o in n.output]
    runner = SegmentRunner(model, expose=every, budget_bytes=BUDGETS[budget])
    covered = [i for seg in runner.segments for i in seg.nodes]
    assert covered == list(range(len(runner.model.graph.node)))
    assert all(seg.bytes <= BUDGETS[budget] or len(seg.nodes) == 1 for seg in runner.segments)
    assert (len(runner.segments) > 5) == (budget == "many segments")
    assert len(SegmentRunner(_named(tiny_exports["matmul"]), ranges="all", drift=FP16).segments) == 1  # nothing exposed


def test_exposed_tensors_and_in_graph_ranges_agree(tiny_exports, calib_cache) -> None:
    """Every tensor handed out in segments equals the node-by-node run's, and its in-graph range is NumPy's."""
    cal, _ = calibration_feeds(tiny_exports["matmul"], calib_cache)
    model = _named(tiny_exports["matmul"])
    floats = [o for n in model.graph.node for o in n.output]
    seen: dict[str, np.ndarray] = {}
    runner = SegmentRunner(model, ranges="all", expose=floats, budget_bytes=BUDGETS["many segments"])
    result = runner.run(cal[0], observe=lambda name, a: seen.__setitem__(name, a))
    reference: dict[str, np.ndarray] = {}
    NodeByNodeRunner(_named(tiny_exports["matmul"]), fp16=False).run(cal[0], None, observe=lambda n, a: reference.__setitem__(n, a))
    for name in floats:
        assert np.allclose(seen[name], reference[name], rtol=1e-5, atol=1e-6), name
        if name in result.ranges and seen[name].dtype == np.float32:
            r = result.ranges[name]
            assert np.isclose(r.high, seen[name].max()) and np.isclose(r.low, seen[name].min())


@pytest.mark.parametrize("model", ["matmul", "native", "overflow"])
def test_stats_and_islands_equal_the_node_by_node_oracle(tiny_exports, calib_cache, model: str) -> None:
    cal, _ = calibration_feeds(tiny_exports[model], calib_cache)
    cal = cal[:3]
    new = collect_node_stats(_named(tiny_exports[model]), cal, threads=2)
    old = reference_stats(_named(tiny_exports[model]), cal, threads=2)
    assert set(new) == set(old)
    measured_only_here = []
    for name, ref in old.items():
        got = new[name]
        for field in ("max_abs_in", "max_abs_out", "init_max_abs"):
            assert np.isclose(getattr(got, field), getattr(ref, field), rtol=STATS_RTOL), (name, field, got, ref)
        assert (got.nonfinite_out > 0) == (ref.nonfinite_out > 0), name
        if ref.drift is None:
            if got.drift is not None:
                measured_only_here.append(f"{ref.op_type} {got.drift:.2g}")
        elif np.isfinite(ref.drift):
            assert np.isclose(got.drift, ref.drift, rtol=DRIFT_RTOL, atol=1e-6), (name, got.drift, ref.drift)
        else:
            assert not np.isfinite(got.drift), name
    print(f"{model}: nodes the oracle could not build in FP16, measured here: {measured_only_here}")
    assert measured_fp32_nodes(new, HalfConfig()) == measured_fp32_nodes(old, HalfConfig())


def _reference_rounded(model: onnx.ModelProto, feeds_list) -> list[dict[str, np.ndarray]]:
    runner = NodeByNodeRunner(model, fp16=False)
    return [runner.run(feeds, None) for feeds in feeds_list]


def test_one_rounded_session_equals_the_node_by_node_run(tiny_exports, calib_cache) -> None:
    """FP16 graphs: the explicit-FP16-storage session rounds every tensor as a node-by-node run does (the naive
    conversion of the overflow model overflows in both), where a plain session does not."""
    from vitdeploy.precision.evaluation import ort_session, run_all

    _, held = calibration_feeds(tiny_exports["overflow"], calib_cache)
    naive = rewrite_to_half(_named(tiny_exports["overflow"]), [])
    rounded, reference = run_faithful(naive, held[:2]), _reference_rounded(naive, held[:2])
    plain = run_all(ort_session(naive), held[:2])
    for a, b, c in zip(rounded, reference, plain):
        (x,), (y,), (z,) = a.values(), b.values(), c.values()
        assert not np.isfinite(x).all() and not np.isfinite(y).all()
        assert np.isfinite(z).all(), "a plain session keeps FP16 chains in FP32: the reason for the barriers"
    _, held = calibration_feeds(tiny_exports["matmul"], calib_cache)
    mixed = rewrite_to_half(_named(tiny_exports["matmul"]), [])
    for a, b in zip(run_faithful(mixed, held[:2]), _reference_rounded(mixed, held[:2])):
        (x,), (y,) = a.values(), b.values()
        assert np.isfinite(x).all() and float(np.abs(x - y).max()) <= 1e-3 * float(np.abs(y).max())


def _wide_graph() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """4096 rows of 96 values: MatMul, Add, Softmax, LayerNormalization, Transpose, Mul: every sampled kind."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((96, 96)) * 0.3).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(96).astype(np.float32), "b"),
             numpy_helper.from_array(np.ones(96, np.float32), "g"), numpy_helper.from_array(np.zeros(96, np.float32), "z")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["add"]),
             helper.make_node("Softmax", ["add"], ["sm"], axis=-1),
             helper.make_node("LayerNormalization", ["add", "g", "z"], ["ln"], axis=-1),
             helper.make_node("Transpose", ["ln"], ["tr"], perm=[1, 0, 2]), helper.make_node("Mul", ["sm", "x"], ["out1"])]
    graph = helper.make_graph(nodes, "wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4096, 96])],
                              [helper.make_tensor_value_info("out1", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("tr", TensorProto.FLOAT, None)], inits)
    model = ensure_node_names(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10))
    return model, {"x": (rng.standard_normal((1, 4096, 96)) * 3).astype(np.float32)}


def test_sampled_drift_estimates_the_full_drift(monkeypatch) -> None:
    """Nodes with >= 2048 rows are shadowed on a sample of >= 1024 rows: the estimate stays within 10 % of the drift
    over every row (measured here with sampling off), which equals the node-by-node oracle's."""
    import vitdeploy.precision.segments as segments

    model, feeds = _wide_graph()
    runner = SegmentRunner(onnx.ModelProto.FromString(model.SerializeToString()), ranges="all", drift=FP16)
    sampled = {n.name: runner._row_sampling(n) for n in runner.model.graph.node}
    assert all(v is not None and v[1] >= 2 for v in sampled.values()), sampled
    got = collect_node_stats(onnx.ModelProto.FromString(model.SerializeToString()), [feeds])
    monkeypatch.setattr(segments, "SAMPLE_FROM_ROWS", 1 << 40)
    full = collect_node_stats(onnx.ModelProto.FromString(model.SerializeToString()), [feeds])
    oracle = reference_stats(onnx.ModelProto.FromString(model.SerializeToString()), [feeds])
    for name, st in full.items():
        print(f"{st.op_type:<20} sampled {got[name].drift:.4e} full {st.drift:.4e} oracle {oracle[name].drift:.4e}")
        assert got[name].drift == pytest.approx(st.drift, rel=SAMPLED_DRIFT_RTOL)
        assert st.drift == pytest.approx(oracle[name].drift, rel=DRIFT_RTOL)
        assert got[name].max_abs_out == pytest.approx(st.max_abs_out, rel=STATS_RTOL)  # ranges are never sampled


def test_drift_is_taken_on_the_first_images_and_ranges_on_all(tiny_exports, calib_cache) -> None:
    cal, _ = calibration_feeds(tiny_exports["matmul"], calib_cache)
    cal = cal[:3]
    first_only = collect_node_stats(_named(tiny_exports["matmul"]), cal, threads=2, drift_images=1)
    every = collect_node_stats(_named(tiny_exports["matmul"]), cal, threads=2, drift_images=3)
    one_image = collect_node_stats(_named(tiny_exports["matmul"]), cal[:1], threads=2)
    ranged_past_the_first = 0
    for name, st in every.items():
        assert (first_only[name].max_abs_in, first_only[name].max_abs_out) == (st.max_abs_in, st.max_abs_out), name
        assert first_only[name].drift == one_image[name].drift, name
        ranged_past_the_first += st.max_abs_out > one_image[name].max_abs_out
    assert ranged_past_the_first > 0  # the later images did reach further: their ranges count
