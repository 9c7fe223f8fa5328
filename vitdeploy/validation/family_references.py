"""Eager official references for ``sam_mask_decoder`` and ``timm_vit`` artifacts, rebuilt from their metadata.

:func:`vitdeploy.validation.references.eager_reference` dispatches here. Each reference takes the
artifact's inputs in the graph's order and returns its outputs in the graph's order, computed by the
official modules (``segment_anything`` PromptEncoder/MaskDecoder, timm VisionTransformer).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from vitdeploy.errors import CheckpointError, InputError


def check_checkpoint(meta: dict[str, Any], checkpoint: str | None) -> None:
    """Random-weight artifacts need no checkpoint; checkpoint artifacts need the same file (SHA-256)."""
    from vitdeploy.fileio import sha256_file

    if checkpoint is None:
        if not meta.get("random_weights"):
            raise InputError(f"this model was exported from checkpoint '{meta.get('checkpoint')}': pass it with --checkpoint")
        return
    recorded = meta.get("checkpoint_sha256")
    if recorded and sha256_file(checkpoint) != recorded:
        raise CheckpointError(
            f"checkpoint '{checkpoint}' is not the one this model was exported from "
            f"('{meta.get('checkpoint')}', sha256 {recorded[:12]}...): pass that checkpoint"
        )


class OfficialDecoderReference(nn.Module):
    """The decoder graph's contract computed by the official ``PromptEncoder.forward`` and ``MaskDecoder``.

    Inputs use the graph's layout (points, then a padding point or one box's two corners); they are
    turned back into the official call: ``points`` without the padding point (the official encoder adds
    it itself when there is no box), ``boxes``, and ``masks`` only when ``has_mask_input`` is set.
    """

    def __init__(self, prompt_encoder: nn.Module, mask_decoder: nn.Module, mask_slice: tuple[int, int]):
        super().__init__()
        self.prompt_encoder = prompt_encoder
        self.mask_decoder = mask_decoder
        self.mask_slice = mask_slice

    def forward(self, image_embeddings: torch.Tensor, point_coords: torch.Tensor, point_labels: torch.Tensor,
                mask_input: torch.Tensor, has_mask_input: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        labels = point_labels[0]
        n_box = int((labels == 2).sum())
        if n_box > 1:
            raise InputError("the official SamPredictor takes one box per prompt; these inputs hold several")
        if n_box:
            if labels[-2:].tolist() != [2.0, 3.0]:
                raise InputError("box corners (labels 2, 3) must be the last two points")
            boxes = point_coords[:, -2:].reshape(1, 4)
            coords, labs = point_coords[:, :-2], point_labels[:, :-2]
        else:
            if float(labels[-1]) != -1.0:
                raise InputError("without a box the last point must be the padding point (label -1)")
            boxes, coords, labs = None, point_coords[:, :-1], point_labels[:, :-1]
        points = (coords, labs) if coords.shape[1] else None
        if points is None and boxes is None:
            raise InputError("no prompt: the inputs hold neither points nor a box")
        masks = mask_input if float(has_mask_input.reshape(-1)[0]) > 0.5 else None
        sparse, dense = self.prompt_encoder(points=points, boxes=boxes, masks=masks)
        masks_out, iou = self.mask_decoder.predict_masks(
            image_embeddings=image_embeddings, image_pe=self.prompt_encoder.get_dense_pe(),
            sparse_prompt_embeddings=sparse, dense_prompt_embeddings=dense,
        )
        start, stop = self.mask_slice
        return masks_out[:, start:stop], iou[:, start:stop]


def sam_mask_decoder_reference(meta: dict[str, Any], checkpoint: str | None = None) -> nn.Module:
    """The official prompt encoder + mask decoder of a decoder artifact, behind the graph's interface."""
    from vitdeploy.models.sam_decoder import SamDecoderArch, load_sam_prompt_decoder

    check_checkpoint(meta, checkpoint)
    arch = SamDecoderArch(**meta["architecture"])
    if checkpoint is None:
        model = load_sam_prompt_decoder(arch, random_seed=int(meta["random_seed"]))
    else:
        model = load_sam_prompt_decoder(arch, checkpoint)
    indices = [int(i) for i in meta.get("mask_output_indices", range(arch.num_multimask_outputs + 1))]
    return OfficialDecoderReference(model.prompt_encoder, model.mask_decoder, (indices[0], indices[-1] + 1)).eval()


class TimmOutputReference(nn.Module):
    """timm's own methods for the artifact's output: ``forward``, ``forward_head(pre_logits=True)`` or ``forward_features``."""

    def __init__(self, model: nn.Module, output: str):
        super().__init__()
        self.model = model
        self.output = output

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.output == "features":
            return self.model.forward_features(x)
        if self.output == "pre_logits":
            return self.model.forward_head(self.model.forward_features(x), pre_logits=True)
        return self.model(x)


def timm_vit_reference(meta: dict[str, Any], checkpoint: str | None = None) -> nn.Module:
    """The timm model of a timm artifact, at the artifact's size (timm's ``set_input_size``)."""
    from vitdeploy.models.timm_vit import TimmVitArch, load_timm_vit
    from vitdeploy.rewrites.timm_vit import timm_reference_at_size

    check_checkpoint(meta, checkpoint)
    arch = TimmVitArch.from_dict(meta["architecture"])
    if checkpoint is None:
        model = load_timm_vit(arch, random_seed=int(meta["random_seed"]))
    else:
        model = load_timm_vit(arch, checkpoint)
    ref = timm_reference_at_size(model, int(meta["input_size"][0]))
    return TimmOutputReference(ref, str(meta.get("output", "logits"))).eval()
