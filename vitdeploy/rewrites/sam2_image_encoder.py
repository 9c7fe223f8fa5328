"""SAM 2's image encoder as one graph: Hiera trunk + FPN neck + the no-memory embedding, as ``SAM2ImagePredictor``
computes its features in ``set_image`` (same weights, the official modules' own code).

``forward(image) -> (image_embed, high_res_feats_0, high_res_feats_1)``:

* ``SAM2Base.forward_image``: the trunk and the FPN neck, and the mask decoder's ``conv_s0``/``conv_s1`` on the two
  high-resolution levels (SAM 2 computes them once per image, not per prompt).
* ``_prepare_backbone_features``, then ``no_mem_embed`` added to the lowest-resolution level (a frame without
  memory: an image, or the first frame of a video), then each level from (HW, B, C) back to (B, C, H, W).

One thing is rewritten inside: each Hiera attention computes its queries, keys and values as three linear layers
on the rows of its ``qkv`` weight instead of one layer whose output is unbound on axis 2 of a (B, HW, 3, heads,
head_dim) view (:class:`SplitQkvAttention`). Every output is the same dot product; OpenVINO ran the unbind as a
reference split, and the hiera-t encoder at 1024 took 1300 against 1378 ms there (bit-identical outputs; the Xeon, 2
threads, four alternated runs).
The dynamo exporter traces Hiera's window partition (padding read from static shapes) and the neck's
nearest-neighbour top-down path into constants (measured rel. error against eager below 1e-6 on ONNX Runtime, tiny
and hiera-t models).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

#: The graph's outputs, in order.
OUTPUT_NAMES = ("image_embed", "high_res_feats_0", "high_res_feats_1")


class SplitQkvAttention(nn.Module):
    """The official Hiera ``MultiScaleAttention`` (its ``qkv``, ``proj`` and ``q_pool`` modules) with q, k and v each
    from its own rows of ``qkv`` (module docstring)."""

    def __init__(self, official: nn.Module):
        super().__init__()
        self.qkv, self.proj, self.q_pool = official.qkv, official.proj, official.q_pool
        self.num_heads, self.dim_out = int(official.num_heads), int(official.dim_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from sam2.modeling.backbones.hieradet import do_pool

        batch, height, width, _ = x.shape
        d, weight, bias = self.dim_out, self.qkv.weight, self.qkv.bias
        q, k, v = (F.linear(x, weight[i * d:(i + 1) * d], bias[i * d:(i + 1) * d]).reshape(batch, height * width, d)
                   for i in range(3))
        if self.q_pool:  # Q pooling at a stage change, as the official forward does it
            q = do_pool(q.reshape(batch, height, width, -1), self.q_pool)
            height, width = q.shape[1:3]

        def heads(t: torch.Tensor) -> torch.Tensor:  # B, N, heads * hd -> B, heads, N, hd
            return t.reshape(batch, -1, self.num_heads, self.dim_out // self.num_heads).transpose(1, 2)

        out = F.scaled_dot_product_attention(heads(q), heads(k), heads(v))
        return self.proj(out.transpose(1, 2).reshape(batch, height, width, -1))


class Sam2ImageEncoder(nn.Module):
    """``SAM2Base`` -> the image features ``SAM2ImagePredictor.set_image`` keeps (see the module docstring)."""

    def __init__(self, sam2: nn.Module):
        super().__init__()
        self.model = sam2

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        backbone_out = self.model.forward_image(image)
        _, vision_feats, _, feat_sizes = self.model._prepare_backbone_features(backbone_out)
        if self.model.directly_add_no_mem_embed:
            vision_feats[-1] = vision_feats[-1] + self.model.no_mem_embed
        batch = image.shape[0]
        feats = [feat.permute(1, 2, 0).reshape(batch, -1, height, width)
                 for feat, (height, width) in zip(vision_feats[::-1], feat_sizes[::-1])][::-1]
        return feats[-1], feats[0], feats[1]


def rewrite_sam2_image_encoder(model: nn.Module) -> Sam2ImageEncoder:
    """A copy of ``model`` (``SAM2Base``) computing the image features, its attentions as :class:`SplitQkvAttention`
    (the original is left unchanged)."""
    model = copy.deepcopy(model).eval()
    for block in model.image_encoder.trunk.blocks:
        block.attn = SplitQkvAttention(block.attn)
    return Sam2ImageEncoder(model).eval()


__all__ = ["OUTPUT_NAMES", "Sam2ImageEncoder", "SplitQkvAttention", "rewrite_sam2_image_encoder"]
