"""What the engine builder needs to know about an ONNX file, read without TensorRT and without weights.

Inputs and outputs (names, element types, static or symbolic dimensions), node names and op types
(to name the failing node when TensorRT reports a layer), external-data files (hashed into the
sidecar) and the precision the graph itself encodes: with strongly typed networks TensorRT computes
exactly in the types the graph declares, so the engine's precision is read from the graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vitdeploy.errors import InputError

QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})


@dataclass(frozen=True)
class TensorFacts:
    """One graph input or output: name, NumPy dtype name and dimensions (int, or a symbolic name)."""

    name: str
    dtype: str
    dims: tuple[int | str, ...]

    @property
    def dynamic_axes(self) -> list[int]:
        return [i for i, d in enumerate(self.dims) if not isinstance(d, int) or d <= 0]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": [d if isinstance(d, int) and d > 0 else -1 for d in self.dims]}


@dataclass
class OnnxFacts:
    path: Path
    inputs: list[TensorFacts]
    outputs: list[TensorFacts]
    node_ops: dict[str, str]  # node name -> op type
    external_data: list[Path]
    metadata: dict[str, Any]
    graph_precision: str
    op_counts: dict[str, int] = field(default_factory=dict)
    initializer_types: dict[str, str] = field(default_factory=dict)  # name -> ONNX data type name (UINT16, INT8...)


def _dtype_name(elem_type: int) -> str:
    import onnx

    try:
        return str(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, ValueError):
        return onnx.TensorProto.DataType.Name(elem_type).lower()


def _tensor(value: Any) -> TensorFacts:
    t = value.type.tensor_type
    dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in t.shape.dim)
    return TensorFacts(value.name, _dtype_name(t.elem_type), dims)


def graph_precision(model: Any) -> str:
    """``int8`` when the graph holds Q/DQ nodes, ``fp16``/``bf16`` when it computes in that type, else ``fp32``."""
    import onnx

    from vitdeploy.onnx_graph import cast_to

    graph = model.graph
    ops = {n.op_type for n in graph.node}
    if ops & QDQ_OPS:
        return "int8"
    low = {onnx.TensorProto.FLOAT16: "fp16", onnx.TensorProto.BFLOAT16: "bf16"}
    for init in graph.initializer:
        if init.data_type in low:
            return low[init.data_type]
    for node in graph.node:
        if cast_to(node) in low:
            return low[cast_to(node)]
    for value in list(graph.input) + list(graph.output) + list(graph.value_info):
        if value.type.tensor_type.elem_type in low:
            return low[value.type.tensor_type.elem_type]
    return "fp32"


def read_onnx_facts(path: str | Path, model: Any = None) -> OnnxFacts:
    """Facts about an ONNX file (weights are not loaded; ``model``: its graph, when the caller has read it already);
    InputError for a missing or invalid file."""
    import onnx

    from vitdeploy.fileio import external_data_files, load_onnx_graph
    from vitdeploy.metadata import metadata_of

    path = Path(path)
    model = model if model is not None else load_onnx_graph(path)
    if not model.graph.node:
        raise InputError(f"'{path}' holds no graph nodes: give a model written by 'vitdeploy export'")
    external = external_data_files(model, path.parent)
    initializers = {i.name for i in model.graph.initializer}
    counts: dict[str, int] = {}
    for node in model.graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return OnnxFacts(
        path=path,
        inputs=[_tensor(v) for v in model.graph.input if v.name not in initializers],
        outputs=[_tensor(v) for v in model.graph.output],
        node_ops={n.name: n.op_type for n in model.graph.node if n.name},
        external_data=external,
        metadata=metadata_of(model),
        graph_precision=graph_precision(model),
        op_counts=dict(sorted(counts.items())),
        initializer_types={i.name: onnx.TensorProto.DataType.Name(i.data_type) for i in model.graph.initializer},
    )
