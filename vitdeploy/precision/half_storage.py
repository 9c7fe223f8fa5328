"""A mixed FP16 or BF16 graph run on ONNX Runtime's CPU as a GPU would run it: 16-bit storage with FP32 arithmetic
inside each node (:func:`with_half_storage`), what the precision passes hold a 16-bit graph's outputs to."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from vitdeploy.precision.half_formats import half_format
from vitdeploy.precision.model_io import copy_model, value_types
from vitdeploy.precision.segments import BF16_DATA_MOVEMENT_OPS, DATA_MOVEMENT_OPS, TYPED_OPS


def with_half_storage(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of a mixed FP16 or BF16 graph where every node computes in FP32 and every 16-bit tensor is
    stored in its format (FP16 or BF16).

    Why: on a CPU, ONNX Runtime runs FP16 nodes that lack an FP16 kernel in FP32 between casts it
    inserts, and removes those cast pairs between such nodes (and runs isolated FP16 nodes in FP32),
    so in one plain session a chain of them never rounds to FP16 and never overflows; it has no BF16
    kernels for arithmetic at all. Here each node that reads or writes a 16-bit tensor is rewritten to
    read FP32 copies (``Cast``) and write an FP32 result that is cast back to the tensor's format:
    explicit casts, which ONNX Runtime keeps when graph optimization is off. This is 16-bit storage
    with FP32 arithmetic inside each node, as TensorRT's FP16 and BF16 kernels accumulate in FP32.
    Typed ops (``Cast``, ``Constant``, ...) are left as they are, and so are data-movement ops
    (:data:`DATA_MOVEMENT_OPS`; for BF16 the ones ONNX Runtime's CPU has kernels for) on 16-bit
    tensors: they compute nothing, so they run on the stored tensors without a widen/round pair (ViT-B
    at 1024 px, AMD EPYC Zen 1 AVX2, 2 threads, FP16: 28.0 s -> 26.2 s per image; the casts that
    remain take ~5 s of it, the MatMuls ~15 s).
    """
    copy = copy_model(model)
    graph = copy.graph
    types = {name: t.tensor_type.elem_type for name, t in value_types(copy).items()}
    types.update({t.name: t.data_type for t in graph.initializer})
    new_nodes: list[onnx.NodeProto] = []
    widened: dict[str, str] = {}
    for node in graph.node:
        half_in = [n for n in node.input if n and half_format(types.get(n, 0))]
        half_out = [n for n in node.output if n and half_format(types.get(n, 0))]
        if node.op_type in TYPED_OPS or not (half_in or half_out):
            new_nodes.append(node)
            continue
        float_in = [n for n in node.input if n and (types.get(n) == TensorProto.FLOAT or half_format(types.get(n, 0)))]
        moves = BF16_DATA_MOVEMENT_OPS if any(types.get(n) == TensorProto.BFLOAT16 for n in half_in + half_out) \
            else DATA_MOVEMENT_OPS
        if node.op_type in moves and float_in == half_in and len(half_out) == len([o for o in node.output if o]):
            new_nodes.append(node)  # 16-bit in, 16-bit out, nothing computed: nothing to round
            continue
        for name in half_in:
            if name not in widened:
                widened[name] = name + "::fp32"
                new_nodes.append(helper.make_node("Cast", [name], [widened[name]], to=TensorProto.FLOAT,
                                                  name=f"{name}::to_fp32"))
        for j, name in enumerate(node.input):
            if name in widened:
                node.input[j] = widened[name]
        stored = []
        for j, name in enumerate(node.output):
            if name in half_out:
                fmt = half_format(types[name])
                node.output[j] = name + "::computed"
                stored.append(helper.make_node("Cast", [node.output[j]], [name], to=fmt.onnx_type,
                                               name=f"{name}::to_{fmt.name}"))
        new_nodes.append(node)
        new_nodes.extend(stored)
    del graph.node[:]
    graph.node.extend(new_nodes)
    return copy


__all__ = ["with_half_storage"]
