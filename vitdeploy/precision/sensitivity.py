"""Per-layer INT8 sensitivity and the accuracy-budget search.

Sensitivity of a layer: the worst cosine of the model outputs against FP32, over the held-out feeds,
when *only that layer* is quantized (every tensor keeps the scale of the one calibration). The
budget search then keeps the most sensitive layers in FP32, fewest first, until the fully quantized
rest meets the target: doubling the count until the target holds, then bisecting between the last
miss and the first hit (each step is one graph edit and one run over the held-out feeds).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from vitdeploy.precision.evaluation import compare_outputs, ort_session, run_all, worst_cosine
from vitdeploy.precision.int8 import restrict_quantization

Feeds = dict[str, np.ndarray]
Outputs = list[dict[str, np.ndarray]]


@dataclass(frozen=True)
class LayerSensitivity:
    name: str
    op_type: str
    cosine: float

    def to_dict(self) -> dict:
        return {"name": self.name, "op_type": self.op_type, "cosine_alone": self.cosine, "error": 1.0 - self.cosine}


@dataclass
class BudgetResult:
    """Layers kept in FP32 by the search, the cosine it reached, and each step it tried."""

    kept: list[str]
    cosine: float
    met: bool
    steps: list[tuple[int, float]]


def subset_cosine(qmodel: onnx.ModelProto, fp32: onnx.ModelProto, quantized: set[str], feeds: Sequence[Feeds],
                  reference: Outputs, threads: int | None = None) -> float:
    """Worst cosine vs ``reference`` when only ``quantized`` nodes are quantized."""
    model = restrict_quantization(qmodel, fp32, quantized)
    return worst_cosine(compare_outputs(reference, run_all(ort_session(model, threads), feeds), "int8"))


def layer_sensitivity(
    qmodel: onnx.ModelProto,
    fp32: onnx.ModelProto,
    nodes: Sequence[str],
    feeds: Sequence[Feeds],
    reference: Outputs,
    *,
    threads: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[LayerSensitivity]:
    """Sensitivity of every node in ``nodes``, most sensitive (lowest cosine) first."""
    ops = {n.name: n.op_type for n in fp32.graph.node}
    out = []
    if progress:
        progress(0, len(nodes))
    for k, name in enumerate(nodes):
        out.append(LayerSensitivity(name, ops.get(name, "?"), subset_cosine(qmodel, fp32, {name}, feeds, reference, threads)))
        if progress:
            progress(k + 1, len(nodes))
    return sorted(out, key=lambda s: s.cosine)


def budget_search(
    qmodel: onnx.ModelProto,
    fp32: onnx.ModelProto,
    nodes: Sequence[str],
    ranking: Sequence[LayerSensitivity],
    feeds: Sequence[Feeds],
    reference: Outputs,
    target: float,
    *,
    threads: int | None = None,
) -> BudgetResult:
    """Fewest most-sensitive layers to keep in FP32 so that the worst cosine reaches ``target``."""
    order = [s.name for s in ranking]
    cache: dict[int, float] = {}

    def cosine_keeping(k: int) -> float:
        if k not in cache:
            cache[k] = subset_cosine(qmodel, fp32, set(nodes) - set(order[:k]), feeds, reference, threads)
        return cache[k]

    lo, hi = 0, None  # lo: a count known to miss; hi: the smallest count known to meet
    if cosine_keeping(0) >= target:
        hi = 0
    k = 1
    while hi is None and k <= len(order):
        if cosine_keeping(k) >= target:
            hi = k
        else:
            lo = k
            k *= 2
    if hi is None and len(order) not in cache:
        if cosine_keeping(len(order)) >= target:
            hi = len(order)
    if hi is None:
        best = max(cache, key=lambda c: cache[c])
        return BudgetResult(order[:best], cache[best], False, sorted(cache.items()))
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if cosine_keeping(mid) >= target:
            hi = mid
        else:
            lo = mid
    return BudgetResult(order[:hi], cache[hi], True, sorted(cache.items()))
