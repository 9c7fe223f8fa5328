"""Model inputs from image files, through the model's own preprocessing (read from its metadata)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from vitdeploy.errors import InputError
from vitdeploy.runtime.images import IMAGE_SUFFIXES, read_image_rgb
from vitdeploy.runtime.preprocess import SamPreprocessor, TimmPreprocessor
from vitdeploy.validation.validate import InputSet


def expand_image_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Files as given; folders expanded to their image files (sorted)."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
            if not found:
                raise InputError(f"folder '{path}' holds no images ({', '.join(IMAGE_SUFFIXES)})")
            out.extend(found)
        elif path.exists():
            out.append(path)
        else:
            raise InputError(f"image path '{path}' not found: check --images")
    return out


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
