"""The predictor for a pair of deployed files: the one place that picks among the models' predictors."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from vitdeploy.errors import InputError
from vitdeploy.families import model_part


def open_sam_predictor(encoder: str | os.PathLike, decoder: str | os.PathLike, **options: Any):
    """The predictor for a pair of exported files: :class:`Sam2ImagePredictor` for SAM 2 files, else
    :class:`vitdeploy.runtime.SamPredictor` (``options`` are SamPredictor's; the SAM 2 one takes device, threads,
    runtime and inference_precision, and refuses the SAM 1-only ones when set)."""
    from vitdeploy.metadata import read_onnx_metadata
    from vitdeploy.runtime.apps.sam.predictor import SamPredictor
    from vitdeploy.runtime.apps.sam2.image_predictor import Sam2ImagePredictor

    model = model_part(read_onnx_metadata(encoder))[0] if Path(encoder).suffix.lower() == ".onnx" else None
    if model == "sam3":
        from vitdeploy.runtime.apps.sam.predictor import SAM3_HERE

        raise InputError(f"'{Path(encoder).name}' is {SAM3_HERE}")
    if model != "sam2":
        return SamPredictor(encoder, decoder, **options)
    if options.get("tf32") or options.get("allow_unverified") or options.get("check_weights") is False:
        raise InputError("--tf32, --allow-unverified and --no-weight-check are for SAM 1 files: leave them out for SAM 2")
    kept = {k: options[k] for k in ("device", "threads", "runtime", "inference_precision") if k in options}
    return Sam2ImagePredictor(encoder, decoder, **kept)


__all__ = ["open_sam_predictor"]
