"""Which attention form an ONNX Runtime CPU session runs: the graph :class:`OnnxRuntimeRunner` hands ONNX Runtime.

An exported file with SAM's folded rel-pos attention (``--target onnxruntime-cpu`` or ``tensorrt``) is
not run as written on the CPU unless asked (``folded_attention=True``); in memory, at load time:

1. a ``tensorrt`` export's MatMul-Softmax-MatMul chains become ``MultiHeadAttention``
   (:mod:`vitdeploy.runtime.forms.folded_sdpa`: the graph the ``onnxruntime-cpu`` target exports);
2. then either vitdeploy's fused kernel takes the folded nodes (:mod:`vitdeploy.runtime.forms.relpos_kernel`),
   or the global blocks get their rel-pos term as an attention bias
   (:mod:`vitdeploy.runtime.forms.folded_attention`, "unfolded").

Which of the two (``fused_attention``): ``True`` asks for the kernel (an error where it cannot take any
node); ``False`` never uses it; ``None``, the default, uses it where its library is built and it takes
one of its vector paths on this CPU, and unfolds otherwise. The default rests on measurements in one
alternated run per CPU (``benchmarks/bench_encoder_speed.py``, SAM ViT-B, 2 threads): the kernel was
faster than the unfolded form on an AMD EPYC Zen 4 (AVX-512 path, 0.440x against 0.491x eager) and
as fast on a Zen 1 (AVX2 path, 0.699x against 0.703x), with about half the memory on both and a first
run faster on Zen 4 (6.0 against 9.0 s) and as fast on Zen 1; on its portable path ONNX Runtime's attention is faster, so that path is never chosen.

Files written by ``vitdeploy optimize`` already hold their form and are run as written (the runner
reads :mod:`vitdeploy.runtime.forms.cpu_form`); every other graph is run as written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from vitdeploy.errors import InputError

if TYPE_CHECKING:
    import onnx

    from vitdeploy.targets import ExportTarget

    from vitdeploy.runtime.forms.folded_attention import UnfoldReport
    from vitdeploy.runtime.forms.folded_sdpa import SdpaReport
    from vitdeploy.runtime.forms.relpos_kernel import FusionReport

@dataclass
class CpuAttention:
    """What the session runs: ``source`` (a serialized rewritten graph; None: the file as written) and the reports."""

    source: bytes | None = None
    sdpa: SdpaReport | None = None
    fusion: FusionReport | None = None
    unfold: UnfoldReport | None = None
    warnings: list[str] = field(default_factory=list)
    #: The kernel's custom-op library when nodes were swapped onto it: register it with the session.
    library: Path | None = None


def load_folded_graph(path: Path) -> tuple[onnx.ModelProto, SdpaReport]:
    """The graph at ``path`` without its external weights, a ``tensorrt`` export's attention chains already as
    ``MultiHeadAttention`` (:func:`vitdeploy.runtime.forms.folded_sdpa.sdpa_as_multihead_attention`)."""
    from vitdeploy.fileio import load_onnx_graph
    from vitdeploy.runtime.forms.folded_sdpa import sdpa_as_multihead_attention

    return sdpa_as_multihead_attention(load_onnx_graph(path), path.parent)


def _kernel_library(required: bool, warnings: list[str]) -> Path | None:
    """The fused kernel's library: ``required`` (InputError naming how to build it when absent), else the built one
    (None when absent; a warning in ``warnings`` when present but unusable)."""
    from vitdeploy.runtime.forms.relpos_kernel import require_library, usable_library

    if required:
        return require_library()
    library, why = usable_library()
    if why:
        warnings.append(f"vitdeploy's fused attention kernel is not used: {why}")
    return library


def cpu_attention(path: Path, target: ExportTarget | None, *, fused_attention: bool | None, folded_attention: bool,
                  library: Path | None = None) -> CpuAttention:
    """The attention form an ONNX Runtime CPU session runs for the file at ``path`` (module docstring).

    ``target`` is the file's export target (:func:`vitdeploy.targets.target_of`): only folded attention has CPU forms.
    ``library`` overrides where the fused kernel's library is looked for (:func:`_kernel_library`); it is
    looked for only in a graph with folded attention. When nodes were swapped onto the kernel, the result's
    ``library`` is the one to register with the session.

    Raises:
        InputError: fused attention asked for a graph with no folded attention at all (another target).
    """
    if folded_attention or ((target is None or not target.folded_attention) and fused_attention is not True):
        return CpuAttention()
    model, sdpa = load_folded_graph(path)
    result = CpuAttention(sdpa=sdpa)
    changed: list[str] = []
    if fused_attention is False:
        library = None
    elif library is None:
        library = _kernel_library(fused_attention is True, result.warnings)
    if library is not None:
        from vitdeploy.runtime.forms.folded_attention import kept_reasons
        from vitdeploy.runtime.forms.relpos_kernel import fuse_relpos_attention

        model, fusion = fuse_relpos_attention(model, library, base_dir=path.parent)  # unchanged where nothing swapped
        if fused_attention is True:
            if not fusion.changed and not fusion.portable_only:
                raise InputError(f"'{path.name}' has no attention the fused kernel can take "
                                 f"({kept_reasons(fusion.kept)}): export with --target onnxruntime-cpu (or tensorrt), "
                                 "or run without fused attention")
            if not fusion.changed:
                result.warnings.append("fused attention: no attention node can take one of the kernel's vector paths "
                                       f"on this CPU ({kept_reasons(fusion.kept)}): running ONNX Runtime's attention")
        if fusion.changed or fused_attention:
            result.fusion, changed = fusion, fusion.changed
        result.library = library if fusion.changed else None
    if result.fusion is None:
        from vitdeploy.runtime.forms.folded_attention import unfold_relpos_attention

        model, result.unfold = unfold_relpos_attention(model, path.parent)
        changed = result.unfold.changed
    if changed or sdpa.changed:
        result.source = model.SerializeToString()  # external weights stay in their file
    return result


__all__ = ["CpuAttention", "cpu_attention", "load_folded_graph"]
