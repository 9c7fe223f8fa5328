"""Input checks (the source graph must be FP32) and TensorRT-readiness checks of converted graphs.

TensorRT's explicit quantization takes symmetric INT8 Q/DQ: zero point 0, a positive finite scale
(per tensor, or per channel along one axis for constant weights). A strongly typed FP16 network is
built from the graph's own types, so the FP16 graph must be valid ONNX (``onnx.checker`` full check)
and as static as the FP32 export (vitdeploy's hygiene check).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from vitdeploy.errors import InputError, PrecisionError
from vitdeploy.metadata import metadata_of
from vitdeploy.precisions import Precision
from vitdeploy.onnx_export.hygiene import check_graph_hygiene
from vitdeploy.precision.model_io import check_model, infer_shapes

_QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "QLinearMatMul", "QLinearConv", "DynamicQuantizeLinear"})


def require_fp32(model: onnx.ModelProto, what: str = "the model") -> None:
    """Raise InputError unless ``model`` is a plain FP32 graph (no FP16 tensors, no quantization nodes)."""
    meta = metadata_of(model)
    precision = Precision.of(meta)
    if precision.reduced:
        raise InputError(f"{what} is already {precision} (metadata 'precision'): convert the FP32 export instead")
    qdq = sorted({n.op_type for n in model.graph.node if n.op_type in _QDQ_OPS})
    if qdq:
        raise InputError(f"{what} is already quantized ({', '.join(qdq)} nodes): convert the FP32 export instead")
    half = {TensorProto.FLOAT16: "float16", TensorProto.BFLOAT16: "bfloat16"}
    types = {t.data_type for t in model.graph.initializer}
    types |= {v.type.tensor_type.elem_type for v in [*model.graph.input, *model.graph.output, *model.graph.value_info]}
    found = sorted(half[t] for t in types & set(half))
    if found:
        raise InputError(f"{what} holds {'/'.join(found)} tensors, it is not an FP32 graph: convert the FP32 export instead")


def graph_problems(model: onnx.ModelProto) -> list[str]:
    """``onnx.checker`` (full check) and hygiene problems of a converted graph (empty when clean)."""
    problems = []
    try:
        check_model(model)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        problems.append(f"onnx.checker: {str(exc).splitlines()[0]}")
        return problems
    inferred = infer_shapes(model, strict_mode=True)
    dyn = {d.dim_param for v in model.graph.input for d in v.type.tensor_type.shape.dim if d.dim_param}
    problems.extend(f"hygiene: {p}" for p in check_graph_hygiene(inferred, {"dim_params": dyn}).problems)
    return problems


def qdq_problems(model: onnx.ModelProto) -> list[str]:
    """Q/DQ nodes TensorRT would reject: non-zero zero points, non-int8 types, bad scales, unpaired Q."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    problems = []
    for node in model.graph.node:
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        scale = inits.get(node.input[1])
        if scale is None:
            problems.append(f"{node.name}: scale '{node.input[1]}' is not a constant")
        elif not (np.all(np.isfinite(scale)) and np.all(scale > 0)):
            problems.append(f"{node.name}: scale has non-positive or non-finite values (min {float(np.min(scale)):.3g})")
        if len(node.input) > 2 and node.input[2]:
            zp = inits.get(node.input[2])
            if zp is None:
                problems.append(f"{node.name}: zero point '{node.input[2]}' is not a constant")
            else:
                if zp.dtype != np.int8:
                    problems.append(f"{node.name}: zero point type {zp.dtype}, TensorRT needs int8")
                if np.any(zp != 0):
                    problems.append(f"{node.name}: zero point is not 0 (asymmetric quantization)")
        if node.op_type == "QuantizeLinear":
            users = consumers.get(node.output[0], [])
            if not users or any(u.op_type != "DequantizeLinear" for u in users):
                problems.append(f"{node.name}: QuantizeLinear output does not feed only DequantizeLinear nodes")
        elif node.input[0] not in inits:
            producer_ok = any(p.op_type == "QuantizeLinear" and node.input[0] in p.output for p in model.graph.node)
            if not producer_ok:
                problems.append(f"{node.name}: DequantizeLinear input is neither a constant nor a QuantizeLinear output")
    return problems


def raise_if_problems(problems: list[str], what: str) -> None:
    if problems:
        more = f" (+{len(problems) - 6} more)" if len(problems) > 6 else ""
        raise PrecisionError(f"{what} is not TensorRT-ready: " + "; ".join(problems[:6]) + more)
