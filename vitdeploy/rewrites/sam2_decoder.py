"""Export-friendly SAM 2 prompt encoder + mask decoder (one graph), same weights as the official ``sam2`` modules.

The graph's contract (the SAM 1 decoder's, :mod:`vitdeploy.rewrites.sam_decoder`, plus what SAM 2 adds):

* ``image_embed`` (1, C, h, w), ``high_res_feats_0`` (1, C/8, 4h, 4w), ``high_res_feats_1`` (1, C/4, 2h, 2w): the
  image encoder's three outputs (:mod:`vitdeploy.rewrites.sam2_image_encoder`).
* ``point_coords`` (1, N, 2) in the encoder's square input frame and ``point_labels`` (1, N): a box's corners first
  (labels 2, 3), then the clicks (1 foreground, 0 background), as ``SAM2ImagePredictor`` concatenates them; no
  padding point (the graph appends it, as the official prompt encoder does when called without boxes). N dynamic.
* ``mask_input`` (1, 1, 4h, 4w) and ``has_mask_input`` (1,): as SAM 1's.
* Outputs ``low_res_masks`` (1, K, 4h, 4w) and ``iou_predictions`` (1, K) for every mask token (0: single mask,
  1..: multimask), ``object_score_logits`` (1, 1) (is the object present: > 0), and ``mask_tokens`` (1, K, C):
  the mask tokens' transformer outputs, from which the video path makes its object pointer.

What differs from the official modules: the prompt encoder and the two-way transformer are SAM 1's rewrites
(the same code in ``sam2``: arithmetic label selection, a gated mask prompt, a fixed dense grid, static head
sizes); the high-resolution upscaling adds the two feature maps exactly as ``MaskDecoder.predict_masks`` does;
every mask token is returned, so the choice the official ``forward`` makes per call (multimask, or the
single mask unless its stability falls under the threshold: ``dynamic_multimask_via_stability``) is made by the
runtime in NumPy with the same thresholds (recorded in the metadata).
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from vitdeploy.errors import ExportError
from vitdeploy.rewrites.layernorm2d import LayerNorm2dMode, rewrite_layernorm2d
from vitdeploy.rewrites.sam_decoder import ExportablePromptEncoder, ExportableTwoWayTransformer

INPUT_NAMES = ("image_embed", "high_res_feats_0", "high_res_feats_1", "point_coords", "point_labels", "mask_input",
               "has_mask_input")
OUTPUT_NAMES = ("low_res_masks", "iou_predictions", "object_score_logits", "mask_tokens")


class ExportableSam2MaskDecoder(nn.Module):
    """Official SAM 2 ``MaskDecoder.predict_masks`` for one prompt set, with its high-resolution features."""

    def __init__(self, official: nn.Module, grid_hw: tuple[int, int], layernorm2d: LayerNorm2dMode = "matmul"):
        super().__init__()
        if not official.use_high_res_features:
            raise ExportError("this rewrite is for SAM 2 mask decoders with high-resolution features (use_high_res_features)")
        self.transformer_dim = int(official.transformer_dim)
        self.num_mask_tokens = int(official.num_mask_tokens)
        self.pred_obj_scores = bool(official.pred_obj_scores)
        self.grid_hw = grid_hw
        self.transformer = ExportableTwoWayTransformer(official.transformer, grid_hw)
        if self.pred_obj_scores:
            self.obj_score_token = copy.deepcopy(official.obj_score_token)
            self.pred_obj_score_head = copy.deepcopy(official.pred_obj_score_head)
        self.iou_token = copy.deepcopy(official.iou_token)
        self.mask_tokens = copy.deepcopy(official.mask_tokens)
        dc1, ln1, act1, dc2, act2 = official.output_upscaling
        h, w = grid_hw
        self.output_upscaling = nn.Sequential(
            copy.deepcopy(dc1), rewrite_layernorm2d(ln1, dc1.out_channels, (2 * h, 2 * w), layernorm2d),
            copy.deepcopy(act1), copy.deepcopy(dc2), copy.deepcopy(act2))
        self.upscaled_channels = int(dc2.out_channels)
        self.output_hypernetworks_mlps = copy.deepcopy(official.output_hypernetworks_mlps)
        self.iou_prediction_head = copy.deepcopy(official.iou_prediction_head)

    def forward(self, image_embed: torch.Tensor, feat_s0: torch.Tensor, feat_s1: torch.Tensor, image_pe: torch.Tensor,
                sparse: torch.Tensor, dense: torch.Tensor):
        c, (h, w), k = self.transformer_dim, self.grid_hw, self.num_mask_tokens
        rows = ([self.obj_score_token.weight] if self.pred_obj_scores else []) + [self.iou_token.weight, self.mask_tokens.weight]
        s = 1 if self.pred_obj_scores else 0
        tokens = torch.cat([torch.cat(rows, dim=0).unsqueeze(0), sparse], dim=1)  # 1, s+1+K+N, C
        hs, src = self.transformer(image_embed + dense, image_pe, tokens)
        iou_token_out = hs[:, s, :]
        mask_tokens_out = hs[:, s + 1 : s + 1 + k, :]  # 1, K, C
        src = src.transpose(1, 2).reshape(1, c, h, w)
        dc1, ln1, act1, dc2, act2 = self.output_upscaling
        upscaled = act1(ln1(dc1(src) + feat_s1))
        upscaled = act2(dc2(upscaled) + feat_s0)  # 1, C/8, 4h, 4w
        hyper_in = torch.stack([mlp(mask_tokens_out[:, i, :]) for i, mlp in enumerate(self.output_hypernetworks_mlps)], dim=1)
        masks = torch.matmul(hyper_in, upscaled.reshape(1, self.upscaled_channels, 16 * h * w)).reshape(1, k, 4 * h, 4 * w)
        iou = self.iou_prediction_head(iou_token_out)
        objects = self.pred_obj_score_head(hs[:, 0, :]) if self.pred_obj_scores else 10.0 * torch.ones_like(iou[:, :1])
        return masks, iou, objects, mask_tokens_out


class ExportableSam2Decoder(nn.Module):
    """Prompt encoder + mask decoder of a ``SAM2Base`` as one module (see the module docstring)."""

    def __init__(self, sam2: nn.Module, layernorm2d: LayerNorm2dMode = "matmul"):
        super().__init__()
        self.prompt_encoder = ExportablePromptEncoder(sam2.sam_prompt_encoder, layernorm2d)
        self.mask_decoder = ExportableSam2MaskDecoder(sam2.sam_mask_decoder, self.prompt_encoder.image_embedding_size,
                                                      layernorm2d)
        self.eval()

    def forward(self, image_embed: torch.Tensor, high_res_feats_0: torch.Tensor, high_res_feats_1: torch.Tensor,
                point_coords: torch.Tensor, point_labels: torch.Tensor, mask_input: torch.Tensor,
                has_mask_input: torch.Tensor):
        # The official prompt encoder is called with boxes=None (box corners come as points), so it always appends
        # one padding point: the graph does too, and its callers never add one.
        coords = torch.cat([point_coords, torch.zeros_like(point_coords[:, :1])], dim=1)
        labels = torch.cat([point_labels, -torch.ones_like(point_labels[:, :1])], dim=1)
        sparse = self.prompt_encoder.embed_points(coords, labels)
        dense = self.prompt_encoder.embed_mask(mask_input, has_mask_input)
        return self.mask_decoder(image_embed, high_res_feats_0, high_res_feats_1, self.prompt_encoder.dense_pe(), sparse, dense)


class OfficialSam2DecoderReference(nn.Module):
    """The official modules behind the graph's inputs and outputs (``SAM2ImagePredictor._predict``'s calls), for
    ``validate``: ``sam_prompt_encoder`` then ``sam_mask_decoder.predict_masks`` (every mask token)."""

    def __init__(self, sam2: nn.Module):
        super().__init__()
        self.model = sam2

    def forward(self, image_embed, high_res_feats_0, high_res_feats_1, point_coords, point_labels, mask_input, has_mask_input):
        masks_prompt = mask_input if float(has_mask_input.reshape(-1)[0]) > 0.5 else None
        sparse, dense = self.model.sam_prompt_encoder(points=(point_coords, point_labels.to(torch.int32)), boxes=None,
                                                      masks=masks_prompt)
        masks, iou, tokens, objects = self.model.sam_mask_decoder.predict_masks(
            image_embeddings=image_embed, image_pe=self.model.sam_prompt_encoder.get_dense_pe(),
            sparse_prompt_embeddings=sparse, dense_prompt_embeddings=dense, repeat_image=False,
            high_res_features=[high_res_feats_0, high_res_feats_1])
        return masks, iou, objects, tokens


def rewrite_sam2_decoder(sam2: nn.Module, layernorm2d: LayerNorm2dMode = "matmul") -> ExportableSam2Decoder:
    """An export-friendly copy of ``sam2``'s prompt encoder + mask decoder (the model is left unchanged)."""
    return ExportableSam2Decoder(sam2, layernorm2d)


__all__ = ["INPUT_NAMES", "OUTPUT_NAMES", "ExportableSam2Decoder", "OfficialSam2DecoderReference", "rewrite_sam2_decoder"]
