"""The INT8 pass end to end: quantize, measure on held-out feeds, meet an accuracy budget, check for TensorRT."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx

from vitdeploy.errors import PrecisionError
from vitdeploy.precision.checks import graph_problems, qdq_problems, raise_if_problems
from vitdeploy.precision.evaluation import StageProgress, compare_outputs, ort_session, run_all, worst_cosine
from vitdeploy.precision.int8 import Int8Config, quantize_int8, restrict_quantization, tool_version
from vitdeploy.precision.model_io import copy_model
from vitdeploy.precision.segments import ensure_node_names
from vitdeploy.precision.sensitivity import BudgetResult, LayerSensitivity, budget_search, layer_sensitivity
from vitdeploy.parity import ParityResult

Feeds = dict[str, np.ndarray]


@dataclass
class Int8Result:
    """The Q/DQ graph, which GEMM-like nodes stayed FP32 and why, parity, and the sensitivity measured."""

    model: onnx.ModelProto
    quantized: list[str]
    kept: dict[str, str]
    parity: list[ParityResult]
    default_cosine: float
    tool: str
    sensitivity: list[LayerSensitivity] = field(default_factory=list)
    budget: BudgetResult | None = None
    #: The Q/DQ graph's outputs on the evaluation feeds (as ONNX Runtime runs the written file), for
    #: comparisons against other references (calibrate's eager parity) without running it again.
    outputs: list[dict[str, np.ndarray]] = field(default_factory=list)

    @property
    def cosine(self) -> float:
        return worst_cosine(self.parity)


def convert_int8(
    model: onnx.ModelProto,
    calibration: Sequence[Feeds],
    evaluation: Sequence[Feeds] | None = None,
    config: Int8Config = Int8Config(),
    *,
    target_cosine: float | None = None,
    always_sensitivity: bool = False,
    echo: Callable[[str], None] | None = None,
    progress: StageProgress | None = None,
) -> Int8Result:
    """Quantize ``model``'s MatMul/Gemm/Conv to symmetric INT8 and, given ``target_cosine``, meet it.

    The target is judged on ``evaluation`` (held-out feeds; ``calibration`` when None) as the worst
    cosine of any output against the FP32 graph. When the default quantization misses it, the layers
    with the worst sensitivity are kept in FP32 until it holds; PrecisionError if even that fails.
    """
    say = echo or (lambda _: None)
    evaluation = list(evaluation or calibration)
    qmodel, nodes, kept = quantize_int8(model, calibration, config)
    source = ensure_node_names(copy_model(model))
    reference = run_all(ort_session(source, config.threads), evaluation, progress, "FP32 reference on the evaluation images")
    outputs = run_all(ort_session(qmodel, config.threads), evaluation, progress, "INT8 parity")
    parity = compare_outputs(reference, outputs, "int8")
    default_cosine = worst_cosine(parity)
    say(f"  int8 ({config.method}): {len(nodes)} node(s) quantized, worst cosine vs FP32 {default_cosine:.6f}")
    result = Int8Result(qmodel, nodes, dict(kept), parity, default_cosine, tool_version(), outputs=outputs)
    missed = target_cosine is not None and default_cosine < target_cosine
    if missed or always_sensitivity:
        say(f"  measuring per-layer sensitivity of {len(nodes)} layer(s) on {len(evaluation)} held-out input(s)")
        result.sensitivity = layer_sensitivity(qmodel, source, nodes, evaluation, reference,
                                               threads=config.threads,
                                               progress=(lambda d, t: progress("layer sensitivity", d, t)) if progress else None)
    if missed:
        budget = budget_search(qmodel, source, nodes, result.sensitivity, evaluation, reference, target_cosine,
                               threads=config.threads)
        result.budget = budget
        if not budget.met:
            raise PrecisionError(f"INT8 cannot reach cosine {target_cosine} vs FP32 (best {budget.cosine:.6f} keeping "
                                 f"{len(budget.kept)} layer(s) in FP32): lower --target-cosine or use --precision fp16")
        ranks = {s.name: s for s in result.sensitivity}
        for name in budget.kept:
            result.kept[name] = (f"accuracy budget: quantized alone it gives cosine {ranks[name].cosine:.6f}, "
                                 f"among the {len(budget.kept)} most sensitive")
        result.quantized = [n for n in nodes if n not in budget.kept]
        result.model = restrict_quantization(qmodel, source, set(result.quantized))
        result.outputs = run_all(ort_session(result.model, config.threads), evaluation, progress, "INT8 parity, budget result")
        result.parity = compare_outputs(reference, result.outputs, "int8")
        say(f"  accuracy budget: {len(budget.kept)} layer(s) kept in FP32, worst cosine {result.cosine:.6f} "
            f">= target {target_cosine}")
    raise_if_problems(qdq_problems(result.model) + graph_problems(result.model), "the INT8 graph")
    return result
