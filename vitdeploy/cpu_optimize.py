"""``vitdeploy optimize``: write the CPU form of an ``onnxruntime-cpu`` (or ``tensorrt``) export as a file of its own.

What :class:`vitdeploy.runtime.backends.onnxruntime_runner.OnnxRuntimeRunner` does in memory at every load (the global
blocks' attention unfolded, or vitdeploy's fused kernel swapped in: :mod:`vitdeploy.runtime.forms.cpu_form`),
done once and saved, so that programs which open the file themselves run the same graph: the C++
app (``sam_cli``, ``vitdeploy::OnnxRuntimeBackend``), an application's own ONNX Runtime session. The
exported file stays the portable artifact (TensorRT, GPU providers, OpenVINO, the folded form); the
CPU form runs on ONNX Runtime's CPU provider only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vitdeploy.errors import InputError
from vitdeploy.metadata import encode, read_onnx_metadata
from vitdeploy.runtime.forms.cpu_attention import load_folded_graph
from vitdeploy.runtime.forms.cpu_form import CPU_FORM_KEY, FUSED_KERNEL, UNFOLDED, CpuForm, cpu_form_graph
from vitdeploy.targets import target_of


@dataclass(frozen=True)
class OptimizeResult:
    """What ``vitdeploy optimize`` wrote."""

    files: list[Path]
    form: CpuForm

    def to_dict(self) -> dict:
        return {"files": [str(f) for f in self.files], **self.form.to_metadata(), "kept": dict(self.form.kept)}


def write_cpu_form(source: str | Path, output: str | Path, *, fused_attention: bool = False,
                   force: bool = False) -> OptimizeResult:
    """Write the CPU form of the ``onnxruntime-cpu`` or ``tensorrt`` export ``source`` to ``output`` (atomically, weights inside;
    a model past protobuf's 2 GiB as ``output`` + ``output.data``).

    InputError for another kind of file (other targets, a file already in a CPU form), an existing
    ``output`` without ``force``, ``output`` naming ``source``, or a graph with nothing to change.
    """
    import onnx

    from vitdeploy.fileio import claim_outputs, external_data_files
    from vitdeploy.precision.model_io import save_onnx_atomic

    source, output = Path(source), Path(output)
    if output.resolve() == source.resolve():
        raise InputError(f"-o names the exported file '{source}' itself: write the CPU form to another path")
    claim_outputs([output], force, inputs=[source])
    metadata = read_onnx_metadata(source)
    if CPU_FORM_KEY in metadata:
        raise InputError(f"'{source.name}' is already a CPU form written by 'vitdeploy optimize': optimize the exported "
                         f"file ('{metadata[CPU_FORM_KEY].get('source', 'its source')}') instead")
    target = target_of(metadata)
    if target is None or not target.folded_attention:
        raise InputError(f"'{source.name}' is not a --target onnxruntime-cpu or tensorrt export (target: "
                         f"{metadata.get('target', 'not recorded')}): only their folded attention has a CPU form; "
                         "export with --target onnxruntime-cpu")
    model, _ = load_folded_graph(source)  # a tensorrt export's attention chains as MultiHeadAttention first
    attention = FUSED_KERNEL if fused_attention else UNFOLDED
    model, form = cpu_form_graph(model, attention, source=source.name, base_dir=source.parent)  # before the weights are read
    if external_data_files(model, source.parent):
        onnx.load_external_data_for_model(model, str(source.parent))  # written with the weights inside (or beside)
    props = {p.key: p.value for p in model.metadata_props}
    props.update(encode({CPU_FORM_KEY: form.to_metadata()}))
    del model.metadata_props[:]
    for key in sorted(props):  # byte-stable, as the exporter writes them
        model.metadata_props.add(key=key, value=props[key])
    files = save_onnx_atomic(model, output)
    return OptimizeResult(files, form)


__all__ = ["OptimizeResult", "write_cpu_form"]
