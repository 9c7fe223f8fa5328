"""Image reading with errors for people."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vitdeploy.errors import InputError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp")


def read_image_rgb(path: str | Path) -> np.ndarray:
    """Read an image file as an HxWx3 uint8 RGB array."""
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    if not path.is_file():
        raise InputError(f"image '{path}' not found: check the path")
    try:
        with Image.open(path) as img:
            return np.asarray(img.convert("RGB"), dtype=np.uint8).copy()
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise InputError(f"image '{path}' cannot be decoded ({exc.__class__.__name__}): use a valid JPEG/PNG/WebP file") from exc
