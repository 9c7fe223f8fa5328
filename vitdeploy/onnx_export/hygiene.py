"""Graph hygiene: fail an export whose graph holds nodes or dimensions deployment runtimes handle badly.

Shape arithmetic (Shape, Gather on shapes, Range, Mod, ConstantOfShape), control flow (If, Loop),
data-dependent sizes (NonZero) and Einsum are what the official SAM code exports to when traced
naively; each either blocks TensorRT's static optimisation or runs as a slow generic kernel.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import onnx

from vitdeploy.errors import GraphHygieneError

BANNED_OPS = frozenset({"Shape", "Size", "Range", "Mod", "If", "Loop", "NonZero", "Einsum", "ConstantOfShape"})


@dataclass
class HygieneReport:
    """Node counts by type and every problem found; truthy when clean."""

    op_counts: dict[str, int]
    problems: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict:
        return {"op_counts": dict(sorted(self.op_counts.items())), "problems": list(self.problems), "clean": not self.problems}


def _all_nodes(graph: onnx.GraphProto) -> Iterable[onnx.NodeProto]:
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _all_nodes(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _all_nodes(g)


def _dims(value: onnx.ValueInfoProto) -> list[int | str | None]:
    t = value.type.tensor_type
    if not t.HasField("shape"):
        return [None]
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]


def check_graph_hygiene(
    model: onnx.ModelProto,
    allowed_dynamic: dict[str, set[int] | set[str]] | None = None,
    allowed_ops: frozenset[str] = frozenset(),
) -> HygieneReport:
    """Inspect a (shape-inferred) model for banned ops and non-static dimensions.

    Args:
        model: the ONNX model; run ``onnx.shape_inference`` first so intermediate dims are known.
        allowed_dynamic: symbolic dimension names that may stay dynamic (e.g. ``{"batch"}``), given as
            ``{"dim_params": {...}}``; every other dimension must be a positive integer.
        allowed_ops: banned op types this graph is allowed to hold anyway (e.g. a decoder's Shape
            on a dynamic point count); each is still counted.
    """
    allowed_params = set((allowed_dynamic or {}).get("dim_params", set()))
    nodes = list(_all_nodes(model.graph))
    counts = Counter(n.op_type for n in nodes)
    problems = []
    for op in sorted(set(counts) & (BANNED_OPS - allowed_ops)):
        names = [n.name for n in nodes if n.op_type == op][:3]
        problems.append(f"{counts[op]} {op} node(s) (e.g. {', '.join(names)})")
    # Gather whose data is a shape (or derived from one): shape arithmetic in disguise.
    shape_derived = {o for n in nodes if n.op_type in {"Shape", "Size"} for o in n.output}
    for node in nodes:  # graph order is topological
        if node.op_type in {"Shape", "Size"}:
            continue
        if any(i in shape_derived for i in node.input):
            if node.op_type == "Gather" and node.input[0] in shape_derived and "Gather" not in allowed_ops:
                problems.append(f"Gather on a shape tensor ({node.name})")
            shape_derived.update(node.output)
    values = list(model.graph.input) + list(model.graph.output) + list(model.graph.value_info)
    for value in values:
        dims = _dims(value)
        if dims == [None]:
            problems.append(f"'{value.name}' has no inferred shape")
            continue
        bad = [d for d in dims if not (isinstance(d, int) and d > 0) and not _derived_from(d, allowed_params)]
        if bad:
            problems.append(f"'{value.name}' has non-static dims {dims}")
    return HygieneReport(dict(counts), problems)


def _derived_from(dim: int | str | None, allowed: set[str]) -> bool:
    """True for a symbolic dim that is an allowed name or arithmetic on allowed names (``4*batch``)."""
    if not isinstance(dim, str) or not allowed:
        return False
    names = set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", dim))
    return bool(names) and names <= allowed and re.fullmatch(r"[A-Za-z_0-9*+\-/() ]+", dim) is not None


def raise_if_unclean(report: HygieneReport, what: str) -> None:
    if not report:
        shown = report.problems[:8]
        more = f" (+{len(report.problems) - 8} more)" if len(report.problems) > 8 else ""
        raise GraphHygieneError(f"graph hygiene check failed for {what}: " + "; ".join(shown) + more)
