"""The predictor for a pair of deployed files: the one place that picks among the models' predictors (and their
halves, for a server whose encoder and decoder run apart)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from vitdeploy.errors import InputError
from vitdeploy.families import model_part


def open_sam_predictor(encoder: str | os.PathLike, decoder: str | os.PathLike, *, for_generator: bool = False,
                       **options: Any):
    """The predictor for a pair of exported files: :class:`Sam2ImagePredictor` for SAM 2 files,
    :class:`Sam3InteractivePredictor` for SAM 3's vision encoder and interactive decoder, else
    :class:`vitdeploy.runtime.SamPredictor` (``options`` are SamPredictor's; the SAM 2 and SAM 3 ones take device,
    threads, runtime and inference_precision, and refuse the SAM 1-only ones when set). ``for_generator``: the
    predictor is for the automatic mask generator, which SAM 3 does not have. Every refusal comes before a file is
    opened (and probed)."""
    from vitdeploy.metadata import read_onnx_metadata
    from vitdeploy.runtime.apps.sam.predictor import SamPredictor
    from vitdeploy.runtime.apps.sam2.image_predictor import Sam2ImagePredictor

    model = model_part(read_onnx_metadata(encoder))[0] if Path(encoder).suffix.lower() == ".onnx" else None
    if model == "sam3" and for_generator:
        raise InputError(f"'{Path(encoder).name}' is a SAM 3 file, and SAM 3 has no automatic mask generator (the "
                         "official package has none to match): find every instance of a concept with 'vitdeploy "
                         "segment-concept' (vitdeploy.runtime.Sam3Processor), or use SAM (1) or SAM 2 files here")
    if model == "sam3" and _is_onnx_file(decoder):
        _check_sam3_decoder(Path(encoder).name, read_onnx_metadata(decoder))
    if model not in ("sam2", "sam3"):
        return SamPredictor(encoder, decoder, **options)
    if options.get("tf32") or options.get("allow_unverified") or options.get("check_weights") is False:
        raise InputError(f"--tf32, --allow-unverified and --no-weight-check are for SAM 1 files: leave them out for "
                         f"{'SAM 2' if model == 'sam2' else 'SAM 3'}")
    kept = {k: options[k] for k in ("device", "threads", "runtime", "inference_precision") if k in options}
    if model == "sam3":
        from vitdeploy.runtime.apps.sam3.interactive import Sam3InteractivePredictor

        return Sam3InteractivePredictor(encoder, decoder, **kept)
    return Sam2ImagePredictor(encoder, decoder, **kept)


#: (model, part) of the image encoders a prompt predictor takes: SAM's, SAM 2's, SAM 3's vision encoder (its clicks).
PROMPT_ENCODERS = (("sam", "image_encoder"), ("sam2", "image_encoder"), ("sam3", "vision_encoder"))


def check_prompt_pair_files(encoder: Any, decoder: Any) -> None:
    """Raise InputError unless the ``.onnx`` files are an image encoder that prompts run on and its prompt decoder, as
    the pair's predictor checks them (one model, one checkpoint), read from their metadata before either is opened: a
    wrong pair is refused in a second, not after a first-use probe, a compile or a cluster start. A Runner, or a file
    of another format, is checked once open (:func:`prompt_predictor_for`)."""
    if not _is_onnx_file(encoder):
        return
    from vitdeploy.metadata import read_onnx_metadata

    enc, name = read_onnx_metadata(encoder), Path(encoder).name
    _check_prompt_encoder(enc, name)
    if not _is_onnx_file(decoder):
        return
    dec = read_onnx_metadata(decoder)
    model = model_part(enc)[0]
    if model == "sam3":
        from vitdeploy.runtime.apps.sam3.interactive import check_sam3_interactive_pair

        _check_sam3_decoder(name, dec)
        check_sam3_interactive_pair(enc, dec)
    elif model == "sam2":
        from vitdeploy.runtime.apps.sam2.image_predictor import check_sam2_pair

        check_sam2_pair(enc, dec)
    else:
        from vitdeploy.runtime.apps.sam.predictor import check_artifact_pair

        check_artifact_pair(enc, dec)


def check_concept_files(encoder: Any, text_encoder: Any, detector: Any) -> None:
    """Raise InputError unless the ``.onnx`` files are SAM 3's vision encoder, text encoder and detector of one model,
    read from their metadata before any is opened (a Runner is checked once open, by the model it joins)."""
    if not all(_is_onnx_file(p) for p in (encoder, text_encoder, detector)):
        return
    from vitdeploy.metadata import read_onnx_metadata
    from vitdeploy.runtime.apps.sam3.files import check_sam3_files

    check_sam3_files(*(read_onnx_metadata(p) for p in (encoder, text_encoder, detector)))


def _is_onnx_file(path: Any) -> bool:
    return isinstance(path, (str, os.PathLike)) and str(path).lower().endswith(".onnx") and os.path.isfile(path)


def _check_sam3_decoder(encoder_name: str, decoder_metadata: dict[str, Any]) -> None:
    """Beside SAM 3's vision encoder, prompts need its interactive decoder: another decoder is refused saying what
    SAM 3's files are for."""
    if model_part(decoder_metadata) != ("sam3", "interactive_decoder"):
        from vitdeploy.runtime.apps.sam.predictor import SAM3_HERE

        raise InputError(f"'{encoder_name}' is {SAM3_HERE}")


def _check_prompt_encoder(metadata: dict[str, Any], name: str) -> None:
    from vitdeploy.runtime.apps.sam.predictor import SAM3_HERE, check_sam_encoder

    model, part = model_part(metadata)
    if model == "sam3" and part != "vision_encoder":
        raise InputError(f"'{name}' is {SAM3_HERE}")
    if (model, part) not in PROMPT_ENCODERS:
        check_sam_encoder(metadata, f"'{name}'")  # its refusal names what the file is


def image_encoder_for(encoder: Any) -> Callable[[np.ndarray], dict[str, np.ndarray]]:
    """The encoder half of the pair's predictor, for an open encoder Runner: an HxWx3 uint8 RGB picture -> its features
    by name, as the predictor's ``set_image`` computes them and its ``set_image_features`` takes them."""
    _check_prompt_encoder(encoder.metadata, getattr(encoder, "name", "the encoder"))
    if model_part(encoder.metadata)[0] in ("sam2", "sam3"):
        from vitdeploy.runtime.apps.sam2.image_predictor import Sam2ImageEncoder

        return Sam2ImageEncoder(encoder)
    from vitdeploy.runtime.apps.sam.embeddings import SamEmbedder

    return SamEmbedder(encoder)


def prompt_predictor_for(decoder: Any, encoder_metadata: dict[str, Any]):
    """The decoder half of the pair's predictor, for an open decoder Runner and the encoder file's metadata: a
    predictor with no encoder, answering ``predict`` on features given to ``set_image_features`` (the pair checked
    as the predictor's constructor checks it)."""
    _check_prompt_encoder(encoder_metadata, "the encoder")
    model = model_part(encoder_metadata)[0]
    if model == "sam3":
        from vitdeploy.runtime.apps.sam3.interactive import Sam3InteractivePredictor

        return Sam3InteractivePredictor.decoder_only(decoder, encoder_metadata)
    if model == "sam2":
        from vitdeploy.runtime.apps.sam2.image_predictor import Sam2ImagePredictor

        return Sam2ImagePredictor.decoder_only(decoder, encoder_metadata)
    from vitdeploy.runtime.apps.sam.predictor import SamPredictor

    return SamPredictor.decoder_only(decoder, encoder_metadata)


__all__ = ["PROMPT_ENCODERS", "check_concept_files", "check_prompt_pair_files", "image_encoder_for", "open_sam_predictor", "prompt_predictor_for"]
