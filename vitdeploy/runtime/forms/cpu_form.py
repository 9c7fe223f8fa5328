"""The CPU form of an ``onnxruntime-cpu`` export: the graph vitdeploy's runner runs, as a file of its own.

By default :class:`vitdeploy.runtime.backends.onnxruntime_runner.OnnxRuntimeRunner` does not run an ``--target onnxruntime-cpu``
file as exported: at load time, in memory, it unfolds the global blocks' folded attention
(:mod:`vitdeploy.runtime.forms.folded_attention`) or, asked to, swaps in vitdeploy's fused kernel
(:mod:`vitdeploy.runtime.forms.relpos_kernel`). A program that opens the file itself (the C++ app, an
application's own ONNX Runtime session) runs the slower folded form. ``vitdeploy optimize`` writes
the transformed graph as a file (:func:`cpu_form_graph` here, saved by :mod:`vitdeploy.cpu_optimize`);
its metadata key :data:`CPU_FORM_KEY` records which form it holds, and the runner reads it back
(:func:`read_cpu_form`) to run the file as it is and say which form ran.

Forms (:data:`FORMS`):

* ``unfolded``: the global blocks' attention takes its rel-pos term as an attention bias; standard
  ONNX Runtime contrib ops only, any ONNX Runtime build with ``MultiHeadAttention`` runs it.
* ``fused-kernel``: vitdeploy's ``ai.vitdeploy::RelPosAttention`` where a vector path applies; the
  session needs ``libvitdeploy_ort_ops.so`` (``bash cpp/build.sh``). Each node's ``isa`` attribute
  caps the kernel path at the one the writing machine's CPU took; on a CPU without it the library
  takes the widest path that CPU has (never a wider one), and the runner reports that one
  (:func:`vitdeploy.runtime.forms.relpos_kernel.capped_path`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vitdeploy.errors import InputError

if TYPE_CHECKING:
    import onnx

#: vitdeploy metadata key of a CPU-form file (a JSON object: :meth:`CpuForm.to_metadata`).
CPU_FORM_KEY = "cpu_form"
UNFOLDED = "unfolded"
FUSED_KERNEL = "fused-kernel"
FORMS = (UNFOLDED, FUSED_KERNEL)


@dataclass(frozen=True)
class CpuForm:
    """Which form a CPU-form file holds, the attention nodes it changed, the kernel path written (fused only),
    and the file it was written from."""

    attention: str
    nodes: tuple[str, ...]
    kernel_path: str | None = None
    source: str = ""
    kept: dict[str, str] = field(default_factory=dict)

    def to_metadata(self) -> dict[str, Any]:
        data: dict[str, Any] = {"attention": self.attention, "nodes": list(self.nodes), "source": self.source}
        if self.kernel_path is not None:
            data["kernel_path"] = self.kernel_path
        return data

    def summary(self) -> str:
        if self.attention == FUSED_KERNEL:
            return (f"{len(self.nodes)} attention node(s) on vitdeploy's fused kernel (written for its {self.kernel_path} "
                    "path), written by 'vitdeploy optimize --fused-attention'")
        return (f"{len(self.nodes)} attention node(s) with the rel-pos term as an attention bias, written by "
                "'vitdeploy optimize'")


def read_cpu_form(metadata: dict[str, Any], name: str = "the file") -> CpuForm | None:
    """The :class:`CpuForm` a file's decoded vitdeploy metadata records; None for any other file."""
    raw = metadata.get(CPU_FORM_KEY)
    if raw is None:
        return None
    if not isinstance(raw, dict) or raw.get("attention") not in FORMS:
        raise InputError(f"{name} has an unreadable '{CPU_FORM_KEY}' metadata entry ({raw!r}): write it again with "
                         "'vitdeploy optimize' from the exported file")
    return CpuForm(raw["attention"], tuple(raw.get("nodes", ())), raw.get("kernel_path"), str(raw.get("source", "")))


def check_requested_form(form: CpuForm, name: str, *, fused_attention: bool, folded_attention: bool) -> None:
    """InputError when a runner is asked for an attention form a CPU-form file cannot give (it holds one form only)."""
    source = f"'{form.source}'" if form.source else "the exported file"
    if folded_attention:
        raise InputError(f"'{name}' holds the {form.attention} attention form written by 'vitdeploy optimize', not the "
                         f"folded one: for the folded form run {source}")
    if fused_attention and form.attention != FUSED_KERNEL:
        raise InputError(f"'{name}' holds the {form.attention} attention form written by 'vitdeploy optimize': for the "
                         f"fused kernel run {source} with --fused-attention, or write it with 'vitdeploy optimize "
                         "--fused-attention'")


def cpu_form_graph(model: onnx.ModelProto, attention: str, source: str = "",
                   base_dir: str | Path = "") -> tuple[onnx.ModelProto, CpuForm]:
    """``model`` (an ``onnxruntime-cpu`` export, weights loaded or not: then read from ``base_dir``, its folder)
    transformed into ``attention`` form, in place.

    InputError when nothing in the graph takes that form (another target, or no block where it pays),
    so no file is written that is the export again under another name.
    """
    if attention not in FORMS:
        raise InputError(f"unknown CPU attention form '{attention}': use one of {', '.join(FORMS)}")
    from vitdeploy.runtime.forms.folded_attention import kept_reasons, unfold_relpos_attention

    if attention == FUSED_KERNEL:
        from vitdeploy.runtime.forms.relpos_kernel import PATHS, fuse_relpos_attention

        model, fusion = fuse_relpos_attention(model, base_dir=base_dir)
        if not fusion.changed:
            raise InputError(f"no attention node of '{source or 'the model'}' can take the fused kernel on this CPU "
                             f"({kept_reasons(fusion.kept)}): write the unfolded form (without --fused-attention)")
        widest = max(fusion.paths.values(), key=PATHS.index)  # one path in practice: one CPU, one request
        return model, CpuForm(FUSED_KERNEL, tuple(fusion.changed), widest, source, dict(fusion.kept))
    model, unfold = unfold_relpos_attention(model, base_dir)
    if not unfold.changed:
        raise InputError(f"no attention node of '{source or 'the model'}' is worth unfolding ({kept_reasons(unfold.kept)}): "
                         "the exported file is already the form to run")
    return model, CpuForm(UNFOLDED, tuple(unfold.changed), None, source, dict(unfold.kept))


__all__ = ["CPU_FORM_KEY", "FORMS", "FUSED_KERNEL", "UNFOLDED", "CpuForm", "check_requested_form", "cpu_form_graph",
           "read_cpu_form"]
