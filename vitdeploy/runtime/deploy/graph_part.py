"""The part of a file the first-use probe runs: the whole graph where it is small, else the blocks its family names
cut out at the file's real shapes (a surgeon's extract, as Polygraphy's ``surgeon extract``), with seeded feeds.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vitdeploy.errors import InputError
from vitdeploy.runtime.deploy.identity import file_bytes

#: A file at most this large is probed whole (a decoder, a tiny model); a larger one on the part its family names.
WHOLE_GRAPH_BYTES = 48 << 20
#: The name scopes the PyTorch exporter writes per node (``['', 'blocks.3', 'blocks.3.attn', ...]``).
_SCOPES_KEY = "pkg.torch.onnx.name_scopes"


@dataclass
class ProbePart:
    """What a probe runs: ``path`` (the file itself, or a slice of it in a temporary folder), seeded ``feeds`` at the
    file's real shapes, and ``what`` in words (``blocks.0, blocks.2 of 12`` or ``the whole graph``)."""

    path: Path
    feeds: dict[str, np.ndarray]
    what: str


def _scopes(node: Any) -> list[str]:
    for prop in node.metadata_props:
        if prop.key == _SCOPES_KEY:
            try:
                value = ast.literal_eval(prop.value)
            except (ValueError, SyntaxError):
                return []
            return [s for s in value if isinstance(s, str)]
    return []


def probe_part(model: str | Path, metadata: dict[str, Any], workdir: str | Path,
               whole_below: int = WHOLE_GRAPH_BYTES) -> ProbePart:
    """The part of ``model`` a probe runs (module docstring): the whole file when it is at most ``whole_below`` bytes
    or its family names no blocks, else the blocks its family names (:meth:`ModelFamily.probe_scopes`) cut out
    with every tensor that feeds them as an input, written with the file's metadata into ``workdir``."""
    import onnx

    from vitdeploy.engine.onnx_facts import read_onnx_facts
    from vitdeploy.families import FAMILIES

    model = Path(model)
    family = FAMILIES.get(metadata.get("family")) if isinstance(metadata.get("family"), str) else None
    size = file_bytes(model)
    scopes = family.probe_scopes(metadata) if family is not None else ()
    proto = onnx.load(str(model), load_external_data=size > whole_below and bool(scopes))
    if size > whole_below and scopes:
        part = _slice(proto, scopes)
        if part is not None:
            sliced, inputs, blocks, total = part
            path = Path(workdir) / "part.onnx"
            onnx.save(sliced, str(path))
            feeds = {}
            rng = np.random.default_rng(0)
            for value in inputs:
                dims = [d.dim_value for d in value.type.tensor_type.shape.dim]
                dtype = onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
                feeds[value.name] = rng.standard_normal(dims).astype(dtype)
            named = ", ".join(".".join(b.rsplit(".", 2)[-2:]) for b in blocks)  # 'blocks.0, blocks.2'
            return ProbePart(path, feeds, f"{named} of {total} blocks, at the file's shapes")
    if family is None:
        raise InputError(f"'{model.name}' carries no vitdeploy model family: export it with 'vitdeploy export'")
    inputs = read_onnx_facts(model, proto).inputs
    shapes = {t.name: list(t.dims) for t in inputs}
    feeds = family.probe_feeds(metadata, list(shapes), shapes)
    return ProbePart(model, feeds, "the whole graph")


def _slice(proto: Any, scopes: tuple[str, ...]) -> tuple[Any, list[Any], tuple[str, ...], int] | None:
    """(the graph of the blocks named by ``scopes``, its inputs, the blocks, how many blocks the file has), or None
    where the file's nodes carry no such scopes or a block's boundary is not static (the caller then probes the whole
    graph). A scope ending in ``*`` (``trunk.blocks.*``) names one block of each kind the file has: blocks whose
    inputs have the same shapes and whose nodes are the same operators are one kind (a Hiera trunk's stages, their
    pooling transitions, windowed and global blocks)."""
    import onnx
    from onnx.utils import Extractor

    graph = proto.graph
    initializers = {t.name for t in graph.initializer}
    constants = {out for node in graph.node if node.op_type == "Constant" for out in node.output}
    consumers: dict[str, list[int]] = {}
    for index, node in enumerate(graph.node):
        for name in node.input:
            consumers.setdefault(name, []).append(index)
    scopes_of = _with_quantizer_scopes(graph, [_scopes(node) for node in graph.node], consumers)
    def blocks_of(scope: str) -> set[str]:  # 'blocks.3' -> every 'blocks.N' the file has
        stack = scope.rstrip("*").rsplit(".", 1)[0] + "."
        return {s for found in scopes_of for s in found if s.startswith(stack) and s[len(stack):].isdigit()}

    numbered = sorted(blocks_of(scopes[0]), key=lambda s: int(s.rsplit(".", 1)[1]))
    blocks_in_file = len(set().union(*map(blocks_of, scopes)))  # over every stack named (a detector has two)
    graph_outputs = {o.name for o in graph.output}

    def boundary(scope: str) -> tuple[set[int], list[str], list[str]]:
        members = {i for i, found in enumerate(scopes_of) if scope in found}
        made = {out for i in members for out in graph.node[i].output}
        ins, outs = [], []
        for i in sorted(members):
            for name in graph.node[i].input:
                if name and name not in made and name not in initializers and name not in constants and name not in ins:
                    ins.append(name)
            for name in graph.node[i].output:
                if name in graph_outputs or any(c not in members for c in consumers.get(name, [])):
                    outs.append(name)
        return members, ins, outs

    if scopes[0].endswith("*"):
        shapes = {v.name: tuple(d.dim_value or d.dim_param for d in v.type.tensor_type.shape.dim)
                  for v in [*graph.value_info, *graph.input]}
        kinds: dict[tuple, str] = {}
        for scope in numbered:
            members, ins, _ = boundary(scope)
            kind = (tuple(shapes.get(n) for n in ins), tuple(sorted(graph.node[i].op_type for i in members)))
            kinds.setdefault(kind, scope)
        scopes = tuple(kinds.values())
    inputs: list[str] = []
    outputs: list[str] = []
    made_inside: set[str] = set()
    for scope in scopes:
        members, ins, outs = boundary(scope)
        if not members:
            return None
        inputs += [n for n in ins if n not in inputs]
        outputs += [n for n in outs if n not in outputs]
        made_inside |= {out for i in members for out in graph.node[i].output}
    inputs = [n for n in inputs if n not in made_inside]  # consecutive blocks: one feeds the next inside the part
    try:
        sliced = Extractor(proto).extract_model(inputs, outputs)
    except Exception:  # noqa: BLE001 - onnx's own errors vary by version; the whole graph is the safe side
        return None
    values = [v for v in sliced.graph.input if v.name not in {t.name for t in sliced.graph.initializer}]
    if not scopes or any(not d.HasField("dim_value") for v in values for d in v.type.tensor_type.shape.dim):
        return None
    onnx.helper.set_model_props(sliced, {p.key: p.value for p in proto.metadata_props})
    return sliced, values, scopes, blocks_in_file


#: Nodes 'calibrate -p int8' inserts (without the exporter's name scopes) in front of the node they quantize.
_QUANTIZERS = ("QuantizeLinear", "DequantizeLinear")


def _with_quantizer_scopes(graph: Any, scopes_of: list[list[str]], consumers: dict[str, list[int]]) -> list[list[str]]:
    """``scopes_of`` with each unscoped Q/DQ node given the scopes of the node it feeds (a DQ before a block's MatMul
    belongs to that block, and the Q before it too), so an INT8 file's blocks are cut whole as an FP32 file's are:
    without this, the DQ outputs inside a block became the part's inputs, and the probe ran SAM ViT-B's INT8 file
    whole (43.6 s on an AMD EPYC Zen 4). ONNX lists nodes in topological order, so one pass from the end gives each
    node its consumers' scopes first (a Q takes its DQ's, which took the MatMul's)."""
    for index in reversed(range(len(graph.node))):
        node = graph.node[index]
        if not scopes_of[index] and node.op_type in _QUANTIZERS:
            scopes_of[index] = next((scopes_of[c] for name in node.output for c in consumers.get(name, [])
                                     if scopes_of[c]), [])
    return scopes_of


__all__ = ["WHOLE_GRAPH_BYTES", "ProbePart", "probe_part"]
