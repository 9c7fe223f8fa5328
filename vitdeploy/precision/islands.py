"""Structural FP32 islands: nodes kept in higher precision because of what they compute, not what was measured.

Two kinds:

* normalization and softmax ops (``LayerNormalization``, ``GroupNormalization``, ..., ``Softmax``):
  TensorRT warns that LayerNorm after self-attention overflows in FP16, and FP16 SAM/ViT engines
  that give NaN are fixed by pinning these to FP32;
* normalization written out by hand: ``x - mean(x)`` followed by a division by (or product with) a
  function of the centred values, e.g. vitdeploy's MatMul-based LayerNorm2d
  (:class:`vitdeploy.rewrites.layernorm2d.MatMulLayerNorm2d`) or a ReduceMean/Pow chain. Its
  ``(x - u)^2`` overflows FP16 once ``|x - u| > 256``, and quantizing its MatMul to INT8 would quantize
  the statistics themselves. The mean is recognised as ReduceMean or as a MatMul with a constant
  operand whose entries all equal ``1/K`` (K the contracted size).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import onnx
from onnx import numpy_helper

#: Op types always kept in FP32 in FP16 graphs.
FP32_OP_TYPES = frozenset({
    "LayerNormalization", "GroupNormalization", "InstanceNormalization", "BatchNormalization",
    "MeanVarianceNormalization", "LpNormalization", "RMSNormalization", "SimplifiedLayerNormalization",
    "Softmax", "LogSoftmax",
})

_MAX_ISLAND_DEPTH = 8


def _is_mean_matmul(node: onnx.NodeProto, inits: dict[str, np.ndarray]) -> str | None:
    """Data input of a MatMul that averages over its contracted axis with a constant 1/K operand, else None."""
    if node.op_type != "MatMul" or len(node.input) != 2:
        return None
    a, b = node.input
    for const, data, axis in ((a, b, -1), (b, a, -2)):
        arr = inits.get(const)
        if arr is None or arr.ndim < 2 or arr.size == 0:
            continue
        k = arr.shape[axis]
        if k > 1 and np.allclose(arr, 1.0 / k, rtol=1e-6, atol=0) and data not in inits:
            return data
    return None


def normalization_islands(model: onnx.ModelProto) -> dict[str, str]:
    """``{node name: reason}`` for normalization written out as separate ops (see the module docstring)."""
    graph = model.graph
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            consumers[name].append(node)

    def mean_of(name: str) -> tuple[onnx.NodeProto, str] | None:
        node = producer.get(name)
        if node is None:
            return None
        if node.op_type == "ReduceMean":
            return node, node.input[0]
        data = _is_mean_matmul(node, inits)
        return (node, data) if data is not None else None

    islands: dict[str, str] = {}
    for sub in graph.node:
        if sub.op_type != "Sub" or len(sub.input) != 2:
            continue
        found = mean_of(sub.input[1])
        if found is None or found[1] != sub.input[0]:
            continue
        mean_node = found[0]
        # Nodes reachable from the centred tensor within a few steps: variance, eps, sqrt, ...
        depth = {sub.name: 0}
        by_name = {sub.name: sub}
        frontier = [sub]
        while frontier:
            nxt = []
            for node in frontier:
                for out in node.output:
                    for user in consumers[out]:
                        if user.name not in depth and depth[node.name] < _MAX_ISLAND_DEPTH:
                            depth[user.name] = depth[node.name] + 1
                            by_name[user.name] = user
                            nxt.append(user)
            frontier = nxt
        centred = sub.output[0]
        for div in consumers[centred]:
            if div.op_type not in ("Div", "Mul") or len(div.input) != 2:
                continue
            other = div.input[1] if div.input[0] == centred else div.input[0]
            if other == centred or other not in producer or producer[other].name not in depth:
                continue
            # Ancestors of the divisor inside the reachable set: the statistics chain.
            members = {sub.name, div.name, mean_node.name}
            stack = [producer[other]]
            while stack:
                node = stack.pop()
                if node.name in members or node.name not in depth:
                    continue
                members.add(node.name)
                stack.extend(producer[i] for i in node.input if i in producer)
            for name in members:
                islands.setdefault(name, f"normalization written out ({mean_node.op_type} mean -> {div.op_type})")
    return islands


def structural_fp32_nodes(model: onnx.ModelProto) -> dict[str, str]:
    """Every node a structural rule keeps in FP32, with the rule's reason."""
    kept = {n.name: f"{n.op_type} is computed in FP32" for n in model.graph.node if n.op_type in FP32_OP_TYPES}
    for name, reason in normalization_islands(model).items():
        kept.setdefault(name, reason)
    return kept
