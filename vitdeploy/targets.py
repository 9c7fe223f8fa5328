"""Export targets: which attention form the exported SAM encoder graph holds, per deployment runtime,
and every fact that follows from it (one home: the exporter, the runners, the CPU forms, the engine
builder and the CLI read them here; torch-free, so ``--help`` reads the names too).

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
from typing import Any

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
        cpu_only: why the graph must not run off the CPU (None: it may, where verified).
    """

    name: str
    attention: str
    pad_value: bool
    contrib_ops: bool
    ort_gelu: bool
    summary: str
    cpu_only: str | None = None

    @property
    def folded_attention(self) -> bool:
        """The rel-pos term is folded into the query/key products (``sdpa``, ``ort_mha``): the forms of
        :mod:`vitdeploy.runtime.forms` apply, and ``vitdeploy optimize`` writes one."""
        return self.attention in ("sdpa", "ort_mha")

    @property
    def tensorrt_parsable(self) -> bool:
        """Standard ONNX that TensorRT's parser reads (no ONNX Runtime contrib ops)."""
        return not self.contrib_ops


TARGETS: dict[str, ExportTarget] = {
    "generic": ExportTarget("generic", "decomposed", False, False, False,
                            "standard ONNX, attention with the decomposed rel-pos bias written out; any runtime"),
    "tensorrt": ExportTarget("tensorrt", "sdpa", True, False, False,
                             "standard ONNX, rel-pos folded into Q/K: bias-free attention that TensorRT fuses"),
    "onnxruntime-cpu": ExportTarget(
        "onnxruntime-cpu", "ort_mha", False, True, True,
        "ONNX Runtime contrib MultiHeadAttention (CPU flash attention); ONNX Runtime only",
        cpu_only="its contrib MultiHeadAttention gives wrong FP32 results on CUDA (cosine 0.9935, relative L2 "
                 "0.114 vs the official model, measured on an H100 with onnxruntime-gpu 1.31.1)"),
}

#: The target ``vitdeploy export`` uses when none is given: the portable graph.
DEFAULT_TARGET = "generic"


def get_target(name: str) -> ExportTarget:
    """The target called ``name``; InputError naming the choices otherwise."""
    try:
        return TARGETS[name]
    except KeyError:
        raise InputError(f"unknown export target '{name}': use one of {', '.join(TARGETS)}") from None


def target_of(metadata: dict[str, Any] | None) -> ExportTarget | None:
    """The target a file's vitdeploy ``metadata`` records; the default where it records none (families with one
    attention form: the decoder, timm), None for a name vitdeploy does not know (metadata checks report it)."""
    name = (metadata or {}).get("target")
    if name is None:
        return TARGETS[DEFAULT_TARGET]
    return TARGETS.get(str(name))


#: The names ``--target`` takes.
TARGET_NAMES: tuple[str, ...] = tuple(TARGETS)

__all__ = ["DEFAULT_TARGET", "TARGETS", "TARGET_NAMES", "ExportTarget", "get_target", "target_of"]
