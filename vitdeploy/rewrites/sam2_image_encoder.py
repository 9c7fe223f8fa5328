"""SAM 2's image encoder as one graph: Hiera trunk + FPN neck + the no-memory embedding, as ``SAM2ImagePredictor``
computes its features in ``set_image`` (same weights, the official modules' own code).

``forward(image) -> (image_embed, high_res_feats_0, high_res_feats_1)``:

* ``SAM2Base.forward_image``: the trunk and the FPN neck, and the mask decoder's ``conv_s0``/``conv_s1`` on the two
  high-resolution levels (SAM 2 computes them once per image, not per prompt).
* ``_prepare_backbone_features``, then ``no_mem_embed`` added to the lowest-resolution level (a frame without
  memory: an image, or the first frame of a video), then each level from (HW, B, C) back to (B, C, H, W).

Nothing is rewritten inside: the dynamo exporter traces Hiera's window partition (padding read from static
shapes) and the neck's nearest-neighbour top-down path into constants (measured rel. error against eager below
1e-6 on ONNX Runtime, tiny and hiera-t models).
"""

from __future__ import annotations

import copy

import torch
from torch import nn

#: The graph's outputs, in order.
OUTPUT_NAMES = ("image_embed", "high_res_feats_0", "high_res_feats_1")


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
    """A copy of ``model`` (``SAM2Base``) computing the image features (the original is left unchanged)."""
    return Sam2ImageEncoder(copy.deepcopy(model).eval()).eval()


__all__ = ["OUTPUT_NAMES", "Sam2ImageEncoder", "rewrite_sam2_image_encoder"]
