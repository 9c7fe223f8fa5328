"""Which exported files make one SAM 3 model, and whether they belong together: each file's part, the same weights,
variant and image size. The sets (:mod:`vitdeploy.runtime.apps.common.files`): the vision encoder with the text
encoder and detector (concepts), with the interactive decoder (clicks), or with all three; checked from their
metadata before any file is opened or probed, for the image model (:mod:`vitdeploy.runtime.apps.sam3.processor`),
the click predictor (:mod:`vitdeploy.runtime.apps.sam3.interactive`), the verbs, the jobs and the server."""

from __future__ import annotations

from typing import Any

from vitdeploy.errors import InputError
from vitdeploy.families import model_part
from vitdeploy.metadata import identity_differences
from vitdeploy.runtime.apps.common.files import SAM3_HERE, FileSet, Metadata, Names
from vitdeploy.runtime.apps.sam2.files import IMAGE_FEATURES

#: The vision encoder's outputs a click reads (``vitdeploy.rewrites.sam3_vision_encoder.INTERACTIVE_OUTPUTS``): SAM 2's.
INTERACTIVE_FEATURES = IMAGE_FEATURES

#: SAM 3's parts, as ``vitdeploy export`` writes them, in words.
PARTS = {"vision_encoder": "the vision encoder", "text_encoder": "the text encoder", "detector": "the detector",
         "interactive_decoder": "the interactive decoder", "memory_encoder": "the memory encoder",
         "memory_attention": "the memory attention"}
#: The order the tracker's files are given in, in words.
TRACKER_ORDER = "vision encoder, interactive decoder, memory encoder, memory attention"


def check_sam3_part(metadata: dict[str, Any], part: str, order: str = "vision, text, detector") -> None:
    """Raise InputError unless ``metadata`` is SAM 3's ``part`` (a key of :data:`PARTS`); ``order`` is the order of
    the files the caller takes, said in the refusal."""
    from vitdeploy.families import family_of_part

    what, recipe = PARTS[part], "sam3" + family_of_part("sam3", part).recipe_suffix
    model, got = model_part(metadata)
    if (model, got) != ("sam3", part):
        found = f"SAM 3's {got.replace('_', ' ')}" if model == "sam3" else f"a '{metadata.get('family')}' model"
        raise InputError(f"{what} is {found}, not SAM 3's {part.replace('_', ' ')}: export it with "
                         f"'vitdeploy export -r {recipe}' and pass the files in the order {order}")


def check_same_model(vision: dict[str, Any], other: dict[str, Any], name: str, files: str,
                     same_input_size: bool = True) -> None:
    """Raise InputError unless ``other`` (SAM 3's ``name``) comes from the vision encoder's model: the same weights
    (checkpoint or seed) and variant, and (``same_input_size``) built for its input size; ``files`` says which to
    export."""
    different = identity_differences(vision, other, ("variant", "random_seed", "checkpoint_sha256"))
    if different:
        raise InputError(f"the vision encoder and the {name} come from two different SAM 3 models "
                         f"({', '.join(different)}): export {files} from the same checkpoint (or seed) and variant")
    if same_input_size and list(vision.get("input_size", [])) != list(other.get("input_size", [])):
        raise InputError(f"the vision encoder takes {vision.get('input_size')} images but the {name} was built for "
                         f"{other.get('input_size')}: export the vision encoder without --input-size")


def check_sam3_files(vision: dict[str, Any], text: dict[str, Any], detector: dict[str, Any]) -> None:
    """Raise InputError unless the three files' metadata are SAM 3's vision encoder, text encoder and detector of one
    model (the same weights, image size and width)."""
    for metadata, part in ((vision, "vision_encoder"), (text, "text_encoder"), (detector, "detector")):
        check_sam3_part(metadata, part)
    check_same_model(vision, text, "text encoder", "all three", same_input_size=False)
    check_same_model(vision, detector, "detector", "all three")
    width = (vision.get("architecture") or {}).get("d_model")
    if width is not None and width != detector.get("embed_dim"):
        raise InputError(f"the vision encoder's features are {width} wide but the detector takes "
                         f"{detector.get('embed_dim')}: export both from one model")


def check_sam3_interactive_pair(vision: dict[str, Any], decoder: dict[str, Any]) -> None:
    """Raise InputError unless the files are SAM 3's vision encoder (with the click predictor's features) and
    interactive decoder of one model."""
    check_sam3_part(vision, "vision_encoder", order="vision encoder, interactive decoder")
    check_sam3_part(decoder, "interactive_decoder", order="vision encoder, interactive decoder")
    if not set(INTERACTIVE_FEATURES) <= set(vision.get("output_names") or ()):
        raise InputError("the vision encoder has no features for clicks (image_embed, high_res_feats_0/1): it was "
                         "exported without the interactive neck or by an older vitdeploy; export it again with "
                         "'vitdeploy export -r sam3'")
    check_same_model(vision, decoder, "interactive decoder", "both")


def check_sam3_tracker_files(metadata: Metadata) -> None:
    """Raise InputError unless the four files are SAM 3's vision encoder (with the interactive features),
    interactive decoder, memory encoder and memory attention of one model, the memory encoder one that takes masks at
    the image size (``Sam3TrackerPredictor``'s consolidated prompts)."""
    for role, part in (("vision", "vision_encoder"), ("interactive", "interactive_decoder"),
                       ("memory_encoder", "memory_encoder"), ("memory_attention", "memory_attention")):
        check_sam3_part(metadata[role], part, order=TRACKER_ORDER)
    check_sam3_interactive_pair(metadata["vision"], metadata["interactive"])
    for role in ("memory_encoder", "memory_attention"):
        check_same_model(metadata["vision"], metadata[role], role.replace("_", " "), "all four")
    if "pred_masks" not in (metadata["memory_encoder"].get("dynamic_axes") or {}):
        raise InputError("the memory encoder takes only low-resolution masks (an older vitdeploy's export): export it "
                         "again with 'vitdeploy export -r sam3_memory_encoder' (or the size you use)")


def _check_concept(metadata: Metadata, _names: Names) -> None:
    check_sam3_files(metadata["vision"], metadata["text"], metadata["detector"])


def _check_clicks(metadata: Metadata, names: Names) -> None:
    if model_part(metadata["vision"]) == ("sam3", "vision_encoder") and model_part(metadata["interactive"])[0] != "sam3":
        raise InputError(f"{names['vision']} is {SAM3_HERE}")  # beside another model's decoder: what SAM 3 is for
    check_sam3_interactive_pair(metadata["vision"], metadata["interactive"])


#: SAM 3's vision encoder, text encoder and detector: every instance of a concept (``Sam3Processor``,
#: ``segment-concept``), in ``Sam3ImageModel``'s order.
CONCEPT = FileSet("sam3", "SAM 3's vision encoder, text encoder and detector", ("vision", "text", "detector"),
                  _check_concept)
#: SAM 3's vision encoder and interactive decoder: clicks and boxes (``Sam3InteractivePredictor``, ``predict``).
CLICKS = FileSet("sam3", "SAM 3's vision encoder and interactive decoder", ("vision", "interactive"), _check_clicks)
#: All four (``Sam3ImageModel(..., interactive=)``; ``serve`` with concept prompts), the image encoder and prompt
#: decoder first, as in every model's pair.
CONCEPT_AND_CLICKS = FileSet("sam3", "SAM 3's vision encoder, interactive decoder, text encoder and detector",
                             ("vision", "interactive", "text", "detector"),
                             lambda metadata, names: (_check_concept(metadata, names), _check_clicks(metadata, names)))

#: SAM 3's tracker used as SAM 2 (``Sam3TrackerPredictor``): the vision encoder, the interactive decoder, the memory
#: encoder and the memory attention.
TRACKER = FileSet("sam3", "SAM 3's tracker files", ("vision", "interactive", "memory_encoder", "memory_attention"),
                  lambda metadata, _names: check_sam3_tracker_files(metadata))


__all__ = ["CLICKS", "CONCEPT", "CONCEPT_AND_CLICKS", "INTERACTIVE_FEATURES", "PARTS", "TRACKER", "TRACKER_ORDER",
           "check_sam3_files", "check_sam3_interactive_pair", "check_sam3_part", "check_sam3_tracker_files",
           "check_same_model"]
