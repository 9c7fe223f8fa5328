"""SAM 3's video tracker memory as the two graphs SAM 2's is (:mod:`vitdeploy.rewrites.sam2_memory`), same weights
as the official ``sam3`` tracker (``Sam3TrackerBase``).

Where the code is SAM 2's, SAM 2's rewrites are used as they are, on :class:`TrackerAsSam2`: the tracker under the
names ``SAM2Base`` gives the same things. Read in ``sam3/model/sam3_tracker_base.py`` against ``sam2/modeling/
sam2_base.py``:

* **The same.** ``_prepare_memory_conditioned_features`` builds the bank as SAM 2.1 does: the prompted frames at
  ``t_pos`` 0 and the ``num_maskmem - 1`` most recent at 1..6 with ``maskmem_tpos_enc``, the memory's sine
  encoding, object pointers from ``obj_ptr_proj`` (a 3-layer MLP) mixed with ``no_obj_ptr`` by the hard
  ``object_score_logits > 0`` (``fixed_no_obj_ptr``, not ``soft_no_obj_ptr``), their signed frame distance over
  ``max_obj_ptrs_in_encoder - 1`` in a sine encoding of ``hidden_dim`` projected by ``obj_ptr_tpos_proj``
  (SAM 2's ``proj_tpos_enc_in_obj_ptrs``), each pointer split into ``hidden_dim / mem_dim`` tokens, pointers only
  from the past in evaluation. The layers (``TransformerDecoderLayerv2``, pre-norm: self-attention, cross-attention,
  MLP; the same ``norm1..3``, ``linear1/2``, ``self_attn``, ``cross_attn_image`` and ``pos_enc_at_*`` flags;
  ``RoPEAttention`` with ``rope_k_repeat`` and the pointers excluded from the rotation) and the final ``norm``
  compute what SAM 2's ``MemoryAttention`` computes. ``_encode_new_memory``: sigmoid (or binarized where clicks made
  the mask) scaled by 20 and shifted by -10, the memory encoder, ``no_obj_embed_spatial`` added where no object is.
* **What differs, and where it is handled.** The memory attention is ``transformer.encoder``
  (``TransformerEncoderCrossAttention``, batch first, applying its ``norm`` after every layer of which only the last
  is kept), the memory encoder ``maskmem_backbone`` (``SimpleMaskEncoder``, whose mask downsampler first resizes the
  1008 px mask to 1152 px, bilinear with ``antialias=True``: :class:`EnlargingMaskDownSampler`, the same numbers
  without the antialiasing TensorRT-RTX does not parse); SAM 2's flags are fixed in code rather than set by a
  config (:class:`TrackerAsSam2` names each). The current frame's position encoding is the vision neck's sine
  encoding (``vision_pos_enc``), not an image encoder attribute of the tracker: it is given
  (:func:`~vitdeploy.models.sam3_common.build_position_encoding` of ``d_model``).
* The vision encoder's ``image_embed`` carries ``no_mem_embed`` (the tracker's; :mod:`vitdeploy.rewrites.
  sam3_vision_encoder`), as SAM 2's image encoder's does, so both graphs subtract it as SAM 2's do.

The references (:class:`OfficialSam3MemoryAttentionReference`, :class:`OfficialSam3MemoryEncoderReference`) run the
official ``transformer.encoder`` and ``_encode_new_memory`` on the entries the graph's masks keep.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from vitdeploy.rewrites.sam2_memory import ExportableMemoryEncoder, official_bank, official_current_frame


class TrackerAsSam2:
    """SAM 3's ``Sam3TrackerBase`` under ``SAM2Base``'s names, for SAM 2's rewrites: the modules renamed, and the
    settings SAM 2 reads from its config fixed as SAM 3's code behaves (each with where it says so). Anything else is
    the tracker's own attribute."""

    def __init__(self, tracker: nn.Module, image_position_encoding: nn.Module):
        self._tracker = tracker
        self.memory_attention = tracker.transformer.encoder
        self.memory_encoder = tracker.maskmem_backbone
        self.image_encoder = SimpleNamespace(neck=SimpleNamespace(position_encoding=image_position_encoding))
        # _prepare_memory_conditioned_features: the pointers always (use_obj_ptrs_in_encoder), no_mem_embed added
        # directly on a prompted frame (directly_add_no_mem_embed), pointers only from the past (not self.training)
        self.use_obj_ptrs_in_encoder = self.directly_add_no_mem_embed = True
        self.only_obj_ptrs_in_the_past_for_eval = self.use_signed_tpos_enc_to_obj_ptrs = True
        # _get_tpos_enc: the distance in a sine encoding of hidden_dim, always projected
        self.add_tpos_enc_to_obj_ptrs = self.proj_tpos_enc_in_obj_ptrs = True
        # _forward_sam_heads: object scores (pred_obj_scores=True in _build_sam_heads), the hard mixing with
        # no_obj_ptr, the multimask token's pointer (use_multimask_token_for_obj_ptr=True), high-resolution features
        self.pred_obj_scores = self.fixed_no_obj_ptr = self.use_multimask_token_for_obj_ptr = True
        self.soft_no_obj_ptr = False
        self.use_high_res_features_in_sam = True
        # track_step: a mask prompt is the output without SAM (_use_mask_as_output); _encode_new_memory: clicks'
        # masks binarized (is_mask_from_pts and not self.training)
        self.use_mask_input_as_output_without_sam = self.binarize_mask_from_pts_for_mem_enc = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tracker, name)


class EnlargingMaskDownSampler(nn.Module):
    """The official ``SimpleMaskDownSampler`` with its first resize as plain bilinear where it enlarges the mask (1008
    to 1152 px), the same numbers as its ``antialias=True`` (antialiasing widens the filter only when shrinking; on
    masks of 112 and 1008 px the resizes differ by 6e-8 relative, the whole downsampler by 5.7e-7 at most, float32
    rounding). TensorRT-RTX parses no antialiased ``Resize``. A resize that shrinks keeps the official antialiasing."""

    def __init__(self, official: nn.Module):
        super().__init__()
        self.encoder = official.encoder
        self.interpol_size = official.interpol_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.interpol_size is not None and self.interpol_size != list(x.shape[-2:]):
            shrinks = any(want < have for want, have in zip(self.interpol_size, x.shape[-2:]))
            x = F.interpolate(x.float(), size=self.interpol_size, align_corners=False, mode="bilinear",
                              antialias=shrinks)
        return self.encoder(x)


def tracker_memory_encoder(tracker: TrackerAsSam2) -> ExportableMemoryEncoder:
    """SAM 2's memory encoder graph over SAM 3's tracker, its mask downsampler's enlarging resize plain bilinear."""
    exportable = ExportableMemoryEncoder(tracker)  # a copy of the memory encoder: the tracker's is left as it is
    exportable.memory_encoder.mask_downsampler = EnlargingMaskDownSampler(exportable.memory_encoder.mask_downsampler)
    return exportable


class OfficialSam3MemoryAttentionReference(nn.Module):
    """The official modules behind the memory attention graph's inputs and outputs: the entries the masks keep,
    encoded and concatenated as ``Sam3TrackerBase._prepare_memory_conditioned_features`` does (SAM 2's
    :func:`~vitdeploy.rewrites.sam2_memory.official_bank` on the tracker's own modules and ``sam3``'s
    ``get_1d_sine_pe``: ``_get_tpos_enc`` written out, as its ``torch.tensor(...).pin_memory()`` needs CUDA), through
    the official ``transformer.encoder``."""

    def __init__(self, tracker: nn.Module, image_position_encoding: nn.Module):
        super().__init__()
        self.model = tracker
        self.as_sam2 = TrackerAsSam2(tracker, image_position_encoding)

    def forward(self, image_embed, *bank):
        from sam3.model.sam3_tracker_utils import get_1d_sine_pe

        h, w = image_embed.shape[-2:]
        memory, memory_pos, pointers = official_bank(self.as_sam2, get_1d_sine_pe, *bank)
        raw, curr_pos = official_current_frame(self.as_sam2, image_embed)
        out = self.model.transformer.encoder(src=[raw], src_key_padding_mask=[None], src_pos=[curr_pos], prompt=memory,
                                             prompt_pos=memory_pos, prompt_key_padding_mask=None, feat_sizes=[(h, w)],
                                             num_obj_ptr_tokens=pointers)["memory"]
        return out.permute(1, 2, 0).reshape(1, int(self.model.hidden_dim), h, w)


class OfficialSam3MemoryEncoderReference(nn.Module):
    """``Sam3TrackerBase._encode_new_memory`` itself on the upsampled mask, as ``_forward_sam_heads`` upsamples it;
    ``binarize`` stands for "clicks made this mask" (``is_mask_from_pts``)."""

    def __init__(self, tracker: nn.Module):
        super().__init__()
        self.model = tracker

    def forward(self, image_embed, pred_masks, object_score_logits, binarize):
        c, (h, w), size = int(self.model.hidden_dim), image_embed.shape[-2:], int(self.model.image_size)
        raw = image_embed.reshape(1, c, h * w).permute(2, 0, 1) - self.model.no_mem_embed.reshape(1, 1, c)
        high_res = F.interpolate(pred_masks, size=(size, size), mode="bilinear", align_corners=False)
        features, pos = self.model._encode_new_memory(None, [raw], [(h, w)], high_res, object_score_logits,
                                                      is_mask_from_pts=bool(float(binarize.reshape(-1)[0]) > 0.5))
        return features, pos[0]


__all__ = ["EnlargingMaskDownSampler", "OfficialSam3MemoryAttentionReference", "OfficialSam3MemoryEncoderReference",
           "TrackerAsSam2", "tracker_memory_encoder"]
