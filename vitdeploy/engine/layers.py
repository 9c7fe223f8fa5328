"""What the built engine computes in, layer by layer, read from the builder's own layer list.

With ``IBuilderConfig.profiling_verbosity = DETAILED`` the builder logs, at VERBOSE severity, one
message that starts with ``Layers:`` and holds one line per engine layer (the engine inspector's
one-line format)::

    Name: node_of_y_myl0_0, LayerType: gemm, Inputs: [ { Name: x, ..., Datatype: Float, ... }],
    Constants: [ { ..., Datatype: Float, ... }], Outputs: [ { ..., Datatype: Float, ... }],
    TacticName: ..., StreamId: 0, Metadata: [ONNX Layer: node_of_y][ONNX Layer: node_of_z]

The engine inspector (``ICudaEngine.create_engine_inspector``) gives the same lines, but only for a
deserialized engine, which TensorRT-RTX makes only on a GPU; the build log has them on any machine.
Each layer's precision is named from the data types it reads (inputs and constants), most specific
first: a layer that reads INT8 (or FP8/INT4/FP4) data is that, else FP16, else BF16, else FP32; a layer
that reads only integers or booleans (shapes, indices) is ``other``. That is a reading of TensorRT's
own words, not an assumption about what a precision "should" become.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

#: TensorRT's data type names in the layer list -> vitdeploy's precision names (in order of precedence).
DATATYPE_PRECISION = (
    ("Int4", "int4"), ("FP4", "fp4"), ("FP8", "fp8"), ("Int8", "int8"),
    ("Half", "fp16"), ("BFloat16", "bf16"), ("Float", "fp32"),
)
LAYER_LIST_PREFIX = "Layers:"

_FIELD = re.compile(r"(Inputs|Constants|Outputs): \[(.*?)\](?=, (?:Constants|Outputs|TacticName|StreamId|Metadata|ParameterType)|$)")
_DATATYPE = re.compile(r"Datatype: ([A-Za-z0-9]+)")


@dataclass
class EngineLayer:
    """One engine layer: its name, TensorRT's layer type, the data types it reads and writes, its ONNX nodes."""

    name: str
    type: str
    inputs: list[str] = field(default_factory=list)
    constants: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    onnx_nodes: list[str] = field(default_factory=list)

    @property
    def precision(self) -> str:
        read = set(self.inputs) | set(self.constants)
        for datatype, name in DATATYPE_PRECISION:
            if datatype in read:
                return name
        return "other"


def parse_layer_list(message: str) -> list[EngineLayer]:
    """The layers of a ``Layers:`` build-log message (lines that are not layers are skipped)."""
    layers = []
    for line in message.splitlines():
        line = line.strip()
        head = re.match(r"Name: (.*?), LayerType: ([^,]+)", line)
        if not head:
            continue
        layer = EngineLayer(name=head.group(1), type=head.group(2).strip())
        for kind, body in _FIELD.findall(line):
            getattr(layer, kind.lower()).extend(_DATATYPE.findall(body))
        layer.onnx_nodes = re.findall(r"\[ONNX Layer: ([^\]]+)\]", line)
        layers.append(layer)
    return layers


def summarize_layers(layers: list[EngineLayer]) -> dict[str, Any]:
    """The sidecar's ``layers`` section: counts per precision and per layer type, and every layer in brief."""
    return {
        "count": len(layers),
        "by_precision": dict(sorted(Counter(layer.precision for layer in layers).items())),
        "by_type_and_precision": dict(sorted(Counter(f"{layer.type}:{layer.precision}" for layer in layers).items())),
        "list": [{**asdict(layer), "precision": layer.precision} for layer in layers],
    }
