"""Export targets: which attention form the exported SAM encoder graph holds, per deployment runtime.

The weights and the numbers are the same for every target (each is tested against the official
module); what differs is how attention is written, because each runtime fuses a different pattern:

* ``generic`` (the default): scores plus the decomposed rel-pos bias, written out as the official
  module computes them (:class:`~vitdeploy.rewrites.sam_encoder.ExportableAttention`). Standard ONNX
  that every runtime runs; no runtime fuses its attention.
* ``tensorrt``: rel-pos folded into the query/key products, so attention is the bias-free
  MatMul-Softmax-MatMul pattern TensorRT fuses (:mod:`vitdeploy.rewrites.fused_attention`, ``sdpa``
  kernel, values zero-padded to the query/key head size). Standard ONNX at opset 18.
* ``onnxruntime-cpu``: the same folding, with attention as ONNX Runtime's contrib
  ``com.microsoft.MultiHeadAttention`` (its CPU flash-attention kernel), and GELU written in the node
  order ONNX Runtime's optimizer fuses (:mod:`vitdeploy.rewrites.gelu`). Runs on ONNX Runtime only.
"""

from __future__ import annotations

from dataclasses import dataclass

from vitdeploy.errors import InputError


@dataclass(frozen=True)
class ExportTarget:
    """How one target writes attention.

    Attributes:
        attention: ``decomposed`` (ExportableAttention), ``sdpa`` or ``ort_mha`` (FusedAttention kernels).
        pad_value: zero-pad values to the query/key head size (``sdpa`` only).
        contrib_ops: the graph holds ONNX Runtime contrib ops (not standard ONNX).
        ort_gelu: write GELU in the node order ONNX Runtime fuses (:mod:`vitdeploy.rewrites.gelu`).
        summary: one line for ``--help`` and reports.
    """

    name: str
    attention: str
    pad_value: bool
    contrib_ops: bool
    ort_gelu: bool
    summary: str


TARGETS: dict[str, ExportTarget] = {
    "generic": ExportTarget("generic", "decomposed", False, False, False,
                            "standard ONNX, attention with the decomposed rel-pos bias written out; any runtime"),
    "tensorrt": ExportTarget("tensorrt", "sdpa", True, False, False,
                             "standard ONNX, rel-pos folded into Q/K: bias-free attention that TensorRT fuses"),
    "onnxruntime-cpu": ExportTarget("onnxruntime-cpu", "ort_mha", False, True, True,
                                    "ONNX Runtime contrib MultiHeadAttention (CPU flash attention); ONNX Runtime only"),
}

#: The target ``vitdeploy export`` uses when none is given: the portable graph.
DEFAULT_TARGET = "generic"


def get_target(name: str) -> ExportTarget:
    """The target called ``name``; InputError naming the choices otherwise."""
    try:
        return TARGETS[name]
    except KeyError:
        raise InputError(f"unknown export target '{name}': use one of {', '.join(TARGETS)}") from None


__all__ = ["DEFAULT_TARGET", "TARGETS", "ExportTarget", "get_target"]
