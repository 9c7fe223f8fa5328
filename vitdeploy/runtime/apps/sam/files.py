"""Which files make a SAM (1) model: its image encoder, and the encoder with its prompt encoder + mask decoder, checked
to be one model from their metadata before either is opened (:mod:`vitdeploy.runtime.apps.common.files`)."""

from __future__ import annotations

from typing import Any

from vitdeploy.errors import InputError
from vitdeploy.families import model_part
from vitdeploy.runtime.apps.common.files import SAM2_HERE, SAM3_HERE, FileSet, Metadata, Names


def check_sam_encoder(encoder: dict[str, Any], name: str = "the encoder artifact") -> None:
    """Raise InputError unless ``encoder`` (metadata) is a SAM image encoder's."""
    model, part = model_part(encoder)
    if (model, part) != ("sam", "image_encoder"):
        hint = f" ({SAM2_HERE})" if model == "sam2" else f" ({SAM3_HERE})" if model == "sam3" else ""
        raise InputError(f"{name} is a '{encoder.get('family')}' model, not a SAM image encoder{hint}: "
                         "pass the file written by 'vitdeploy export --recipe sam_vit_b' (or _l/_h)")


def check_artifact_pair(encoder: dict[str, Any], decoder: dict[str, Any], *, check_weights: bool = True) -> None:
    """Raise InputError unless the encoder and decoder metadata describe one SAM model.

    Checked: families, variant, input size, embedding grid and channels, and (``check_weights``) that
    the weights come from the same checkpoint (SHA-256) or the same random seed.
    """
    check_sam_encoder(encoder)
    if model_part(decoder) != ("sam", "mask_decoder"):
        hint = (" (a SAM 2 decoder beside a SAM 1 encoder: give the SAM 1 decoder, or both SAM 2 files)"
                if model_part(decoder) == ("sam2", "mask_decoder") else "")
        raise InputError(f"the decoder artifact is a '{decoder.get('family')}' model, not a SAM mask decoder{hint}: "
                         "pass the file written by 'vitdeploy export --recipe sam_vit_b_decoder' (or _l/_h)")
    problems = []
    if encoder.get("variant") != decoder.get("variant"):
        problems.append(f"variant {encoder.get('variant')} vs {decoder.get('variant')}")
    if list(encoder.get("input_size", [])) != list(decoder.get("input_size", [])):
        problems.append(f"input size {encoder.get('input_size')} vs {decoder.get('input_size')}")
    arch = encoder.get("architecture") or {}
    size = int(encoder.get("input_size", [0])[0])
    if arch.get("patch_size"):
        grid = size // int(arch["patch_size"])
        if [grid, grid] != list(decoder.get("image_embedding_size", [])):
            problems.append(f"embedding grid {[grid, grid]} vs {decoder.get('image_embedding_size')}")
    if arch.get("out_chans") and int(arch["out_chans"]) != int(decoder.get("embed_dim", -1)):
        problems.append(f"embedding channels {arch['out_chans']} vs {decoder.get('embed_dim')}")
    if check_weights and not problems:
        if bool(encoder.get("random_weights")) != bool(decoder.get("random_weights")):
            problems.append("random weights in one, a checkpoint in the other")
        elif encoder.get("random_weights") and encoder.get("random_seed") != decoder.get("random_seed"):
            problems.append(f"random seed {encoder.get('random_seed')} vs {decoder.get('random_seed')}")
        elif (encoder.get("checkpoint_sha256") and decoder.get("checkpoint_sha256")
              and encoder["checkpoint_sha256"] != decoder["checkpoint_sha256"]):
            problems.append(f"checkpoint {encoder.get('checkpoint')} vs {decoder.get('checkpoint')}")
    if problems:
        raise InputError(
            "the encoder and decoder were not exported from the same SAM model (encoder vs decoder: "
            + "; ".join(problems) + "): export both from one recipe pair and checkpoint"
        )


def _check_encoder(metadata: Metadata, names: Names) -> None:
    check_sam_encoder(metadata["encoder"], names["encoder"])


def _check_pair(metadata: Metadata, names: Names, check_weights: bool = True) -> None:
    check_sam_encoder(metadata["encoder"], names["encoder"])
    check_artifact_pair(metadata["encoder"], metadata["decoder"], check_weights=check_weights)


#: SAM's image encoder alone (``embed``).
ENCODER = FileSet("sam", "SAM's image encoder", ("encoder",), _check_encoder)
#: SAM's image encoder and its prompt encoder + mask decoder (``SamPredictor``, ``predict``, ``segment-all``, ``serve``).
PAIR = FileSet("sam", "SAM's image encoder and decoder", ("encoder", "decoder"), _check_pair)
#: The same, for a decoder fine-tuned apart from its encoder (``check_weights=False``: the weights' provenance is not
#: compared).
PAIR_ANY_WEIGHTS = FileSet("sam", "SAM's image encoder and decoder", ("encoder", "decoder"),
                           lambda metadata, names: _check_pair(metadata, names, check_weights=False))


__all__ = ["ENCODER", "PAIR", "PAIR_ANY_WEIGHTS", "check_artifact_pair", "check_sam_encoder"]
