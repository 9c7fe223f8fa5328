"""The predictor for a pair of deployed files: the one place that picks among the models' predictors (and their
halves, for a server whose encoder and decoder run apart), by the files each model's package says it takes
(:mod:`vitdeploy.runtime.apps.common.files`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from vitdeploy.errors import InputError
from vitdeploy.families import model_part
from vitdeploy.runtime.apps.common.files import FileRef, FileSet, OpenModel, file_metadata
from vitdeploy.runtime.deploy.plan import ModelPlan

#: The keywords only SAM (1)'s predictor takes.
_SAM1_ONLY = ("tf32", "allow_unverified", "check_weights")


def prompt_files(encoder: FileRef | dict[str, Any] | None) -> FileSet:
    """The set of files a prompt predictor on ``encoder`` (a file, a Runner, or its metadata) takes: SAM 2's pair for
    a SAM 2 encoder, SAM 3's vision encoder and interactive decoder for a SAM 3 file, else SAM's (whose check refuses
    any other model's encoder, naming what it is)."""
    from vitdeploy.runtime.apps.sam.files import PAIR
    from vitdeploy.runtime.apps.sam2.files import IMAGE_PAIR
    from vitdeploy.runtime.apps.sam3.files import CLICKS

    metadata = encoder if isinstance(encoder, dict) else file_metadata(encoder) if encoder is not None else None
    model = model_part(metadata)[0] if metadata is not None else None
    return {"sam2": IMAGE_PAIR, "sam3": CLICKS}.get(model, PAIR)


def open_sam_predictor(encoder: str | os.PathLike, decoder: str | os.PathLike, *, for_generator: bool = False,
                       **options: Any):
    """The predictor for a pair of exported files: :class:`Sam2ImagePredictor` for SAM 2 files,
    :class:`Sam3InteractivePredictor` for SAM 3's vision encoder and interactive decoder, else
    :class:`vitdeploy.runtime.SamPredictor` (``options`` are SamPredictor's, ``options=OpenOptions(...)`` included; the
    SAM 2 and SAM 3 ones refuse the SAM 1-only ones when set). ``for_generator``: the predictor is for the automatic
    mask generator, which SAM 3 does not have. Every refusal comes before a file is opened (and probed): the pair
    is checked by the predictor before it decides or opens anything."""
    files = prompt_files(encoder)
    if files.model == "sam3" and for_generator:
        raise InputError(f"'{Path(encoder).name}' is a SAM 3 file, and SAM 3 has no automatic mask generator (the "
                         "official package has none to match): find every instance of a concept with 'vitdeploy "
                         "segment-concept' (vitdeploy.runtime.Sam3Processor), or use SAM (1) or SAM 2 files here")
    if files.model == "sam":
        from vitdeploy.runtime.apps.sam.predictor import SamPredictor

        return SamPredictor(encoder, decoder, **options)
    if options.get("tf32") or options.get("allow_unverified") or options.get("check_weights") is False:
        raise InputError(f"--tf32, --allow-unverified and --no-weight-check are for SAM 1 files: leave them out for "
                         f"{'SAM 2' if files.model == 'sam2' else 'SAM 3'}")
    kept = {k: v for k, v in options.items() if k not in _SAM1_ONLY}
    if files.model == "sam3":
        from vitdeploy.runtime.apps.sam3.interactive import Sam3InteractivePredictor

        return Sam3InteractivePredictor(encoder, decoder, **kept)
    from vitdeploy.runtime.apps.sam2.image_predictor import Sam2ImagePredictor

    return Sam2ImagePredictor(encoder, decoder, **kept)


def image_encoder_for(encoder: Any) -> Callable[[np.ndarray], dict[str, np.ndarray]]:
    """The encoder half of the pair's predictor, for an open encoder Runner of checked files: an HxWx3 uint8 RGB
    picture -> its features by name, as the predictor's ``set_image`` computes them and its ``set_image_features``
    takes them."""
    if prompt_files(encoder).model in ("sam2", "sam3"):
        from vitdeploy.runtime.apps.sam2.image_predictor import Sam2ImageEncoder

        return Sam2ImageEncoder(encoder)
    from vitdeploy.runtime.apps.sam.embeddings import SamEmbedder

    return SamEmbedder(encoder)


def prompt_predictor_of(model: OpenModel):
    """The pair's predictor on the runners of checked files (a server's: its decoder side answers prompts on the
    features its encoder side computed), by the model the files make; nothing is checked again."""
    if model.fileset.model == "sam3":
        from vitdeploy.runtime.apps.sam3.interactive import Sam3InteractivePredictor

        return Sam3InteractivePredictor.of_open(model)
    if model.fileset.model == "sam2":
        from vitdeploy.runtime.apps.sam2.image_predictor import Sam2ImagePredictor

        return Sam2ImagePredictor.of_open(model)
    from vitdeploy.runtime.apps.sam.predictor import SamPredictor

    return SamPredictor.of_open(model)


def prompt_predictor_for(decoder: Any, encoder_metadata: dict[str, Any], plan: ModelPlan | None = None):
    """The decoder half of the pair's predictor: a predictor with no encoder, answering ``predict`` on features given
    to ``set_image_features``. ``decoder``: an open Runner (or a path), checked with the encoder file's metadata as the
    pair's predictor checks them; or None with the ``plan`` made from checked files (nothing checked again)."""
    files = prompt_files(encoder_metadata)
    if files.model == "sam3":
        from vitdeploy.runtime.apps.sam3.interactive import Sam3InteractivePredictor

        return Sam3InteractivePredictor.decoder_only(decoder, encoder_metadata, plan=plan)
    if files.model == "sam2":
        from vitdeploy.runtime.apps.sam2.image_predictor import Sam2ImagePredictor

        return Sam2ImagePredictor.decoder_only(decoder, encoder_metadata, plan=plan)
    from vitdeploy.runtime.apps.sam.predictor import SamPredictor

    return SamPredictor.decoder_only(decoder, encoder_metadata, plan=plan)


def open_video_predictor(encoder: FileRef, decoder: FileRef, memory_encoder: FileRef, memory_attention: FileRef, *,
                         fill_hole_area: int | None = None, **options: Any):
    """The video predictor for four exported files: SAM 3's tracker (:class:`Sam3TrackerPredictor`) for SAM 3's
    vision encoder, else :class:`Sam2VideoPredictor` (whose check refuses any other model's files, naming them).
    ``fill_hole_area`` None: the official default of each (8 for SAM 2, 0 for SAM 3)."""
    metadata = file_metadata(encoder)
    model = model_part(metadata)[0] if metadata is not None else None
    settings = {} if fill_hole_area is None else {"fill_hole_area": fill_hole_area}
    if model == "sam3":
        from vitdeploy.runtime.apps.sam3.tracker_predictor import Sam3TrackerPredictor

        return Sam3TrackerPredictor(encoder, decoder, memory_encoder, memory_attention, **options, **settings)
    from vitdeploy.runtime.apps.sam2.video_predictor import Sam2VideoPredictor

    return Sam2VideoPredictor(encoder, decoder, memory_encoder, memory_attention, **options, **settings)


__all__ = ["image_encoder_for", "open_sam_predictor", "open_video_predictor", "prompt_files", "prompt_predictor_of",
           "prompt_predictor_for"]
