"""Eager reference models rebuilt from an artifact's metadata (official code + the same weights)."""

from __future__ import annotations

from typing import Any

from torch import nn

from vitdeploy.errors import CheckpointError, InputError


def eager_reference(metadata: dict[str, Any], checkpoint: str | None = None) -> nn.Module:
    """The official eager model an exported file was made from.

    Random-weight exports are rebuilt from the seed in their metadata; checkpoint exports need the
    same checkpoint (its SHA-256 is checked against the one recorded at export).
    """
    if checkpoint is not None and metadata.get("random_weights"):
        raise InputError(f"this model was exported with random weights (seed {metadata.get('random_seed')}), so "
                         f"checkpoint '{checkpoint}' is not its reference: leave out --checkpoint (the reference is "
                         "rebuilt from the seed), or export from the checkpoint first")
    family = metadata.get("family")
    if family == "sam_image_encoder":
        return _sam_image_encoder(metadata, checkpoint)
    if family == "sam_mask_decoder":
        from vitdeploy.validation.family_references import sam_mask_decoder_reference

        return sam_mask_decoder_reference(metadata, checkpoint)
    if family == "timm_vit":
        from vitdeploy.validation.family_references import timm_vit_reference

        return timm_vit_reference(metadata, checkpoint)
    raise InputError(f"no eager reference for model family '{family}': this file was not made by this vitdeploy version")


def _sam_image_encoder(meta: dict[str, Any], checkpoint: str | None) -> nn.Module:
    from vitdeploy.fileio import sha256_file
    from vitdeploy.models.sam_encoder import SamEncoderArch, load_sam_image_encoder, official_encoder_at_size

    arch_dict = dict(meta["architecture"])
    arch_dict["global_attn_indexes"] = tuple(arch_dict.get("global_attn_indexes", ()))
    arch = SamEncoderArch(**arch_dict)
    if checkpoint is None:
        if not meta.get("random_weights"):
            raise InputError(
                f"this model was exported from checkpoint '{meta.get('checkpoint')}': pass it with --checkpoint"
            )
        model = load_sam_image_encoder(arch, random_seed=int(meta["random_seed"]))
    else:
        recorded = meta.get("checkpoint_sha256")
        if recorded and sha256_file(checkpoint) != recorded:
            raise CheckpointError(
                f"checkpoint '{checkpoint}' is not the one this model was exported from "
                f"('{meta.get('checkpoint')}', sha256 {recorded[:12]}...): pass that checkpoint"
            )
        model = load_sam_image_encoder(arch, checkpoint)
    return official_encoder_at_size(model, int(meta["input_size"][0]))
