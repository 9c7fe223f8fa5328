"""The ``tensorrt`` target's attention on ONNX Runtime's CPU: its folded MatMul-Softmax-MatMul as ``MultiHeadAttention``.

``--target tensorrt`` writes SAM's attention in standard ONNX over the folded queries/keys
(:mod:`vitdeploy.rewrites.fused_attention`, ``sdpa`` kernel, values zero-padded to the folded width)::

    Transpose(q_aug) @ Transpose(Pad(k) + onehot) -> Softmax -> @ Transpose(Pad(v)) -> Slice[..., :hd] -> Transpose

the bias-free pattern TensorRT fuses. ONNX Runtime's CPU provider has no fusion for it: it runs the
full (B, heads, N, N) score matrix through three kernels, and the P.V product over the padded values
is as wide as the folded Q.K one (192 instead of 64 in ViT-B's global blocks at 1024 px). Measured on
the full-size ViT-B file (AMD EPYC Zen 1, AVX2, no AVX-512, 2 threads, onnxruntime 1.32.0, one run of
``benchmarks/bench_encoder_speed.py``, 3 alternated rounds): 1.002x eager as written, slower than the
plain ``torch.onnx.export`` of the official module (0.827x); 0.713x once converted.

:func:`sdpa_as_multihead_attention` replaces each chain that the graph proves to be exactly that
pattern by ONNX Runtime's contrib ``MultiHeadAttention`` over the same ``q_aug``/``k_aug`` and the
unpadded values: the graph ``--target onnxruntime-cpu`` exports. The CPU handling of that target
(:mod:`vitdeploy.runtime.forms.folded_attention`'s unfolding, :mod:`vitdeploy.runtime.forms.relpos_kernel`'s
fused kernel, ``vitdeploy optimize``) then applies unchanged. Exact: the padded value columns are
zeros and the Slice drops them; the scores are the same product. In memory, at load time, on the CPU
provider only (the file stays TensorRT's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from vitdeploy.runtime.forms.folded_attention import (RewriteReport, constant_value, folded_key_layout, node_attr,
                                                      splice_nodes, zeros_after_last_axis)

MS_DOMAIN = "com.microsoft"


@dataclass
class SdpaReport(RewriteReport):
    """Which folded MatMul-Softmax-MatMul chains now run as ``MultiHeadAttention``, and why others were left."""

    CHANGED: ClassVar[str] = "folded MatMul-Softmax-MatMul attention(s) of the tensorrt export run as ONNX Runtime's " \
                             "MultiHeadAttention"
    KEPT: ClassVar[str] = "left as written"


@dataclass(frozen=True)
class _Chain:
    """One proven chain: the nodes it replaces and the values the replacement reads and writes."""

    nodes: tuple[int, ...]
    q_aug: str
    k_aug: str
    values: str
    output: str
    num_heads: int
    head_dim: int


class _Shapes:
    """Static dims of graph values: the exporter's ``value_info`` first, ONNX shape inference once where it has none."""

    def __init__(self, model: onnx.ModelProto):
        self.model = model
        graph = model.graph
        self.known = {v.name: v for v in [*graph.value_info, *graph.input, *graph.output]}
        self.inferred = False

    def dim(self, name: str, axis: int) -> int | None:
        found = self._dim(name, axis)
        if found is None and not self.inferred:
            self.inferred = True
            try:
                inferred = onnx.shape_inference.infer_shapes(self.model).graph.value_info
            except Exception:  # noqa: BLE001 - no inferred shapes: the chain is left as written
                inferred = []
            self.known.update({v.name: v for v in inferred})
            found = self._dim(name, axis)
        return found

    def _dim(self, name: str, axis: int) -> int | None:
        info = self.known.get(name)
        if info is None or not info.type.tensor_type.HasField("shape"):
            return None
        dims = info.type.tensor_type.shape.dim
        return int(dims[axis].dim_value) if len(dims) == 4 and dims[axis].dim_value > 0 else None


class _Graph:
    """What matching needs to know about a graph: producers, consumers, constants, outputs, static dims."""

    def __init__(self, model: onnx.ModelProto, base_dir: str):
        graph = model.graph
        self.nodes = list(graph.node)
        self.index_of = {id(n): i for i, n in enumerate(self.nodes)}
        self.producers = {o: n for n in self.nodes for o in n.output}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for n in self.nodes:
            for name in n.input:
                self.consumers.setdefault(name, []).append(n)
        self.inits = {t.name: t for t in graph.initializer}
        self.outputs = {o.name for o in graph.output}
        self.shapes = _Shapes(model)
        self.base_dir = base_dir

    def ints(self, name: str) -> list[int] | None:
        value = constant_value(name, self.inits, self.producers, self.base_dir) if name else None
        return None if value is None else [int(v) for v in np.asarray(value).reshape(-1)]

    def producer(self, name: str, op: str, perm: list[int] | None = None) -> onnx.NodeProto | None:
        """The standard-domain ``op`` node writing ``name`` (with that ``perm``, for a Transpose), or None."""
        node = self.producers.get(name)
        if node is None or node.op_type != op or node.domain not in ("", "ai.onnx"):
            return None
        if perm is not None and list(node_attr(node, "perm", [])) != perm:
            return None
        return node

    def only_consumer(self, name: str, op: str) -> onnx.NodeProto | None:
        """The one ``op`` node reading ``name`` when nothing else does (nor the graph's outputs), else None."""
        users = self.consumers.get(name, [])
        if len(users) != 1 or name in self.outputs or users[0].op_type != op:
            return None
        return users[0]

    def match(self, softmax: onnx.NodeProto) -> tuple[_Chain | None, str]:
        """The chain through the Softmax node ``softmax``, or (None, why it is not the folded pattern)."""
        if int(node_attr(softmax, "axis", -1)) not in (-1, 3):
            return None, "the softmax is not over the keys"
        scores = self.producer(softmax.input[0], "MatMul")
        if scores is None or self.only_consumer(scores.output[0], "Softmax") is None:
            return None, "the softmax does not take a Q.K product alone"
        q_t = self.producer(scores.input[0], "Transpose", [0, 2, 1, 3])
        k_t = self.producer(scores.input[1], "Transpose", [0, 2, 3, 1])
        if q_t is None or k_t is None:
            return None, "the Q.K product is not over (B, N, heads, dim) queries and keys"
        layout, _, why = folded_key_layout(k_t.input[0], self.inits, self.producers, self.base_dir)
        if layout is None:
            return None, why
        head_dim, grid_h, grid_w = layout
        pv = self.only_consumer(softmax.output[0], "MatMul")
        if pv is None or pv.input[0] != softmax.output[0]:
            return None, "the softmax does not feed one P.V product"
        v_t = self.producer(pv.input[1], "Transpose", [0, 2, 1, 3])
        v_pad = self.producer(v_t.input[0], "Pad") if v_t is not None else None
        if v_pad is None:
            return None, "the values are not Pad(v) in (B, N, heads, dim)"
        if not zeros_after_last_axis(v_pad, grid_h + grid_w, self.inits, self.producers, self.base_dir):
            return None, "the value padding is not zeros after v, as wide as the one-hot columns"
        crop = self.only_consumer(pv.output[0], "Slice")
        if crop is None:
            return None, "the P.V product is not cropped to the head size"
        starts, ends = self.ints(crop.input[1]), self.ints(crop.input[2])
        axes = self.ints(crop.input[3]) if len(crop.input) > 3 else None
        steps = self.ints(crop.input[4]) if len(crop.input) > 4 else [1]
        if starts != [0] or ends != [head_dim] or axes not in ([3], [-1]) or steps != [1]:
            return None, "the crop does not keep exactly the head size's columns"
        back = self.only_consumer(crop.output[0], "Transpose")
        if back is None or list(node_attr(back, "perm", [])) != [0, 2, 1, 3]:
            return None, "the cropped output is not transposed back to (B, N, heads, dim)"
        inner = (q_t.output[0], k_t.output[0], v_t.output[0], v_pad.output[0])
        if any(len(self.consumers.get(name, [])) != 1 or name in self.outputs for name in inner):
            return None, "an intermediate value of the chain is used elsewhere"
        heads = self.shapes.dim(v_pad.input[0], 2)
        if heads is None or self.shapes.dim(v_pad.input[0], 3) != head_dim:
            return None, "the head count of the values is not known from the graph"
        chain = tuple(sorted(self.index_of[id(n)] for n in (q_t, k_t, scores, softmax, pv, v_t, v_pad, crop, back)))
        return _Chain(chain, q_t.input[0], k_t.input[0], v_pad.input[0], back.output[0], heads, head_dim), ""


def _replacement(chain: _Chain, label: str) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """MultiHeadAttention in ONNX Runtime's 3-D layout, its output reshaped back to (B, N, heads, head_dim)."""
    p = f"{label}/mha/"
    flat, heads4 = p + "flat_shape", p + "heads_shape"
    inits = [numpy_helper.from_array(np.asarray([0, 0, -1], dtype=np.int64), flat),
             numpy_helper.from_array(np.asarray([0, 0, chain.num_heads, chain.head_dim], dtype=np.int64), heads4)]
    nodes = [
        helper.make_node("Reshape", [chain.q_aug, flat], [p + "q"]),
        helper.make_node("Reshape", [chain.k_aug, flat], [p + "k"]),
        helper.make_node("Reshape", [chain.values, flat], [p + "v"]),
        helper.make_node("MultiHeadAttention", [p + "q", p + "k", p + "v"], [p + "out"], name=label, domain=MS_DOMAIN,
                         num_heads=chain.num_heads, scale=1.0),  # the scale is inside q_aug
        helper.make_node("Reshape", [p + "out", heads4], [chain.output]),
    ]
    return nodes, inits


def sdpa_as_multihead_attention(model: onnx.ModelProto, base_dir: str | Path = "") -> tuple[onnx.ModelProto, SdpaReport]:
    """Replace every proven folded MatMul-Softmax-MatMul chain (module docstring) by ``MultiHeadAttention``, in place.

    ``model`` may be loaded without its external data, then read from ``base_dir`` (its folder) for the
    constants the check needs. The graph stays topologically sorted. A graph without such chains (any
    other export) comes back unchanged with an empty report.
    """
    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    report = SdpaReport()
    softmaxes = [i for i, n in enumerate(graph.node) if n.op_type == "Softmax" and n.domain in ("", "ai.onnx")]
    if not softmaxes:
        return model, report
    if opset < 13:
        report.kept.update({graph.node[i].name or f"node{i}": f"opset {opset} Softmax flattens its input" for i in softmaxes})
        return model, report
    view = _Graph(model, str(base_dir))
    nodes = view.nodes
    chains: dict[int, tuple[_Chain, str]] = {}  # index of the chain's last node -> (chain, label)
    for i in softmaxes:
        label = nodes[i].name or f"node{i}"
        chain, why = view.match(nodes[i])
        if chain is None:
            report.kept[label] = why
            continue
        chains[chain.nodes[-1]] = (chain, label)
    if not chains:
        return model, report
    dropped = {i for chain, _ in chains.values() for i in chain.nodes}
    splice_nodes(graph, {index: _replacement(chain, label) for index, (chain, label) in chains.items()}, dropped)
    report.changed += [chains[index][1] for index in sorted(chains)]
    if not any(o.domain == MS_DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    return model, report


__all__ = ["SdpaReport", "sdpa_as_multihead_attention"]
