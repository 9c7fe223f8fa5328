"""INT8 calibration statistics collected in bounded memory, handed to ONNX Runtime's quantizer.

Why not ONNX Runtime's own calibrators (``quantize_static`` with a data reader), measured on ORT 1.31:

* the histogram calibrators (percentile, entropy) make every calibrated tensor a graph output and
  keep the outputs of *every* calibration image before building one histogram; for the full-size SAM
  ViT-B at 1024 px one global-attention probability tensor is 12 x 4096 x 4096 floats (805 MB), so a
  handful of images exceeds a 24 GB machine. ``CalibMaxIntermediateOutputs`` does not help: the
  calibrator clears the collected outputs when the limit is reached without merging them first;
* ``quantize_static`` gives its entropy calibrator the default bin counts (128 bins, 128 quantized
  bins): one candidate threshold, the full range, so ``entropy`` equals ``minmax``.

What is done instead (:class:`~vitdeploy.precision.segments.SegmentRunner`): the extremes of every
calibrated tensor are computed inside the ONNX Runtime graph (scalar outputs, nothing large leaves
it); for the histogram methods the calibrated tensors are handed out in segments of bounded size,
each updates its histogram the moment it is produced and is then dropped. Min/max are running extremes. Histograms are ONNX
Runtime's own :class:`~onnxruntime.quantization.calibrate.HistogramCollector`, fed one tensor of one
image at a time (its merge rule widens the range as new data arrives, so the bins can differ slightly
from a one-shot histogram of all images). The entropy threshold is ONNX Runtime's KL-divergence
search, vectorized per candidate, with TensorRT's bin counts (2048 bins, 128 quantized bins).
The result is a ``TensorsData`` that ``quantize_static`` reads as a calibration cache
(``calibration_cache_path``), so ONNX Runtime still does the Q/DQ rewrite itself.

Peak memory: one image's live tensors plus, per tensor, a histogram of a few thousand bins.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from vitdeploy.errors import InputError, PrecisionError
from vitdeploy.precision.segments import DEFAULT_BUDGET_BYTES, SegmentRunner

Feeds = dict[str, np.ndarray]

#: Histogram sizes: TensorRT's entropy calibrator uses 2048 bins and 128 quantized bins.
ENTROPY_BINS = 2048
ENTROPY_QUANTIZED_BINS = 128
#: ONNX Runtime's default for its percentile calibrator.
PERCENTILE_BINS = 2048


@dataclass(frozen=True)
class RangeConfig:
    """How activation ranges are computed.

    Attributes:
        method: ``minmax``, ``percentile`` or ``entropy``.
        percentile: for ``percentile``: the share of |values| inside the range, in percent.
        symmetric: ranges symmetric around 0 (what TensorRT's INT8 needs).
        num_bins / num_quantized_bins: histogram sizes (None: the defaults above).
    """

    method: str = "minmax"
    percentile: float = 99.999
    symmetric: bool = True
    num_bins: int | None = None
    num_quantized_bins: int = ENTROPY_QUANTIZED_BINS

    def __post_init__(self) -> None:
        if self.method not in ("minmax", "percentile", "entropy"):
            raise InputError(f"unknown calibration method '{self.method}': use minmax, percentile or entropy")
        if not 0.0 < self.percentile <= 100.0:
            raise InputError(f"percentile {self.percentile} is not in (0, 100]")


def calibrated_tensors(model: onnx.ModelProto, nodes: Sequence[str]) -> list[str]:
    """The float activation inputs of ``nodes`` (by name): the tensors a Q/DQ pass quantizes.

    Initializers (weights) are not activations; their scales come from the weights themselves.
    """
    graph = model.graph
    inits = {t.name for t in graph.initializer}
    float_types = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16}
    types = {v.name: v.type.tensor_type.elem_type for v in [*graph.input, *graph.value_info, *graph.output]}
    wanted = set(nodes)
    names: list[str] = []
    for node in graph.node:
        if node.name not in wanted:
            continue
        for name in node.input:
            if name and name not in inits and types.get(name, onnx.TensorProto.FLOAT) in float_types and name not in names:
                names.append(name)
    return names


class _Collector:
    """Streaming statistics of the calibrated tensors (see the module docstring)."""

    def __init__(self, names: Sequence[str], config: RangeConfig):
        from onnxruntime.quantization.calibrate import HistogramCollector

        self.names = set(names)
        self.config = config
        self.lowest: dict[str, float] = {}
        self.highest: dict[str, float] = {}
        self.histograms = None
        if config.method != "minmax":
            bins = config.num_bins or (ENTROPY_BINS if config.method == "entropy" else PERCENTILE_BINS)
            # ORT's percentile calibrator histograms |x| when symmetric; its entropy one always uses signed values.
            self.histograms = HistogramCollector(method=config.method, symmetric=config.symmetric, num_bins=bins,
                                                 num_quantized_bins=config.num_quantized_bins,
                                                 percentile=config.percentile, scenario="same")

    def update(self, ranges: dict) -> None:
        """Running extremes from one run's in-graph ranges (:class:`~vitdeploy.precision.segments.TensorRange`)."""
        for name in self.names:
            r = ranges.get(name)
            if r is None:
                continue
            if not (np.isfinite(r.low) and np.isfinite(r.high)):
                raise PrecisionError(f"calibration tensor '{name}' has non-finite values: the FP32 graph itself is broken")
            self.lowest[name] = min(r.low, self.lowest.get(name, r.low))
            self.highest[name] = max(r.high, self.highest.get(name, r.high))

    def __call__(self, name: str, array: np.ndarray) -> None:
        """A calibrated tensor itself (histogram methods)."""
        if self.histograms is None or name not in self.names or array.dtype not in (np.float32, np.float16):
            return
        data = array.astype(np.float32, copy=False)
        self._histogram(name, data if np.isfinite(data).all() else data[np.isfinite(data)])

    def _histogram(self, name: str, data: np.ndarray) -> None:
        # ORT's collectors print one progress line per call; these calls are per tensor and image.
        import contextlib
        import io

        with contextlib.redirect_stdout(io.StringIO()):
            self.histograms.collect({name: data})

    def tensors_data(self):
        """The statistics as ONNX Runtime's ``TensorsData`` (method recorded for its cache check)."""
        from onnxruntime.quantization.calibrate import CalibrationMethod, TensorData, TensorsData

        missing = sorted(self.names - set(self.lowest))
        if missing:
            raise PrecisionError(f"calibration never produced tensor(s) {', '.join(missing[:5])}: the graph does not compute them")
        method = {"minmax": CalibrationMethod.MinMax, "percentile": CalibrationMethod.Percentile,
                  "entropy": CalibrationMethod.Entropy}[self.config.method]
        data = {}
        for name in sorted(self.names):
            low, high = self._range(name)
            data[name] = TensorData(lowest=np.array(low, dtype=np.float32), highest=np.array(high, dtype=np.float32))
        return TensorsData(method, data)

    def _range(self, name: str) -> tuple[float, float]:
        low, high = self.lowest[name], self.highest[name]
        if self.config.method == "percentile":
            low, high = _percentile_range(self.histograms.histogram_dict[name], self.config, low, high)
        elif self.config.method == "entropy":
            hist, edges = self.histograms.histogram_dict[name][:2]
            low, high = entropy_threshold(hist, edges, low, high, self.config.num_quantized_bins)
        if self.config.symmetric:
            bound = max(abs(low), abs(high))
            low, high = -bound, bound
        return low, high


def _percentile_range(histogram: tuple, config: RangeConfig, low: float, high: float) -> tuple[float, float]:
    """ONNX Runtime's ``compute_percentile`` for one tensor (same cut points, same clamping to min/max)."""
    hist, edges = histogram[0], histogram[1]
    cdf = np.cumsum(hist / hist.sum())
    if config.symmetric:
        right = float(edges[np.searchsorted(cdf, config.percentile / 100.0)])
        lo, hi = -right, right
    else:
        cut = (100.0 - config.percentile) / 200.0
        lo, hi = float(edges[np.searchsorted(cdf, cut)]), float(edges[np.searchsorted(cdf, 1.0 - cut)])
    return max(lo, low), min(hi, high)


def entropy_threshold(hist: np.ndarray, edges: np.ndarray, low: float, high: float,
                      num_quantized_bins: int = ENTROPY_QUANTIZED_BINS) -> tuple[float, float]:
    """ONNX Runtime's ``HistogramCollector.get_entropy_threshold``, each candidate's inner loops as array ops.

    For every symmetric window around the zero bin (``num_quantized_bins`` wide and up), the clipped
    distribution P (outliers folded into the end bins) is compared with its ``num_quantized_bins``-level
    quantization Q by KL divergence; the window with the least divergence gives the range (clamped to
    the observed min/max). Integer truncation and smoothing follow ORT's code exactly.
    """
    from onnxruntime.quantization.calibrate import entropy
    from onnxruntime.quantization.quant_utils import smooth_distribution

    hist = np.asarray(hist)
    num_bins = hist.size
    zero_bin = num_bins // 2
    half = num_quantized_bins // 2
    if zero_bin < half:
        return low, high  # fewer bins than levels: no window to choose
    prefix = np.concatenate([[0], np.cumsum(hist)])
    best, best_div = (float(edges[zero_bin - half]), float(edges[min(zero_bin + half + 1, num_bins)])), np.inf
    for i in range(half, zero_bin + 1):
        start, end = zero_bin - i, min(zero_bin + i + 1, num_bins)
        sliced = hist[start:end]
        p = sliced.astype(np.int64).copy()
        p[0] += prefix[start]
        p[-1] += prefix[num_bins] - prefix[end]
        merged = sliced.size // num_quantized_bins
        covered = merged * num_quantized_bins
        quantized = sliced[:covered].reshape(num_quantized_bins, merged).sum(axis=1).astype(np.int64)
        quantized[-1] += sliced[covered:].sum()
        norms = (p[:covered] != 0).reshape(num_quantized_bins, merged).sum(axis=1)
        q = np.zeros(p.size, dtype=np.int64)
        with np.errstate(divide="ignore", invalid="ignore"):
            levels = np.where(norms != 0, quantized / np.maximum(norms, 1), 0.0)
        q[:covered] = np.repeat(levels.astype(np.int64), merged)  # ORT assigns floats into an int64 array: truncation
        ps, qs = smooth_distribution(p), smooth_distribution(q)
        div = np.inf if ps is None or qs is None else float(entropy(ps, qs))
        if div < best_div:  # first minimum wins, as np.argmin in ORT
            best_div, best = div, (float(edges[start]), float(edges[end]))
    return max(best[0], low), min(best[1], high)


def collect_ranges(
    model: onnx.ModelProto,
    feeds_list: Sequence[Feeds],
    tensors: Sequence[str],
    config: RangeConfig = RangeConfig(),
    *,
    threads: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    budget_bytes: int = DEFAULT_BUDGET_BYTES,
):
    """Ranges of ``tensors`` over ``feeds_list``, one image at a time; returns ONNX Runtime's ``TensorsData``.

    ``progress(done, total)`` counts segments over all feeds.
    """
    if not feeds_list:
        raise PrecisionError("no calibration inputs for INT8 quantization")
    if not tensors:
        raise PrecisionError("no activation tensors to calibrate")
    collector = _Collector(tensors, config)
    exposed = tensors if collector.histograms is not None else ()
    runner = SegmentRunner(model, ranges=tensors, expose=exposed, threads=threads,
                           budget_bytes=budget_bytes)
    total = len(feeds_list) * len(runner.segments)
    if progress:
        progress(0, total)
    for k, feeds in enumerate(feeds_list):
        step = (lambda s, k=k: progress(k * len(runner.segments) + s + 1, total)) if progress else None
        collector.update(runner.run(feeds, observe=collector, on_segment=step).ranges)
    return collector.tensors_data()


__all__ = ["ENTROPY_BINS", "ENTROPY_QUANTIZED_BINS", "PERCENTILE_BINS", "RangeConfig", "calibrated_tensors",
           "collect_ranges", "entropy_threshold"]
