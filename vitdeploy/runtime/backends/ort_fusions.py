"""Did ONNX Runtime fuse what it should? Counts fused kernels and the patterns left unfused in an optimized graph.

ONNX Runtime writes the graph it will run when ``optimized_model_path`` is set
(:class:`vitdeploy.runtime.backends.ort_settings.OrtSettings`). This module reads that graph and reports, per
fusion family, how many fused kernels it holds and how many nodes show the unfused pattern:

* ``gelu``: ``Gelu``/``BiasGelu``/``FastGelu``/``QuickGelu`` vs ``Erf`` nodes left;
* ``layernorm``: ``LayerNormalization`` and its skip/simplified forms vs ``ReduceMean`` nodes left
  (a written-out mean/variance);
* ``matmul_bias``: ``Gemm``/``FusedGemm``/``QGemm`` vs MatMul-like nodes whose result is added to a
  constant vector (a bias; scalar constants such as a normalization's epsilon do not count);
* ``attention``: ``MultiHeadAttention``/``Attention``/``GroupQueryAttention`` vs ``Softmax`` nodes left;
* ``int8``: integer kernels (``MatMulIntegerToFloat``, ``QLinearMatMul``, ``QLinearConv``, ...) vs
  ``DequantizeLinear`` outputs still feeding float MatMul/Gemm/Conv (fake quantization).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FUSED_OPS = {
    "gelu": ("Gelu", "BiasGelu", "FastGelu", "QuickGelu"),
    "layernorm": ("LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
                  "SkipSimplifiedLayerNormalization"),
    "matmul_bias": ("Gemm", "FusedGemm", "QGemm"),
    "attention": ("MultiHeadAttention", "Attention", "GroupQueryAttention"),
    "int8": ("MatMulIntegerToFloat", "QLinearMatMul", "QLinearConv", "QGemm", "MatMulInteger", "ConvInteger",
             "DynamicQuantizeMatMul"),
}
_MATMUL_LIKE = ("MatMul", "FusedMatMul")
_FLOAT_GEMMS = ("MatMul", "FusedMatMul", "Gemm", "Conv", "FusedConv")


@dataclass
class FusionReport:
    """Fused kernels and unfused patterns per family (see the module docstring)."""

    op_counts: dict[str, int]
    fused: dict[str, int] = field(default_factory=dict)
    unfused: dict[str, int] = field(default_factory=dict)

    def missing(self, families: tuple[str, ...] = ("gelu", "layernorm", "matmul_bias")) -> list[str]:
        """One line per family in ``families`` that has unfused patterns left (empty when all fused)."""
        return [f"{family}: {self.unfused[family]} unfused pattern(s) left, {self.fused[family]} fused"
                for family in families if self.unfused.get(family)]

    def to_dict(self) -> dict[str, Any]:
        return {"fused": dict(self.fused), "unfused": dict(self.unfused), "op_counts": dict(sorted(self.op_counts.items()))}


def fusion_report(model: Any) -> FusionReport:
    """Report on an ONNX ``ModelProto`` or a path to one (weights are not loaded)."""
    import onnx

    if isinstance(model, (str, Path)):
        model = onnx.load(str(model), load_external_data=False)
    graph = model.graph
    nodes = list(graph.node)
    counts = Counter(n.op_type for n in nodes)
    # Constant tensors with more than one element (bias vectors; a scalar such as LayerNorm's eps is no bias).
    sizes = {t.name: _numel(t.dims) for t in graph.initializer}
    for n in nodes:
        if n.op_type == "Constant":
            sizes.update({n.output[0]: _numel(a.t.dims) for a in n.attribute if a.name == "value"})
    constants = {name for name, size in sizes.items() if size > 1}
    consumers: dict[str, list[Any]] = {}
    for node in nodes:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    def feeds_constant_add(node: Any) -> bool:
        users = consumers.get(node.output[0], [])
        return any(u.op_type == "Add" and any(i in constants for i in u.input if i != node.output[0]) for u in users)

    def feeds_float_gemm(node: Any) -> bool:
        return any(u.op_type in _FLOAT_GEMMS for u in consumers.get(node.output[0], []))

    fused = {family: sum(counts[op] for op in ops) for family, ops in FUSED_OPS.items()}
    unfused = {
        "gelu": counts["Erf"],
        "layernorm": counts["ReduceMean"],
        "matmul_bias": sum(1 for n in nodes if n.op_type in _MATMUL_LIKE and feeds_constant_add(n)),
        "attention": counts["Softmax"],
        "int8": sum(1 for n in nodes if n.op_type == "DequantizeLinear" and feeds_float_gemm(n)),
    }
    return FusionReport(dict(counts), fused, unfused)


def _numel(dims: Any) -> int:
    out = 1
    for d in dims:
        out *= int(d)
    return out


def optimized_graph(path: str | Path, out_path: str | Path, settings: Any = None) -> Any:
    """Let ONNX Runtime optimize ``path`` with ``settings`` (an OrtSettings), save the result to ``out_path``, load it.

    The graph returned is the one a session with these settings runs (same level, same disabled optimizers).
    """
    import dataclasses

    import onnx
    import onnxruntime as ort

    from vitdeploy.runtime.backends.ort_settings import OrtSettings, is_int8_file

    chosen = dataclasses.replace(settings or OrtSettings(), optimized_model_path=str(out_path))
    quantized = is_int8_file(path)
    options = chosen.session_options(quantized)
    options.log_severity_level = 3  # its notes on constant folding and NCHWc are about this file, not for users
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"],
                         disabled_optimizers=chosen.optimizers_to_disable(quantized) or None)
    return onnx.load(str(out_path), load_external_data=False)


#: Prefix of the Cast nodes ONNX Runtime's CPU provider inserts around FP16 nodes it has no FP16 kernel for.
INSERTED_CAST_PREFIX = "InsertedPrecisionFreeCast"


def fp16_fallback_ops(model: Any) -> tuple[Counter, int]:
    """(op type -> nodes run in FP32 because the CPU provider has no FP16 kernel for them, casts inserted) in an
    optimized graph: the nodes that read a widening Cast ONNX Runtime inserted (:data:`INSERTED_CAST_PREFIX`,
    ``to`` FLOAT; the narrowing ones after such nodes feed nodes that do run in FP16)."""
    import onnx

    from vitdeploy.onnx_graph import cast_to

    inserted = [n for n in model.graph.node if n.op_type == "Cast" and n.name.startswith(INSERTED_CAST_PREFIX)]
    widened = {n.output[0] for n in inserted if cast_to(n) == onnx.TensorProto.FLOAT}
    ops: Counter = Counter()
    for node in model.graph.node:
        if node.op_type != "Cast" and any(i in widened for i in node.input):
            ops[node.op_type] += 1
    return ops, len(inserted)


def cpu_precision_note(path: str | Path, precision: str, threads: int | None = None) -> str | None:
    """What ONNX Runtime's CPU provider does with an FP16 or INT8 file, and where such a file pays; None for FP32.

    Why: on a CPU an FP16 file usually runs slower than its FP32 source and a newcomer concludes that
    calibration broke it. Read from the graph ONNX Runtime optimizes for this CPU (one extra session).
    """
    import tempfile

    from vitdeploy.runtime.backends.ort_settings import OrtSettings, int8_kernels

    if precision not in ("fp16", "int8"):
        return None
    with tempfile.TemporaryDirectory(prefix="vitdeploy-optimized-") as tmp:
        graph = optimized_graph(path, Path(tmp) / "optimized.onnx", OrtSettings(threads=threads))
    if precision == "fp16":
        ops, casts = fp16_fallback_ops(graph)
        if not ops:
            return "fp16 on this CPU: every FP16 node has an FP16 CPU kernel here"
        listed = ", ".join(f"{op} {n}" for op, n in sorted(ops.items(), key=lambda kv: (-kv[1], kv[0])))
        return (f"fp16 on this CPU: ONNX Runtime has no FP16 CPU kernel for {sum(ops.values())} node(s) ({listed}); "
                f"it inserted {casts} Cast node(s) and runs them in FP32, which is why this file can run slower here "
                "than the FP32 one. FP16 pays on NVIDIA GPUs (a TensorRT engine from 'vitdeploy build-engine', or --device cuda)")
    report = fusion_report(graph)
    integer = ", ".join(f"{op} {report.op_counts[op]}" for op in FUSED_OPS["int8"] if report.op_counts.get(op))
    return (f"int8 on this CPU: {report.fused['int8']} integer kernel(s) ({integer or 'none'}), "
            f"{report.unfused['int8']} GEMM(s) left on dequantized float weights; {int8_kernels().description}. "
            "INT8 pays most on GPUs with INT8 tensor cores (a TensorRT engine from 'vitdeploy build-engine')")


__all__ = ["FUSED_OPS", "FusionReport", "INSERTED_CAST_PREFIX", "cpu_precision_note", "fp16_fallback_ops",
           "fusion_report", "optimized_graph"]
