"""In-memory ONNX models past protobuf's 2 GiB: copies, sessions, shape inference, checks and atomic saves.

SAM ViT-H in FP32 holds ~2.5 GB of weights. One protobuf message cannot be serialized past 2 GiB, so
nothing in the precision passes may call ``SerializeToString`` on a whole model:

* copies use ``CopyFrom`` (no serialization);
* ONNX Runtime sessions get the graph without its large weights (each marked external) and the
  weights as ``SessionOptions.add_external_initializers`` (arrays over one copy of the tensors'
  bytes: protobuf hands ``raw_data`` out as a new ``bytes`` object; ONNX Runtime uses the arrays in place);
* shape inference and ``onnx.checker`` see a structure-only copy (dims and small constants) when the
  model is over :data:`SINGLE_MESSAGE_MAX_BYTES`; under it they see the model itself, as before;
* files over that size are written as ``name.onnx`` + ``name.onnx.data`` (one external-data file),
  staged in the output's folder and renamed into place data first, the ONNX file last (the commit
  point, as the exporter does).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto

#: Largest model handled as one protobuf message (serialized, checked, saved as one file).
SINGLE_MESSAGE_MAX_BYTES = 2**31 - 2**24
#: Initializers at least this large travel beside the graph, not inside it, when a session is made.
EXTERNAL_MIN_BYTES = 1 << 16
_IN_MEMORY = "(vitdeploy: in memory)"


def copy_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """A deep copy without serializing (works past 2 GiB)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def inline_weight_bytes(model: onnx.ModelProto) -> int:
    """Bytes of the initializers held inside ``model`` (from shapes and types; external ones do not count).

    ``ModelProto.ByteSize()`` cannot say it: past 2 GiB it raises EncodeError like serialization does.
    """
    total = 0
    for tensor in model.graph.initializer:
        if tensor.data_location == TensorProto.EXTERNAL:
            continue
        count = 1
        for dim in tensor.dims:
            count *= dim
        total += count * onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    return total


def is_large(model: onnx.ModelProto) -> bool:
    """True when ``model`` cannot be one protobuf message (or is close to it): its inline weights decide."""
    return inline_weight_bytes(model) > SINGLE_MESSAGE_MAX_BYTES


def _large_inline(tensor: TensorProto) -> bool:
    """Held in ``raw_data``, inside the model, and at least :data:`EXTERNAL_MIN_BYTES` (sized from its dims: reading
    ``raw_data`` would copy it)."""
    if tensor.data_location == TensorProto.EXTERNAL or not tensor.HasField("raw_data"):
        return False
    count = 1
    for dim in tensor.dims:
        count *= dim
    return count * onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize >= EXTERNAL_MIN_BYTES


def _copy_fields(source, target, skip: str) -> None:
    """Copy every set field of the message ``source`` into ``target`` but ``skip``."""
    for field, value in source.ListFields():
        if field.name == skip:
            continue
        if field.is_repeated:
            getattr(target, field.name).extend(value)
        elif field.type == field.TYPE_MESSAGE:
            getattr(target, field.name).CopyFrom(value)
        else:
            setattr(target, field.name, value)


def structure_only(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy with every large initializer reduced to its name, type and dims (marked external), built without
    copying those bytes: shape inference, checks and session graphs need the structure and small constants only."""
    copy = onnx.ModelProto()
    _copy_fields(model, copy, skip="graph")
    _copy_fields(model.graph, copy.graph, skip="initializer")
    for tensor in model.graph.initializer:
        if _large_inline(tensor):
            stub = copy.graph.initializer.add(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims,
                                              data_location=TensorProto.EXTERNAL)
            stub.external_data.add(key="location", value=_IN_MEMORY)
        else:
            copy.graph.initializer.add().CopyFrom(tensor)
    return copy


def value_types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    """Every typed value of ``model`` (inputs, intermediates, outputs) by name, from shape inference on its structure."""
    inferred = onnx.shape_inference.infer_shapes(structure_only(model), strict_mode=False)
    return {v.name: v.type for v in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]}


def infer_shapes(model: onnx.ModelProto, strict_mode: bool = False) -> onnx.ModelProto:
    """``onnx.shape_inference.infer_shapes`` for models of any size (large ones: on their structure, no weights)."""
    return onnx.shape_inference.infer_shapes(structure_only(model) if is_large(model) else model, strict_mode=strict_mode)


def check_model(model: onnx.ModelProto) -> None:
    """``onnx.checker.check_model(full_check=True)``; a large model is checked on its structure."""
    onnx.checker.check_model(structure_only(model) if is_large(model) else model, full_check=True)


def graph_and_weights(model: onnx.ModelProto) -> tuple[bytes, list[str], list[np.ndarray]]:
    """(serialized graph without large weights, their names, arrays of them; one copy of their bytes)."""
    names, arrays = [], []
    for tensor in model.graph.initializer:
        if _large_inline(tensor):  # the tensors structure_only reduces to stubs
            dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
            names.append(tensor.name)
            arrays.append(np.frombuffer(tensor.raw_data, dtype=dtype).reshape(tuple(tensor.dims)))
    return structure_only(model).SerializeToString(), names, arrays


def inference_session(model: onnx.ModelProto, options, providers=("CPUExecutionProvider",), **kwargs):
    """An ONNX Runtime session for an in-memory model of any size (weights handed over beside the graph).

    The session keeps a reference to the arrays (ONNX Runtime uses external initializers in place for
    its lifetime), so each session holds one copy of the large weights.
    """
    import onnxruntime as ort

    data, names, arrays = graph_and_weights(model)
    values = [_ort_value(ort, a) for a in arrays]
    if names:
        options.add_external_initializers(names, values)
    session = ort.InferenceSession(data, options, providers=list(providers), **kwargs)
    session._vitdeploy_weights = (arrays, values)  # the memory ONNX Runtime reads the weights from
    return session


def plain_session(model: onnx.ModelProto, threads: int | None = None):
    """A CPU session without graph optimization or memory arena (the kernels a single-node session uses; memory
    freed at once), for an in-memory model of any size."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    if threads:
        options.intra_op_num_threads = int(threads)
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.enable_cpu_mem_arena = False
    options.enable_mem_pattern = False
    # Kahn's order with the node list as tie-break: each statistic runs as soon as its tensor exists, so the
    # tensor is freed then (ONNX Runtime's default order may leave every reduction for the end).
    options.execution_order = ort.ExecutionOrder.PRIORITY_BASED
    return inference_session(model, options)


def _ort_value(ort, array: np.ndarray):
    """An OrtValue over ``array`` (no copy); BF16 (``ml_dtypes.bfloat16``, which ONNX Runtime's NumPy bridge does not
    know) is handed over as its 16-bit pattern with its ONNX type."""
    if array.dtype.kind == "V" and array.dtype.itemsize == 2 and array.dtype.name == "bfloat16":
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(array.view(np.uint16), onnx.TensorProto.BFLOAT16)
    return ort.OrtValue.ortvalue_from_numpy(array)


def save_onnx(model: onnx.ModelProto, path: Path) -> list[Path]:
    """Write ``model`` to ``path``, a large one as ``path`` + ``path.data`` (``model`` is not changed); the files."""
    if not is_large(model):
        onnx.save_model(model, str(path))
        return [path]
    data = path.with_name(path.name + ".data")
    onnx.save_model(copy_model(model), str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=data.name, size_threshold=1024)
    return [path, data]


def save_onnx_atomic(model: onnx.ModelProto, path: str | os.PathLike) -> list[Path]:
    """Write ``model`` to ``path`` atomically (:func:`save_onnx` into a staging folder beside it, then renamed:
    the weights file first, the ONNX file, the commit point, last). Returns the files written."""
    from vitdeploy.fileio import apply_default_mode, check_output_path

    final = check_output_path(path)
    with tempfile.TemporaryDirectory(prefix=f".{final.name}.", dir=final.parent) as tmpdir:
        staged = save_onnx(model, Path(tmpdir) / final.name)
        written = [final.parent / f.name for f in staged]
        for source, target in reversed(list(zip(staged, written))):
            apply_default_mode(source)
            os.replace(source, target)
    return written


__all__ = ["EXTERNAL_MIN_BYTES", "SINGLE_MESSAGE_MAX_BYTES", "check_model", "copy_model", "graph_and_weights",
           "inline_weight_bytes", "plain_session", "inference_session", "infer_shapes", "is_large", "save_onnx", "save_onnx_atomic",
           "structure_only", "value_types"]
