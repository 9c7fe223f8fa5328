"""A PyTorch custom op standing for ONNX Runtime's ``com.microsoft.MultiHeadAttention``.

Why a custom op: the dynamo exporter decomposes ``F.scaled_dot_product_attention`` into
MatMul/Softmax/MatMul at opset 18, which ONNX Runtime's CPU provider runs as three kernels with the
full score matrix in memory (it has no fusion for that pattern). An opaque op survives tracing as one
node, which :mod:`vitdeploy.onnx_export.ort_contrib` translates into ONNX Runtime's contrib
``MultiHeadAttention`` (a flash-attention kernel on CPU when no bias or mask is given).

In PyTorch the op is plain scaled-dot-product attention, so a module using it runs and is tested
like any other. The layout is ONNX Runtime's 3-D one: ``query`` (B, S, heads*Dqk), ``key``
(B, L, heads*Dqk), ``value`` (B, L, heads*Dv) -> (B, S, heads*Dv); ``Dv`` may differ from ``Dqk``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

OP_NAME = "vitdeploy::ort_multihead_attention"


@torch.library.custom_op(OP_NAME, mutates_args=())
def ort_multihead_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, num_heads: int,
                            scale: float) -> torch.Tensor:
    """softmax(scale * Q K^T) V per head, in ONNX Runtime's 3-D MultiHeadAttention layout."""
    b, s, _ = query.shape
    length = key.shape[1]
    q = query.reshape(b, s, num_heads, -1).transpose(1, 2)  # B, heads, S, Dqk
    k = key.reshape(b, length, num_heads, -1).transpose(1, 2)  # B, heads, L, Dqk
    v = value.reshape(b, length, num_heads, -1).transpose(1, 2)  # B, heads, L, Dv
    out = F.scaled_dot_product_attention(q, k, v, scale=scale)  # B, heads, S, Dv
    return out.transpose(1, 2).reshape(b, s, -1)


@ort_multihead_attention.register_fake
def _fake(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, num_heads: int, scale: float) -> torch.Tensor:
    return query.new_empty(query.shape[0], query.shape[1], value.shape[-1])


__all__ = ["OP_NAME", "ort_multihead_attention"]
