"""``vitdeploy optimize``: write the form a CPU runtime runs best as a file of its own.

* :func:`write_cpu_form` (``--runtime onnxruntime``, the default): the CPU form of an ``onnxruntime-cpu`` (or
  ``tensorrt``) export;
* :func:`write_openvino_form` (``--runtime openvino``): an FP32 export with its GELUs kept apart from their GEMMs
  (:mod:`vitdeploy.runtime.forms.openvino_gelu`), for applications that read the file with their own OpenVINO.

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
from typing import TYPE_CHECKING

from vitdeploy.errors import InputError
from vitdeploy.metadata import encode, read_onnx_metadata
from vitdeploy.runtime.forms.cpu_attention import load_folded_graph
from vitdeploy.runtime.forms.cpu_form import CPU_FORM_KEY, FUSED_KERNEL, UNFOLDED, CpuForm, cpu_form_graph
from vitdeploy.targets import target_of

if TYPE_CHECKING:
    import onnx


def _record(model: onnx.ModelProto, entries: dict) -> None:
    """Add vitdeploy metadata ``entries`` to ``model``'s, in place, keys sorted (byte-stable, as the exporter writes
    them)."""
    props = {p.key: p.value for p in model.metadata_props}
    props.update(encode(entries))
    del model.metadata_props[:]
    for key in sorted(props):
        model.metadata_props.add(key=key, value=props[key])


@dataclass(frozen=True)
class OptimizeResult:
    """What ``vitdeploy optimize`` wrote."""

    files: list[Path]
    form: CpuForm

    def to_dict(self) -> dict:
        return {"files": [str(f) for f in self.files], "runtime": "onnxruntime", **self.form.to_metadata(),
                "kept": dict(self.form.kept)}


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
    from vitdeploy.runtime.forms.openvino_gelu import read_openvino_form

    openvino_form = read_openvino_form(metadata, f"'{source.name}'")
    if openvino_form is not None:
        raise InputError(f"'{source.name}' is the OpenVINO form written by 'vitdeploy optimize --runtime openvino': "
                         f"optimize the exported file ('{openvino_form['source'] or 'its source'}') instead")
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
    _record(model, {CPU_FORM_KEY: form.to_metadata()})
    files = save_onnx_atomic(model, output)
    return OptimizeResult(files, form)


@dataclass(frozen=True)
class OpenVinoFormResult:
    """What ``vitdeploy optimize --runtime openvino`` wrote."""

    files: list[Path]
    gelus_apart: int
    source: str

    def to_dict(self) -> dict:
        return {"files": [str(f) for f in self.files], "runtime": "openvino", "gelus_apart": self.gelus_apart,
                "source": self.source}

    def summary(self) -> str:
        return (f"{self.gelus_apart} GELU(s) kept apart from their GEMM for OpenVINO, written by 'vitdeploy optimize "
                "--runtime openvino'")


def write_openvino_form(source: str | Path, output: str | Path, *, force: bool = False) -> OpenVinoFormResult:
    """Write the FP32 export ``source`` to ``output`` (atomically, weights inside; past protobuf's 2 GiB as ``output`` +
    ``output.data``) with its GELUs kept apart from their GEMMs (:func:`~vitdeploy.runtime.forms.openvino_gelu.gelu_apart_in_onnx`),
    so that OpenVINO reading the file as it stands runs those GEMMs on MLAS where that was measured faster (x86 with
    AVX2 and without AVX-512: :func:`~vitdeploy.runtime.forms.openvino_gelu.keep_gelu_apart`).

    InputError for an existing ``output`` without ``force``, ``output`` naming ``source``, a file in a form already
    (either runtime's), a file that is not FP32 (the form was measured on FP32 GEMMs only), or a graph with no GELU fed
    by a GEMM.
    """
    import onnx

    from vitdeploy.fileio import claim_outputs
    from vitdeploy.precision.model_io import save_onnx_atomic
    from vitdeploy.precisions import Precision
    from vitdeploy.runtime.forms.openvino_gelu import OPENVINO_FORM_KEY, gelu_apart_in_onnx, read_openvino_form

    source, output = Path(source), Path(output)
    if output.resolve() == source.resolve():
        raise InputError(f"-o names the exported file '{source}' itself: write the OpenVINO form to another path")
    claim_outputs([output], force, inputs=[source])
    metadata = read_onnx_metadata(source)
    held = metadata.get(CPU_FORM_KEY) or read_openvino_form(metadata, f"'{source.name}'")
    if held:
        raise InputError(f"'{source.name}' is already a form written by 'vitdeploy optimize': optimize the exported file "
                         f"('{held.get('source') or 'its source'}') instead")
    precision = Precision.of(metadata)
    if precision is not Precision.FP32:
        raise InputError(f"'{source.name}' is not an FP32 graph ({precision.value.upper()}): the OpenVINO form keeps GELUs "
                         "apart from FP32 GEMMs only (where it was measured faster); give it the FP32 export")
    model = onnx.load(str(source))  # with its weights (external data from the file's folder)
    count = gelu_apart_in_onnx(model)
    if not count:
        raise InputError(f"'{source.name}' has no GELU fed by a GEMM: OpenVINO runs the exported file as it is, there is "
                         "no OpenVINO form to write")
    _record(model, {OPENVINO_FORM_KEY: {"gelus_apart": count, "source": source.name}})
    return OpenVinoFormResult(save_onnx_atomic(model, output), count, source.name)


__all__ = ["OpenVinoFormResult", "OptimizeResult", "write_cpu_form", "write_openvino_form"]
