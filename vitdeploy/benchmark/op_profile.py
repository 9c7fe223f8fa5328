"""Where an ONNX Runtime session's time goes: its profiler's trace, summed per run by operator kind.

ONNX Runtime's profiler (``SessionOptions.enable_profiling``) writes one Chrome-trace JSON per
session: a ``model_run`` event per run and a ``<node>_kernel_time`` event per node executed, with the
operator type, the provider and the arena's size. The node names are those of the *optimized* graph
(after ONNX Runtime's fusions), so the kinds below are read from that graph too: a GEMM with a weight
matrix (a 2-D initializer) is a linear layer; one between two activations, or with a 3-D constant (the
precomputed relative-position tables), is attention. A linear layer's FLOPs are read from the shapes
the profiler records (2 x output elements x the first input's last dimension).

Kinds, so that graphs written differently compare: ``linear`` (weight GEMMs, float or integer),
``attention`` (fused attention ops, Softmax, Einsum, activation-by-activation MatMuls, vitdeploy's fused
kernel), ``conv``, ``norm``, ``elementwise`` (bias, GELU, residual adds, scaling), ``layout`` (Transpose,
Reshape, Pad, Slice, Concat, Gather: what window partitioning and head splitting cost), ``quantize``
(Q/DQ, dynamic quantization) and ``other``.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vitdeploy.errors import InputError

KINDS = ("linear", "attention", "conv", "norm", "elementwise", "layout", "quantize", "other")

#: GEMM-like operators: ``linear`` with a weight operand, ``attention`` without.
GEMM_OPS = frozenset({"MatMul", "Gemm", "FusedMatMul", "FusedGemm", "MatMulIntegerToFloat", "DynamicQuantizeMatMul",
                      "MatMulInteger", "QGemm", "QLinearMatMul", "MatMulNBits", "QAttention"})
_KIND_OF_OP = {
    **{op: "attention" for op in ("MultiHeadAttention", "Attention", "GroupQueryAttention", "Softmax", "Einsum",
                                  "RelPosAttention")},
    **{op: "conv" for op in ("Conv", "FusedConv", "QLinearConv", "ConvInteger", "NhwcFusedConv", "ConvTranspose")},
    **{op: "norm" for op in ("LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
                             "ReduceMean", "InstanceNormalization", "BatchNormalization")},
    **{op: "elementwise" for op in ("Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Erf", "Gelu", "BiasGelu",
                                    "FastGelu", "QuickGelu", "Tanh", "Sigmoid", "Relu", "Clip", "Cast", "Where",
                                    "Neg", "Exp", "Reciprocal", "BiasAdd", "Max", "Min")},
    **{op: "layout" for op in ("Transpose", "Reshape", "Pad", "Slice", "Concat", "Gather", "GatherElements",
                               "Split", "Expand", "Squeeze", "Unsqueeze", "Tile", "Flatten", "Identity",
                               "Resize", "DepthToSpace", "SpaceToDepth", "ReorderInput", "ReorderOutput")},
    **{op: "quantize" for op in ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear")},
}


def op_kind(op_type: str, has_weight: bool) -> str:
    """The kind of one executed node (see the module docstring)."""
    if op_type in GEMM_OPS:
        return "linear" if has_weight else "attention"
    return _KIND_OF_OP.get(op_type, "other")


def weight_nodes(optimized_model: str | Path) -> set[str]:
    """Names of the nodes of an (optimized) ONNX graph with a weight matrix (a 2-D initializer or constant) among
    their inputs; weights not loaded."""
    import onnx

    model = onnx.load(str(optimized_model), load_external_data=False)
    matrices = {init.name for init in model.graph.initializer if len(init.dims) == 2}
    matrices |= {n.output[0] for n in model.graph.node if n.op_type == "Constant"
                 and any(a.name == "value" and len(a.t.dims) == 2 for a in n.attribute)}
    return {n.name for n in model.graph.node if any(i in matrices for i in n.input)}


@dataclass(frozen=True)
class RunProfile:
    """One ``session.run``: its wall time and its kernels' time by kind and by operator type."""

    run_ms: float
    kernel_ms: float
    by_kind: dict[str, float]
    by_op: dict[str, float]
    nodes: int
    arena_mb: float  # ONNX Runtime's CPU arena at the end of the run
    linear_gflop: float = 0.0  # the linear layers' arithmetic, from the recorded shapes

    @property
    def linear_gflops_per_s(self) -> float:
        """The rate the linear layers ran at (GFLOP/s or, for integer GEMMs, GOP/s)."""
        ms = self.by_kind.get("linear", 0.0)
        return self.linear_gflop / (ms / 1000.0) if ms > 0 else 0.0


@dataclass(frozen=True)
class OpProfile:
    """A session's profile: its initialization time and every run, first one first."""

    session_init_ms: float
    runs: list[RunProfile]

    @property
    def first(self) -> RunProfile:
        return self.runs[0]

    def steady(self) -> RunProfile:
        """Per-kind and per-op medians over the runs after the first (the first one when there is one run)."""
        later = self.runs[1:] or self.runs[:1]
        kinds = {k for r in later for k in r.by_kind}
        ops = {o for r in later for o in r.by_op}
        return RunProfile(
            run_ms=statistics.median(r.run_ms for r in later),
            kernel_ms=statistics.median(r.kernel_ms for r in later),
            by_kind={k: statistics.median(r.by_kind.get(k, 0.0) for r in later) for k in kinds},
            by_op={o: statistics.median(r.by_op.get(o, 0.0) for r in later) for o in ops},
            nodes=later[-1].nodes, arena_mb=max(r.arena_mb for r in later), linear_gflop=later[-1].linear_gflop,
        )

    def to_dict(self) -> dict[str, Any]:
        steady = self.steady()
        return {"session_init_ms": round(self.session_init_ms, 1), "runs": len(self.runs),
                "first": _run_dict(self.first), "steady": _run_dict(steady)}


def _run_dict(run: RunProfile) -> dict[str, Any]:
    return {"run_ms": round(run.run_ms, 1), "kernel_ms": round(run.kernel_ms, 1), "nodes": run.nodes,
            "arena_mb": round(run.arena_mb, 1), "linear_gflop": round(run.linear_gflop, 2),
            "linear_gflops_per_s": round(run.linear_gflops_per_s, 1),
            "by_kind": {k: round(run.by_kind.get(k, 0.0), 1) for k in KINDS},
            "by_op": {o: round(v, 1) for o, v in sorted(run.by_op.items(), key=lambda kv: -kv[1])}}


def read_ort_profile(trace: str | Path, weighted: Iterable[str] = ()) -> OpProfile:
    """Parse the JSON ``session.end_profiling()`` wrote; ``weighted``: :func:`weight_nodes` of the optimized graph."""
    try:
        events = json.loads(Path(trace).read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read the ONNX Runtime profile '{trace}' ({exc}): profile a session again") from None
    if not isinstance(events, list):
        raise InputError(f"'{trace}' is not an ONNX Runtime profile (a JSON list of trace events)")
    weighted = set(weighted)
    init = sum(e.get("dur", 0) for e in events if e.get("cat") == "Session" and e.get("name") == "session_initialization")
    runs = sorted((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"), key=lambda e: e["ts"])
    nodes = sorted((e for e in events if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time")),
                   key=lambda e: e["ts"])
    out, i = [], 0
    for run in runs:
        start, end = run["ts"], run["ts"] + run["dur"]
        by_kind: dict[str, float] = defaultdict(float)
        by_op: dict[str, float] = defaultdict(float)
        count, arena, gflop = 0, 0.0, 0.0
        while i < len(nodes) and nodes[i]["ts"] < start:
            i += 1
        while i < len(nodes) and nodes[i]["ts"] <= end:
            event = nodes[i]
            args = event.get("args", {})
            op = str(args.get("op_name", "?"))
            name = str(event["name"]).removesuffix("_kernel_time")
            ms = event.get("dur", 0) / 1000.0
            kind = op_kind(op, name in weighted)
            by_kind[kind] += ms
            if kind == "linear":
                gflop += _gemm_gflop(args)
            by_op[op] += ms
            arena = max(arena, float(args.get("mem_arena_held", 0) or 0) / 1e6)
            count += 1
            i += 1
        out.append(RunProfile(run_ms=run["dur"] / 1000.0, kernel_ms=sum(by_kind.values()), by_kind=dict(by_kind),
                              by_op=dict(by_op), nodes=count, arena_mb=arena, linear_gflop=gflop))
    if not out:
        raise InputError(f"'{trace}' holds no model_run: run the session at least once before end_profiling()")
    return OpProfile(session_init_ms=init / 1000.0, runs=out)


def _gemm_gflop(args: dict[str, Any]) -> float:
    """2 x output elements x K of one GEMM event (K: the first input's last dimension); 0 when shapes are missing."""
    try:
        inputs, outputs = args["input_type_shape"], args["output_type_shape"]
        k = int(next(iter(inputs[0].values()))[-1])
        out = 1
        for d in next(iter(outputs[0].values())):
            out *= int(d)
    except (KeyError, IndexError, StopIteration, TypeError, ValueError):
        return 0.0
    return 2.0 * out * k / 1e9
