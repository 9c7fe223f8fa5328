"""The predictor for a pair of deployed files: the one place that picks among the models' predictors."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

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
    if (model == "sam3" and Path(decoder).suffix.lower() == ".onnx"
            and model_part(read_onnx_metadata(decoder)) != ("sam3", "interactive_decoder")):
        from vitdeploy.runtime.apps.sam.predictor import SAM3_HERE

        raise InputError(f"'{Path(encoder).name}' is {SAM3_HERE}")
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


__all__ = ["open_sam_predictor"]
