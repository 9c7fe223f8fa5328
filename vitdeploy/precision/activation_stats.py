"""Per-node activation ranges and local FP16 drift over calibration images, measured in segments.

What the FP16 pass decides islands from (:func:`vitdeploy.precision.half_precision.measured_fp32_nodes`):
each node's largest input and output values, its weights' largest value, NaN/Inf in its FP32
output, and its local FP16 drift (its output run in FP16 on its own FP32 inputs rounded to FP16,
relative L2 against FP32: the error the node adds by itself, not the one it inherits). Measured with
:class:`~vitdeploy.precision.segments.SegmentRunner`: every tensor's statistics are taken once, when it
is produced (inside ONNX Runtime), and a node's input statistics are those of the tensors it reads.

Ranges are taken on every calibration image: extremes are what overflow, and one image can hold
them. Drift is taken on the first ``DRIFT_IMAGES`` (4): it is a relative L2 over each node's whole
output (millions of values at full size), which the image changes little, and its shadow nodes
cost a run ~40 % more (ViT-B at 1024 px, AMD EPYC Zen 1 AVX2, 2 threads: 29 s per image with
drift, ~20 s with ranges alone), so 12 images are measured in ~5 min instead of ~6.

Limits: on a CPU, ONNX Runtime runs FP16 nodes that lack an FP16 kernel in FP32 between casts, so the
local drift measures the rounding of inputs and outputs, which is what exposes overflow, cancellation
(``x - mean``) and amplification (``exp`` of large logits); it does not model a GPU kernel's
accumulation order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto

from vitdeploy.errors import PrecisionError
from vitdeploy.precision.half_formats import FP16, HalfFormat
from vitdeploy.precision.segments import SegmentRunner

Feeds = dict[str, np.ndarray]
Progress = Callable[[int, int], None]
#: Local FP16 drift is measured on this many calibration feeds (the first ones); ranges on all.
DRIFT_IMAGES = 4


@dataclass
class NodeStats:
    """Measured behaviour of one node over all calibration feeds (maxima over feeds).

    Attributes:
        max_abs_in: largest |value| among the node's float activation inputs (initializers excluded).
        max_abs_out: largest finite |value| among its float outputs.
        init_max_abs: largest |value| among its float initializers.
        nonfinite_out: how many of its FP32 outputs held NaN/Inf, summed over feeds (non-zero means the FP32
            graph itself is broken).
        drift: worst relative L2 error of its outputs when run in the pass's 16-bit format (FP16 or BF16) on
            its FP32 inputs rounded to it; ``inf`` when it overflows; None when not measured (no float output,
            typed op, ranges only).
    """

    name: str
    op_type: str
    max_abs_in: float = 0.0
    max_abs_out: float = 0.0
    init_max_abs: float = 0.0
    nonfinite_out: int = 0
    drift: float | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def collect_node_stats(
    model: onnx.ModelProto,
    feeds_list: Sequence[Feeds],
    *,
    drift: HalfFormat | None = FP16,
    threads: int | None = None,
    progress: Progress | None = None,
    drift_images: int = DRIFT_IMAGES,
) -> dict[str, NodeStats]:
    """Per-node ranges over every feed and (unless ``drift`` is None) local drift in that 16-bit format over the
    first ``drift_images``, keyed by node name.

    Unnamed nodes of ``model`` are named in place (:func:`~vitdeploy.precision.segments.ensure_node_names`).
    ``progress(done, total)`` counts feeds.
    """
    if not feeds_list:
        raise PrecisionError("no calibration inputs to measure activations with")
    if drift_images < 1:
        raise PrecisionError(f"drift_images must be at least 1, not {drift_images}")
    runner = SegmentRunner(model, ranges="all", drift=drift, threads=threads)
    if progress:  # the stage starts now (its clock and ETA count from here)
        progress(0, len(feeds_list))
    graph = runner.model.graph
    stats = {n.name: NodeStats(n.name, n.op_type) for n in graph.node}
    used = {n for node in graph.node for n in node.input}
    init_max = {t.name: _max_abs(runner.init_array(t.name)) for t in graph.initializer
                if t.data_type == TensorProto.FLOAT and t.name in used}
    for node in graph.node:
        stats[node.name].init_max_abs = max((init_max[n] for n in node.input if n in init_max), default=0.0)
    for k, feeds in enumerate(feeds_list):
        if drift and k == drift_images:  # the rest: ranges only (the drift sessions and their weights are let go)
            runner = SegmentRunner(runner.model, ranges="all", drift=None, threads=threads)
        result = runner.run(feeds)
        for node in graph.node:
            st = stats[node.name]
            ins = [result.ranges[n] for n in node.input if n in result.ranges and n not in runner.inits]
            outs = [result.ranges[o] for o in node.output if o in result.ranges]
            st.max_abs_in = max([st.max_abs_in] + [r.max_abs for r in ins if r.finite])
            st.max_abs_out = max([st.max_abs_out] + [r.max_abs for r in outs if r.finite])
            st.nonfinite_out += sum(1 for r in outs if not r.finite)
            drifts = [result.drift[o] for o in node.output if o in result.drift]
            if drifts:
                st.drift = max(drifts) if st.drift is None else max([st.drift, *drifts])
        if progress:
            progress(k + 1, len(feeds_list))
    return stats


def _max_abs(array: np.ndarray) -> float:
    return float(np.abs(array).max()) if array.size else 0.0


__all__ = ["DRIFT_IMAGES", "NodeStats", "Progress", "collect_node_stats"]
