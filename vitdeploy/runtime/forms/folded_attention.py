"""Finding the folded rel-pos attention in a graph, and unfolding it into an attention bias.

``--target onnxruntime-cpu`` exports SAM's attention as ONNX Runtime's contrib ``MultiHeadAttention``
over folded queries/keys (:mod:`vitdeploy.rewrites.fused_attention`)::

    q_aug = [q * scale, rel_h(q), rel_w(q)]        k_aug = Pad(k) + [0, onehot(row), onehot(col)]

so its Q.K product is ``head_dim + grid_h + grid_w`` wide (192 instead of 64 in ViT-B's global blocks).
:func:`find_folded_attention` recognises such a node only after checking, in the graph, that its key
input is ``Pad(k)`` plus exactly the one-hot table (:func:`vitdeploy.relpos_layout.onehot_key_table`):
then ``q_aug . k_aug`` is, exactly, ``scale * q.k + rel_h[q, row(k)] + rel_w[q, col(k)]`` whatever
computed ``q_aug``. Two swaps build on it, both in memory at load time (the file is not changed):

* :mod:`vitdeploy.runtime.forms.relpos_kernel` replaces the node by vitdeploy's fused kernel (a custom-op library).
* :func:`unfold_relpos_attention` replaces it by ``MultiHeadAttention`` over the 64-wide ``q``/``k``
  with the rel-pos term as its ``attention_bias`` input (``rel_h`` and ``rel_w`` broadcast into one
  (B, heads, N, N) tensor). On a CPU, ONNX Runtime's kernel with the bias is faster than the folded
  product: ``benchmarks/bench_global_attention.py``, one ViT-B global block, 0.65x the folded time on
  an AMD EPYC (AVX2), 0.94x on an Intel Xeon (AVX-512); the bias costs (B * heads * N * N) floats while
  the node runs (805 MB per ViT-B global block). What :class:`vitdeploy.runtime.backends.onnxruntime_runner.OnnxRuntimeRunner`
  does by default on the CPU when the fused kernel is not asked for.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import ClassVar
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from vitdeploy.relpos_layout import onehot_key_table


def node_attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def constant_value(name: str, inits: dict[str, onnx.TensorProto], producers: dict[str, onnx.NodeProto],
                   base_dir: str = "") -> np.ndarray | None:
    """The value of an initializer or a ``Constant`` node's output; None for anything computed. An initializer kept
    in an external-data file is read from it, relative to ``base_dir`` (the model's folder)."""
    if name in inits:
        return numpy_helper.to_array(inits[name], base_dir=base_dir)
    node = producers.get(name)
    if node is not None and node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
        value = node_attr(node, "value")
        return numpy_helper.to_array(value) if value is not None else None
    return None


def onehot_layout(table: np.ndarray) -> tuple[int, int, int] | None:
    """(head_dim, grid_h, grid_w) if ``table`` (N, A) is exactly zeros | one-hot(row) | one-hot(column)."""
    if table.ndim != 2:
        return None
    n, width = table.shape
    nonzero = np.flatnonzero(np.abs(table).sum(axis=0))
    if nonzero.size == 0:
        return None
    head_dim = int(nonzero[0])
    for grid_h in range(1, width - head_dim):
        grid_w = width - head_dim - grid_h
        if grid_h * grid_w == n and np.array_equal(table, onehot_key_table(head_dim, grid_h, grid_w)):
            return head_dim, grid_h, grid_w
    return None


def _key_layout(key: str, inits, producers, base_dir: str) -> tuple[tuple[int, int, int] | None, str, str]:
    """Follow Reshape <- Add(Pad(k), Unsqueeze(one-hot table)) back from an MHA key input: (layout, k, why)."""
    reshape = producers.get(key)
    if reshape is None or reshape.op_type != "Reshape":
        return None, "", "key is not a Reshape of the folded keys"
    return folded_key_layout(reshape.input[0], inits, producers, base_dir)


def folded_key_layout(keys: str, inits: dict[str, onnx.TensorProto], producers: dict[str, onnx.NodeProto],
                      base_dir: str = "") -> tuple[tuple[int, int, int] | None, str, str]:
    """Whether the graph value ``keys`` (B, N, heads, hd + gh + gw) is exactly ``Pad(k) + one-hot table``:
    ((head_dim, grid_h, grid_w), the name of ``k``, "") if so, else (None, "", why not)."""
    add = producers.get(keys)
    if add is None or add.op_type != "Add":
        return None, "", "folded keys are not Pad(k) + one-hot table"
    pad = table = None
    for name in add.input:
        node = producers.get(name)
        if node is not None and node.op_type == "Pad":
            pad = node
        else:
            value = constant_value(name, inits, producers, base_dir)
            if value is None and node is not None and node.op_type == "Unsqueeze":
                value = constant_value(node.input[0], inits, producers, base_dir)
            table = value
    if pad is None or table is None:
        return None, "", "folded keys are not Pad(k) + one-hot table"
    layout = onehot_layout(table.reshape(-1, table.shape[-1]) if table.ndim else table)
    if layout is None:
        return None, "", "the key table is not the one-hot rel-pos layout"
    head_dim, grid_h, grid_w = layout
    if not zeros_after_last_axis(pad, grid_h + grid_w, inits, producers, base_dir):
        return None, "", "the key padding is not zeros after k"
    return layout, pad.input[0], ""


def zeros_after_last_axis(pad: onnx.NodeProto, width: int, inits: dict[str, onnx.TensorProto],
                          producers: dict[str, onnx.NodeProto], base_dir: str = "") -> bool:
    """Whether the ``Pad`` node appends exactly ``width`` zeros to the last axis of its input and pads nothing else
    (constant mode, constant pads, no ``axes`` input: its pads then run over every axis, the last one last)."""
    pads = constant_value(pad.input[1], inits, producers, base_dir) if len(pad.input) > 1 and pad.input[1] else None
    fill = constant_value(pad.input[2], inits, producers, base_dir) if len(pad.input) > 2 and pad.input[2] else None
    has_axes = len(pad.input) > 3 and bool(pad.input[3])
    return (node_attr(pad, "mode", b"constant") in (b"constant", "constant") and not has_axes and pads is not None
            and pads.size > 0 and int(pads.reshape(-1)[-1]) == width and np.count_nonzero(pads) == 1
            and (fill is None or not np.any(fill != 0)))


def kept_reasons(kept: dict[str, str]) -> str:
    """Why attention nodes were left as they are (node -> reason), each reason once, for one-line messages."""
    return "; ".join(sorted(set(kept.values()))) or "the graph has no MultiHeadAttention node"


@dataclass(frozen=True)
class FoldedAttention:
    """One verified folded ``MultiHeadAttention`` node: where it is, its token grid, and its unpadded keys."""

    index: int
    label: str
    num_heads: int
    head_dim: int
    grid_h: int
    grid_w: int
    #: The graph value the one-hot columns were padded onto: (B, N, heads, head_dim) keys.
    keys: str

    @property
    def tokens(self) -> int:
        return self.grid_h * self.grid_w


def find_folded_attention(graph: onnx.GraphProto, base_dir: str | Path = "") -> tuple[list[FoldedAttention], dict[str, str]]:
    """The graph's verified folded attention nodes, and why each other ``MultiHeadAttention`` is not one.

    Only the constants the check needs are read: the graph may be loaded without its external data, which
    is then read from ``base_dir`` (the model's folder; the one-hot tables of a ViT-H export live there).
    """
    inits = {t.name: t for t in graph.initializer}
    producers = {o: n for n in graph.node for o in n.output}
    found, kept = [], {}
    for index, node in enumerate(graph.node):
        if node.op_type != "MultiHeadAttention" or node.domain != "com.microsoft":
            continue
        label = node.name or f"node{index}"
        inputs = list(node.input)
        if len(inputs) < 3 or any(inputs[3:]) or float(node_attr(node, "scale", 0.0)) != 1.0:
            kept[label] = "has a bias/mask input or its own scale (not the folded form)"
            continue
        layout, keys, why = _key_layout(inputs[1], inits, producers, str(base_dir))
        if layout is None:
            kept[label] = why
            continue
        found.append(FoldedAttention(index, label, int(node_attr(node, "num_heads")), *layout, keys=keys))
    return found, kept


@dataclass
class RewriteReport:
    """What one rewrite of the folded form did: the nodes it changed, and why it left the others (label -> reason)."""

    changed: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)

    #: How :meth:`summary` names the changed nodes and the kept ones.
    CHANGED: ClassVar[str] = "node(s) rewritten"
    KEPT: ClassVar[str] = "left as they are"

    def summary(self) -> str:
        return f"{len(self.changed)} {self.CHANGED}, {len(self.kept)} {self.KEPT}"


@dataclass
class UnfoldReport(RewriteReport):
    """Which folded attention nodes now take their rel-pos term as an attention bias."""

    CHANGED: ClassVar[str] = "folded attention node(s) on ONNX Runtime's kernel with the rel-pos term as an attention bias"


def _unfold_nodes(found: FoldedAttention, node: onnx.NodeProto) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """The nodes (and their shape constants) computing ``node``'s output through the bias form."""
    heads, hd, gh, gw, n = found.num_heads, found.head_dim, found.grid_h, found.grid_w, found.tokens
    aug = hd + gh + gw
    q_aug, _, values = node.input[:3]
    p = f"{found.label}/unfold/"
    consts = {"aug_shape": [0, n, heads, aug], "flat_shape": [0, n, heads * hd], "bias_shape": [0, heads, n, n],
              "q_start": [0], "q_end": [hd], "h_end": [hd + gh], "w_end": [aug], "ax3": [3], "ax4": [4]}
    inits = [numpy_helper.from_array(np.asarray(v, dtype=np.int64), p + k) for k, v in consts.items()]
    c = {k: p + k for k in consts}
    nodes = [
        helper.make_node("Reshape", [q_aug, c["aug_shape"]], [p + "q_aug4"]),  # B, N, heads, hd+gh+gw
        helper.make_node("Slice", [p + "q_aug4", c["q_start"], c["q_end"], c["ax3"]], [p + "q4"]),
        helper.make_node("Slice", [p + "q_aug4", c["q_end"], c["h_end"], c["ax3"]], [p + "rel_h"]),
        helper.make_node("Slice", [p + "q_aug4", c["h_end"], c["w_end"], c["ax3"]], [p + "rel_w"]),
        helper.make_node("Reshape", [p + "q4", c["flat_shape"]], [p + "q"]),  # already scaled
        helper.make_node("Reshape", [found.keys, c["flat_shape"]], [p + "k"]),
        helper.make_node("Transpose", [p + "rel_h"], [p + "rel_h_t"], perm=[0, 2, 1, 3]),  # B, heads, N, gh
        helper.make_node("Transpose", [p + "rel_w"], [p + "rel_w_t"], perm=[0, 2, 1, 3]),  # B, heads, N, gw
        helper.make_node("Unsqueeze", [p + "rel_h_t", c["ax4"]], [p + "rel_h5"]),  # B, heads, N, gh, 1
        helper.make_node("Unsqueeze", [p + "rel_w_t", c["ax3"]], [p + "rel_w5"]),  # B, heads, N, 1, gw
        helper.make_node("Add", [p + "rel_h5", p + "rel_w5"], [p + "bias5"]),
        helper.make_node("Reshape", [p + "bias5", c["bias_shape"]], [p + "bias"]),  # B, heads, N, N (key = row * gw + col)
        helper.make_node("MultiHeadAttention", [p + "q", p + "k", values, "", "", p + "bias"], list(node.output)[:1],
                         name=found.label, domain="com.microsoft", num_heads=heads, scale=1.0),
    ]
    return nodes, inits


def pays_to_unfold(item: FoldedAttention) -> bool:
    """Whether the bias form is the faster one for this node on a CPU: when the folded Q.K product is at
    least twice the plain one (``grid_h + grid_w >= head_dim``: ViT-B's 64x64 global blocks at 1024 px,
    not its 14x14 windows). Measured on the full-size ViT-B ``onnxruntime-cpu`` file, AMD EPYC (AVX2),
    2 threads: unfolding the global blocks took a run from 17.2-18.8 s to 16.2-16.9 s; unfolding the
    windows as well gained nothing more and held 330 MB more."""
    return item.grid_h + item.grid_w >= item.head_dim


def unfold_relpos_attention(model: onnx.ModelProto, base_dir: str | Path = "") -> tuple[onnx.ModelProto, UnfoldReport]:
    """Give every verified folded attention node where it pays (:func:`pays_to_unfold`) its rel-pos
    term as an attention bias (module docstring), in place. The graph stays topologically sorted.
    ``base_dir``: where its external data lives (:func:`find_folded_attention`)."""
    graph = model.graph
    found, kept = find_folded_attention(graph, base_dir)
    report = UnfoldReport(kept=dict(kept))
    by_index = {}
    for item in found:
        if pays_to_unfold(item):
            by_index[item.index] = item
        else:
            report.kept[item.label] = (f"{item.grid_h}x{item.grid_w} tokens, head size {item.head_dim}: the folded "
                                       "form is as fast there, with less memory")
    if not by_index:
        return model, report
    splice_nodes(graph, {index: _unfold_nodes(item, graph.node[index]) for index, item in by_index.items()})
    report.changed += [by_index[index].label for index in sorted(by_index)]
    return model, report


def splice_nodes(graph: onnx.GraphProto, replacements: dict[int, tuple[list[onnx.NodeProto], list[onnx.TensorProto]]],
                 dropped: Collection[int] = ()) -> None:
    """Rebuild ``graph``'s node list in place: the node at each index of ``replacements`` replaced by its nodes (their
    constants appended to the initializers), the nodes at ``dropped`` removed, the others kept in order. The graph
    stays topologically sorted when each replacement stands where the last node it replaces stood."""
    nodes, inits = [], []
    for index, node in enumerate(graph.node):
        if index in replacements:
            made, consts = replacements[index]
            nodes += made
            inits += consts
        elif index not in dropped:
            nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(inits)


__all__ = ["FoldedAttention", "RewriteReport", "UnfoldReport", "constant_value", "find_folded_attention", "folded_key_layout",
           "kept_reasons", "node_attr", "onehot_layout", "pays_to_unfold", "splice_nodes",
           "unfold_relpos_attention", "zeros_after_last_axis"]
