"""ONNX export with the dynamo-based exporter (``torch.onnx.export(..., dynamo=True)``).

Exporter choice, measured on the rewritten SAM encoder (torch 2.14): both exporters give graphs
free of Shape/Range/Einsum once the model is rewritten, but the dynamo exporter's optimizer folds the
constant parameter products (relative-position gathers, position-embedding resampling): 28 MatMul and
no Constant nodes vs 36 MatMul and 80 Constant nodes from the TorchScript exporter, which torch also
marks deprecated and scheduled for removal. The dynamo export is deterministic (byte-identical
re-exports across processes) and handles a dynamic batch axis without Shape nodes. Its cost is
time: seconds instead of a fraction of a second.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
import torch
from torch import nn

from vitdeploy.errors import ExportError, first_line
from vitdeploy.fileio import apply_default_mode, check_output_path
from vitdeploy.metadata import encode
from vitdeploy.onnx_export.hygiene import HygieneReport, check_graph_hygiene, raise_if_unclean

#: Models whose weights exceed this are saved with external data (protobuf's hard limit is 2 GiB).
EXTERNAL_DATA_THRESHOLD = 1_800_000_000
MIN_OPSET = 17


@dataclass
class ExportResult:
    path: Path
    external_data: Path | None
    hygiene: HygieneReport
    input_shapes: dict[str, list[int | str]]
    output_shapes: dict[str, list[int | str]]
    size_bytes: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "external_data": str(self.external_data) if self.external_data else None,
            "hygiene": self.hygiene.to_dict(),
            "input_shapes": self.input_shapes,
            "output_shapes": self.output_shapes,
            "size_bytes": self.size_bytes,
        }


def _shapes(values) -> dict[str, list[int | str]]:
    out = {}
    for v in values:
        out[v.name] = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in v.type.tensor_type.shape.dim]
    return out


#: Staging folders are named ``.vitdeploy-export-<pid>-<random>`` next to the output.
STAGING_PREFIX = ".vitdeploy-export-"


def remove_stale_staging(folder: Path) -> list[Path]:
    """Remove staging folders that a killed export left in ``folder`` (their process is gone); returns them.

    A SIGKILL skips every ``finally``, so a killed export's raw ONNX (hundreds of MB for ViT-B) stays in a
    hidden folder; the next export in the same folder removes it. Folders of running exports are kept.
    """
    from vitdeploy.fileio import remove_stale_folders

    return remove_stale_folders(folder, STAGING_PREFIX)


#: Node metadata torch.onnx writes with the absolute paths of the exporting machine's source files.
SOURCE_PATH_METADATA = ("pkg.torch.onnx.stack_trace",)


def drop_source_paths(model: onnx.ModelProto) -> None:
    """Remove the per-node Python stack traces the exporter records (in place).

    They name files by absolute path (the checkout, the virtual environment), so the same export made in
    two places differed in bytes and every file told where it was made. The module names of each node
    (``pkg.torch.onnx.name_scopes``, ``class_hierarchy``) stay: they map a node to its layer without a path.
    """
    for nodes in [model.graph.node, *(f.node for f in model.functions)]:
        for node in nodes:
            kept = [p for p in node.metadata_props if p.key not in SOURCE_PATH_METADATA]
            if len(kept) != len(node.metadata_props):
                del node.metadata_props[:]
                node.metadata_props.extend(kept)


def export_onnx(
    module: nn.Module,
    example_inputs: tuple[torch.Tensor, ...],
    path: str | os.PathLike,
    *,
    input_names: list[str],
    output_names: list[str],
    metadata: dict[str, Any],
    opset: int = 18,
    dynamic_batch: bool = False,
    dynamic_axes: dict[str, dict[int, str]] | None = None,
    allowed_ops: frozenset[str] = frozenset(),
    external_data: bool | None = None,
    custom_translation_table: dict | None = None,
) -> ExportResult:
    """Export ``module`` to ``path``: trace, full ``onnx.checker``, hygiene check, metadata, atomic write.

    Args:
        example_inputs: tensors with the static export shapes (batch 2 is used internally when the
            batch axis is dynamic, so the tracer does not specialise it to 1).
        dynamic_batch: make axis 0 of every input and output the symbolic dimension ``batch``.
        dynamic_axes: further symbolic axes per input name (e.g. a decoder's point count).
        allowed_ops: banned op types the graph may hold (see :func:`check_graph_hygiene`).
        external_data: force (True) or forbid (False) external weights; default: when over ~1.8 GB.
        custom_translation_table: ONNX translations of custom torch ops (e.g.
            :func:`vitdeploy.onnx_export.ort_contrib.ort_contrib_translations`), passed to the exporter.

    The module is not modified. Raises ExportError when tracing or a check fails; nothing is left at
    ``path`` then.
    """
    if opset < MIN_OPSET:
        raise ExportError(f"opset {opset} is too old: use {MIN_OPSET} or newer (LayerNormalization needs 17)")
    final = check_output_path(path)
    dyn_params: set[str] = set()
    dynamic_shapes = None
    if dynamic_batch or dynamic_axes:
        dims: dict[str, torch.export.Dim] = {}
        spec = []
        for name, example in zip(input_names, example_inputs):
            axes = dict((dynamic_axes or {}).get(name, {}))
            if dynamic_batch:
                axes[0] = "batch"
            entry = {}
            for axis, dim_name in axes.items():
                dims.setdefault(dim_name, torch.export.Dim(dim_name, min=1, max=4096))
                entry[axis] = dims[dim_name]
            spec.append(entry or None)
            dyn_params.update(axes.values())
        dynamic_shapes = tuple(spec)
        if dynamic_batch:
            example_inputs = tuple(t.expand(2, *t.shape[1:]).contiguous() if t.shape[0] == 1 else t for t in example_inputs)
    weight_bytes = sum(p.numel() * p.element_size() for p in module.parameters())
    use_external = weight_bytes > EXTERNAL_DATA_THRESHOLD if external_data is None else external_data

    remove_stale_staging(final.parent)
    with tempfile.TemporaryDirectory(prefix=f"{STAGING_PREFIX}{os.getpid()}-", dir=final.parent) as tmpdir:
        raw = Path(tmpdir) / "raw.onnx"
        try:
            with torch.no_grad(), _quiet_exporter():
                program = torch.onnx.export(
                    module,
                    example_inputs,
                    None,
                    dynamo=True,
                    opset_version=opset,
                    input_names=input_names,
                    output_names=output_names,
                    dynamic_shapes=dynamic_shapes,
                    custom_translation_table=custom_translation_table,
                    verbose=False,
                    optimize=True,
                )
                program.save(str(raw), external_data=use_external)
        except ExportError:
            raise
        except Exception as exc:  # the exporter raises many types; all mean the trace failed
            first = first_line(exc)
            raise ExportError(f"ONNX export failed ({type(exc).__name__}: {first}): run with --verbose for the trace") from exc

        model = onnx.load(str(raw), load_external_data=True)
        model.producer_name = "vitdeploy"
        drop_source_paths(model)
        del model.metadata_props[:]
        for key, value in encode(metadata).items():
            model.metadata_props.append(onnx.StringStringEntryProto(key=key, value=value))

        staged = Path(tmpdir) / final.name
        data_name = final.name + ".data"
        if use_external:
            onnx.save_model(model, str(staged), save_as_external_data=True, all_tensors_to_one_file=True,
                            location=data_name, size_threshold=1024)
        else:
            onnx.save_model(model, str(staged))
        try:
            onnx.checker.check_model(str(staged), full_check=True)
        except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
            raise ExportError(f"onnx.checker rejected the exported graph: {str(exc).splitlines()[0]}") from exc
        inferred = onnx.shape_inference.infer_shapes(onnx.load(str(staged), load_external_data=False), strict_mode=True)
        _require_dynamic_axes(inferred.graph.input, dynamic_batch, dynamic_axes or {}, input_names)
        report = check_graph_hygiene(inferred, {"dim_params": dyn_params}, allowed_ops=allowed_ops)
        raise_if_unclean(report, final.name)
        ext_path = None
        if use_external:
            ext_path = final.parent / data_name
            apply_default_mode(Path(tmpdir) / data_name)
            os.replace(Path(tmpdir) / data_name, ext_path)
        apply_default_mode(staged)
        os.replace(staged, final)  # the ONNX file is the commit point
    return ExportResult(
        path=final,
        external_data=ext_path,
        hygiene=report,
        input_shapes=_shapes(inferred.graph.input),
        output_shapes=_shapes(inferred.graph.output),
        size_bytes=final.stat().st_size + (ext_path.stat().st_size if ext_path else 0),
    )


def _require_dynamic_axes(inputs: Any, dynamic_batch: bool, dynamic_axes: dict[str, dict[int, str]],
                          input_names: list[str]) -> None:
    """Refuse a graph whose inputs lost an axis asked to be dynamic: when the traced code fixes such an axis,
    ``torch.onnx.export`` falls back to the example's static size without an error."""
    dims = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in inputs}
    asked = {(name, axis, dim) for name, axes in dynamic_axes.items() for axis, dim in axes.items()}
    if dynamic_batch:
        asked |= {(name, 0, "batch") for name in input_names}
    for name, axis, dim in sorted(asked):
        got = dims.get(name, [])
        if axis < len(got) and got[axis] != dim:
            raise ExportError(f"the exporter fixed axis {axis} ('{dim}') of input '{name}' to {got[axis]}: the traced "
                              "code specializes it (run with --verbose and TORCH_LOGS=+dynamic to see where)")


@contextlib.contextmanager
def _quiet_exporter():
    """Silence the exporter's progress prints (they go to stdout) without hiding warnings, but one.

    The one: torch warns "The axis name: num_points will not be used, since it shares the same shape
    constraints with another axis: num_points" when two inputs share one named dynamic axis (the SAM
    decoder's point coordinates and labels); the axis keeps that very name in the graph (tested in
    tests/onnx_export/test_sam_decoder_export.py), so the warning tells a user nothing.

    And one more: onnxscript warns that ``RoiAlign`` "with a non-zero sampling_ratio" is exported with 0, for
    torchvision's ``sampling_ratio=-1``; both mean the adaptive count of samples per bin (SAM 3's geometry encoder,
    equal to the official on ONNX Runtime in tests/families/test_sam3_detector.py).
    """
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "onnxscript")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.filterwarnings("ignore", message=r"#? ?The axis name: .* will not be used, since it shares the same shape",
                                    category=UserWarning)
            warnings.filterwarnings("ignore", message=r"ONNX export for RoIAlign with a non-zero sampling_ratio",
                                    category=UserWarning)
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


__all__ = ["EXTERNAL_DATA_THRESHOLD", "ExportResult", "export_onnx"]
