"""ONNX translations of vitdeploy's custom torch ops into ONNX Runtime contrib ops (``com.microsoft``).

``vitdeploy::ort_multihead_attention`` becomes one ``com.microsoft.MultiHeadAttention`` node with
unpacked 3-D query/key/value, no bias and no mask: the inputs ONNX Runtime's CPU provider runs with
its flash-attention kernel (``MlasFlashAttention``; any bias, mask or past state sends it to the
unfused path). Query/key and value may have different head sizes.

Why a hand-written schema: onnxscript builds a node from an ``OpSchema``, and ``onnx`` ships none for
contrib ops. The schema below states the inputs this translation uses, as ONNX Runtime's contrib
operator documentation lists them (query, key, value, bias, key_padding_mask, attention_bias; the
``num_heads`` and ``scale`` attributes); it is used to build the node only and is not registered with
``onnx`` (``onnx.checker`` accepts nodes of unregistered custom domains).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ORT_DOMAIN = "com.microsoft"


def _mha_schema():
    from onnx.defs import OpSchema

    optional = OpSchema.FormalParameterOption.Optional
    param = OpSchema.FormalParameter
    return OpSchema(
        "MultiHeadAttention", ORT_DOMAIN, 1,
        inputs=[param("query", "T"), param("key", "T", param_option=optional), param("value", "T", param_option=optional),
                param("bias", "T", param_option=optional), param("key_padding_mask", "M", param_option=optional),
                param("attention_bias", "T", param_option=optional)],
        outputs=[param("output", "T")],
        type_constraints=[("T", ["tensor(float)", "tensor(float16)"], "float tensors"), ("M", ["tensor(int32)"], "mask")],
        attributes=[OpSchema.Attribute("num_heads", OpSchema.AttrType.INT, "number of heads", required=True),
                    OpSchema.Attribute("scale", OpSchema.AttrType.FLOAT, "score scale", required=False)],
    )


def ort_contrib_translations() -> dict[Callable, Callable[..., Any]]:
    """``custom_translation_table`` entries for ``torch.onnx.export(dynamo=True)``."""
    import onnxscript
    import torch

    from vitdeploy.rewrites import attention_ops  # noqa: F401  (registers the torch op)

    opset = onnxscript.values.Opset(ORT_DOMAIN, 1)
    mha = onnxscript.values.Op(opset, "MultiHeadAttention", _mha_schema())

    def multihead_attention(query, key, value, num_heads: int, scale: float):
        return mha(query, key, value, num_heads=num_heads, scale=scale)

    return {torch.ops.vitdeploy.ort_multihead_attention.default: multihead_attention}


__all__ = ["ORT_DOMAIN", "ort_contrib_translations"]
