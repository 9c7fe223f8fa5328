"""Model inputs from image files, through the model's own preprocessing (read from its metadata)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from vitdeploy.runtime.images import expand_image_paths, read_image_rgb
from vitdeploy.runtime.preprocess import SamPreprocessor, TimmPreprocessor
from vitdeploy.validation.validate import InputSet


def image_input_sets(paths: Iterable[str | Path], metadata: dict[str, Any], input_name: str) -> list[InputSet]:
    """One InputSet per image, preprocessed as the model's metadata says (SAM: resize, normalize, pad)."""
    files = expand_image_paths(paths)
    if not files:
        return []
    if metadata.get("family") == "timm_vit":
        prep = TimmPreprocessor(metadata["data_config"])  # timm's own eval transform, from the metadata
    else:
        prep = SamPreprocessor(int(metadata["input_size"][0]), metadata["pixel_mean"], metadata["pixel_std"])
    return [InputSet(f"image:{f.name}", {input_name: prep(read_image_rgb(f))}, str(f)) for f in files]
