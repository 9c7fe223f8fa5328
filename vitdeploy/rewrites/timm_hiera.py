"""Export-friendly timm Hiera (``Hiera``) and SAM 2 Hiera trunk (``HieraDet``), same weights, one static size.

What differs from timm's module, and why (measured with the dynamo exporter, torch 2.14, opset 18):

* Fused attention off (``fused_attn = False`` on every attention module of the copy). Hiera's
  mask-unit attention calls ``F.scaled_dot_product_attention`` on 5-D tensors (batch, heads, mask
  units, tokens, head dim), which the ONNX exporter refuses ("only 4D query, key, and value are
  supported"); timm's manual path (scale, MatMul, Softmax, MatMul) exports on any rank. HieraDet's
  4-D attention takes the same path, so both graphs hold one attention form.
* Nothing else: Unroll/Reroll, mask-unit windows, HieraDet's window partition with padding and its
  bicubic position-embedding resize read shapes in Python, and the exporter traces them with the
  static (or symbolic-batch) shapes into constants: the graphs pass the hygiene check (no Shape,
  Range, If, ...) with a static and with a dynamic batch. The tests hold that.
* The output is fixed at construction, by timm's own methods: ``logits`` (``forward``),
  ``pre_logits`` (``forward_head(pre_logits=True)``) or ``features`` (``forward_features``: Hiera's
  last-stage tokens after the norm, HieraDet's last-stage NHWC feature map).
"""

from __future__ import annotations

import copy

from torch import nn

from vitdeploy.models.timm_vit import TimmOutputReference


def rewrite_timm_hiera(model: nn.Module, output: str = "logits") -> TimmOutputReference:
    """A copy of ``model`` with manual attention, computing ``output`` (the original is left unchanged)."""
    exportable = copy.deepcopy(model).eval()
    for module in exportable.modules():
        if hasattr(module, "fused_attn"):
            module.fused_attn = False
    return TimmOutputReference(exportable, output).eval()
