"""Which files make a SAM 2 model: the image encoder with its mask decoder (images), and those with the memory encoder
and memory attention (video), checked to be one model from their metadata before any is opened
(:mod:`vitdeploy.runtime.apps.common.files`)."""

from __future__ import annotations

from typing import Any

from vitdeploy.errors import InputError
from vitdeploy.families import family_of_part, model_part
from vitdeploy.metadata import identity_differences
from vitdeploy.runtime.apps.common.files import FileSet

#: The image encoder's outputs the decoder reads: one image's features, by name.
IMAGE_FEATURES = ("image_embed", "high_res_feats_0", "high_res_feats_1")
#: The four files, in the constructor's order: (the predictor's attribute, the SAM 2 part it holds).
VIDEO_FILES = (("image_encoder", "image_encoder"), ("decoder", "mask_decoder"), ("memory_encoder", "memory_encoder"),
               ("memory_attention", "memory_attention"))


def check_sam2_pair(encoder: dict[str, Any], decoder: dict[str, Any]) -> None:
    """Raise InputError unless the two files are a SAM 2 image encoder and decoder of one model."""
    if model_part(encoder) != ("sam2", "image_encoder"):
        hint = " (a SAM 1 file: use vitdeploy.runtime.SamPredictor)" if model_part(encoder)[0] == "sam" else ""
        raise InputError(f"the encoder is a '{encoder.get('family')}' model, not a SAM 2 image encoder{hint}: export one "
                         "with 'vitdeploy export -r sam2.1_hiera_tiny'")
    if model_part(decoder) != ("sam2", "mask_decoder"):
        hint = " (a SAM 1 file: use vitdeploy.runtime.SamPredictor)" if model_part(decoder)[0] == "sam" else ""
        raise InputError(f"the decoder is a '{decoder.get('family')}' model, not a SAM 2 mask decoder{hint}: export one "
                         "with 'vitdeploy export -r sam2.1_hiera_tiny_decoder'")
    different = identity_differences(encoder, decoder, ("variant", "input_size", "random_seed", "checkpoint_sha256"))
    if different:
        shown = ", ".join(different)
        raise InputError(f"the encoder and decoder come from two different SAM 2 models ({shown}): export both from "
                         "the same checkpoint (or seed) and recipe size")


def check_video_files(metadata: dict[str, dict[str, Any]]) -> None:
    """Raise InputError unless the four files are SAM 2's image encoder, decoder, memory encoder and memory attention
    of one model (same variant, weights and image size)."""
    for role, part in VIDEO_FILES:
        found = metadata[role].get("family")
        if model_part(metadata[role]) != ("sam2", part):
            family = family_of_part("sam2", part)
            sam1 = " (a SAM 1 file: SAM 1 has no video predictor; use SAM 2 files)" if model_part(metadata[role])[0] == "sam" else ""
            raise InputError(f"the {role.replace('_', ' ')} is a '{found}' model, not a {family.name} one{sam1}: export "
                             f"it with 'vitdeploy export -r sam2.1_hiera_tiny{family.recipe_suffix}' (or the size you use)")
    encoder = metadata["image_encoder"]
    for role, _ in VIDEO_FILES[1:]:
        other = metadata[role]
        different = identity_differences(encoder, other, ("variant", "random_seed", "checkpoint_sha256"))
        if different:
            shown = ", ".join(different)
            raise InputError(f"the image encoder and the {role.replace('_', ' ')} come from two different SAM 2 models "
                             f"({shown}): export all four files from the same checkpoint (or seed) and model size")
    sizes = {role: metadata[role].get("input_size") for role, _ in VIDEO_FILES}
    if len({str(v) for v in sizes.values()}) != 1:
        raise InputError(f"the four files are for different image sizes ({sizes}): the video path runs at the model's "
                         "own size; export the image encoder without --input-size")


#: SAM 2's image encoder and mask decoder (``Sam2ImagePredictor``, ``predict``, ``segment-all``, ``serve``).
IMAGE_PAIR = FileSet("sam2", "SAM 2's image encoder and decoder", ("encoder", "decoder"),
                     lambda metadata, _names: check_sam2_pair(metadata["encoder"], metadata["decoder"]))
#: SAM 2's four video files (``Sam2VideoPredictor``, ``track``), in the constructor's order.
VIDEO = FileSet("sam2", "SAM 2's video files", tuple(role for role, _ in VIDEO_FILES),
                lambda metadata, _names: check_video_files(dict(metadata)))


__all__ = ["IMAGE_FEATURES", "IMAGE_PAIR", "VIDEO", "VIDEO_FILES", "check_sam2_pair", "check_video_files"]
