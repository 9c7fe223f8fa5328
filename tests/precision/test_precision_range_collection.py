"""INT8 calibration in bounded memory: same ranges as ONNX Runtime's calibrator, real entropy search, no growth with images."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import numpy as np
import onnx
import pytest

from precision_fixtures import calib_cache, calibration_feeds, tiny_exports  # noqa: F401  (fixtures)
from vitdeploy.errors import InputError, PrecisionError
from vitdeploy.precision.int8 import QUANTIZED_OPS, Int8Config, _per_tensor_overrides, quantizable_nodes, quantize_int8
from vitdeploy.precision.segments import ensure_node_names
from vitdeploy.precision.range_collection import RangeConfig, calibrated_tensors, collect_ranges, entropy_threshold


def _scales(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer if t.name.endswith("_scale")}


def _ort_calibrated(source: onnx.ModelProto, nodes: list[str], feeds: list[dict], method, tmp: Path) -> onnx.ModelProto:
    """The same quantization through ONNX Runtime's own in-memory calibrator (what vitdeploy used before)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter(feeds)

        def get_next(self):
            return next(self.items, None)

    extra = {"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False,
             "OpTypesToExcludeOutputQuantization": list(QUANTIZED_OPS),
             "TensorQuantOverrides": _per_tensor_overrides(source, set(nodes))}
    onnx.save(source, str(tmp / "src.onnx"))
    quantize_static(str(tmp / "src.onnx"), str(tmp / "ort.onnx"), Reader(), quant_format=QuantFormat.QDQ,
                    op_types_to_quantize=list(QUANTIZED_OPS), nodes_to_quantize=nodes, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, calibrate_method=method, extra_options=extra)
    return onnx.load(str(tmp / "ort.onnx"))


def _named_graph(tiny_exports, calib_cache) -> tuple[onnx.ModelProto, list, list]:
    """(the tiny MatMul export with every node named, its calibration feeds, its quantizable nodes)."""
    cal, _ = calibration_feeds(tiny_exports["matmul"], calib_cache)
    source = ensure_node_names(onnx.load(str(tiny_exports["matmul"])))
    nodes, _ = quantizable_nodes(source)
    return source, cal, nodes


def test_streamed_minmax_gives_onnxruntimes_scales_exactly(tiny_exports, calib_cache, tmp_path: Path) -> None:
    from onnxruntime.quantization import CalibrationMethod

    model = onnx.load(str(tiny_exports["matmul"]))
    cal, _ = calibration_feeds(tiny_exports["matmul"], calib_cache)
    ours, nodes, _ = quantize_int8(model, cal, Int8Config(method="minmax"))
    source = ensure_node_names(onnx.ModelProto.FromString(model.SerializeToString()))
    theirs = _ort_calibrated(source, nodes, cal, CalibrationMethod.MinMax, tmp_path)
    a, b = _scales(ours), _scales(theirs)
    assert set(a) == set(b) and len(a) > 0
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert [n.op_type for n in ours.graph.node] == [n.op_type for n in theirs.graph.node]


def test_entropy_threshold_is_onnxruntimes_search() -> None:
    from onnxruntime.quantization.calibrate import HistogramCollector

    collector = HistogramCollector("entropy", symmetric=True, num_bins=384, num_quantized_bins=64, percentile=99.99,
                                   scenario="same")
    for seed in range(4):
        rng = np.random.default_rng(seed)
        data = np.concatenate([rng.standard_normal(20000), rng.standard_normal(50) * 12]).astype(np.float32)
        threshold = np.float32(np.abs(data).max())
        hist, edges = np.histogram(data, 384, range=(-threshold, threshold))
        edges = edges.astype(np.float32)
        low, high = np.float32(data.min()), np.float32(data.max())
        want = collector.get_entropy_threshold((hist, edges, low, high, threshold), 64)
        got = entropy_threshold(hist, edges, float(low), float(high), 64)
        assert got == (float(want[0]), float(want[1])), (seed, got, want)


def test_entropy_now_clips_outliers_where_minmax_does_not(tiny_exports, calib_cache) -> None:
    source, cal, nodes = _named_graph(tiny_exports, calib_cache)
    names = calibrated_tensors(source, nodes)
    minmax = collect_ranges(source, cal[:4], names, RangeConfig("minmax"))
    entropy = collect_ranges(source, cal[:4], names, RangeConfig("entropy"))
    widths = {n: (float(entropy[n].range_value[1]), float(minmax[n].range_value[1])) for n in names}
    assert all(e <= m * (1 + 1e-6) for e, m in widths.values())
    assert sum(e < 0.9 * m for e, m in widths.values()) >= 1, widths  # at least one range actually clipped


def test_no_tensor_outlives_its_node(tiny_exports, calib_cache) -> None:
    """Streaming: after 12 images, no exposed activation the collector saw is still alive (nothing accumulates)."""
    from vitdeploy.precision.range_collection import _Collector
    from vitdeploy.precision.segments import SegmentRunner

    source, cal, nodes = _named_graph(tiny_exports, calib_cache)
    tensors = calibrated_tensors(source, nodes)
    collector = _Collector(tensors, RangeConfig("percentile"))
    refs: list[weakref.ref] = []

    def observe(name: str, array: np.ndarray) -> None:
        refs.append(weakref.ref(array))
        collector(name, array)

    runner = SegmentRunner(source, ranges=tensors, expose=tensors, budget_bytes=48 << 10)
    assert len(runner.segments) > 3
    for feeds in cal:
        collector.update(runner.run(feeds, observe=observe).ranges)
    gc.collect()
    alive = [r() for r in refs if r() is not None]
    print(f"{len(refs)} tensors observed over {len(cal)} images, {len(alive)} still alive")
    assert len(refs) > 10 * len(cal)
    inputs = {id(a) for feeds in cal for a in feeds.values()}
    assert all(id(a) in inputs for a in alive)  # only the caller's own input arrays
    assert len(collector.tensors_data().data) == len(collector.names)


def test_bad_calibration_inputs(tiny_exports, calib_cache) -> None:
    model = ensure_node_names(onnx.load(str(tiny_exports["matmul"])))
    cal, _ = calibration_feeds(tiny_exports["matmul"], calib_cache)
    with pytest.raises(InputError, match="unknown calibration method 'kl'"):
        RangeConfig("kl")
    with pytest.raises(PrecisionError, match="never produced tensor"):
        collect_ranges(model, cal[:1], ["no_such_tensor"])
    with pytest.raises(PrecisionError, match="no calibration inputs"):
        collect_ranges(model, [], ["x"])
