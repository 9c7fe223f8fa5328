"""Image reading with errors for people."""

from __future__ import annotations

from collections.abc import Iterable
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


def expand_image_paths(paths: Iterable[str | Path], what: str = "image path") -> list[Path]:
    """Image files from files and folders (folders: their files with an image suffix, sorted).

    Args:
        paths: files and folders, as given on the command line.
        what: how the not-found message names a path (e.g. "calibration image path").
    """
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
            if not found:
                raise InputError(f"folder '{path}' holds no images ({', '.join(IMAGE_SUFFIXES)}): "
                                 "point --images at a folder of photos")
            out.extend(found)
        elif path.is_file():
            out.append(path)
        else:
            raise InputError(f"{what} '{path}' not found: check --images")
    return out
