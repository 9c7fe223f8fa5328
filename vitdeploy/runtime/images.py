"""Image reading with errors for people."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np

from vitdeploy.errors import InputError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp")


#: PIL modes holding more than 8 bits per sample (16-bit PNG/TIFF, 32-bit integer or float images).
WIDE_MODES = ("I;16", "I;16B", "I;16L", "I;16N", "I", "F")


def upright(img):
    """``img`` turned as its EXIF orientation says (phone photos are stored sideways and tagged)."""
    from PIL import ImageOps

    return ImageOps.exif_transpose(img)


def to_rgb8(img, notes: list[str] | None = None) -> np.ndarray:
    """HxWx3 uint8 RGB of a PIL image, upright. Images of more than 8 bits (16-bit medical/scientific PNGs)
    are scaled from their own min..max to 0..255, with a note: ``convert("RGB")`` would clip them to white."""
    img = upright(img)
    if img.mode in WIDE_MODES:
        values = np.asarray(img, dtype=np.float64)
        lo, hi = float(values.min()), float(values.max())
        scaled = np.zeros(values.shape, np.uint8) if hi <= lo else np.round((values - lo) * (255.0 / (hi - lo))).astype(np.uint8)
        if notes is not None:
            notes.append(f"{img.mode} image with values {lo:g}..{hi:g} scaled to 8 bits (its own min..max -> 0..255)")
        return np.repeat(scaled[:, :, None], 3, axis=2)
    return np.asarray(img.convert("RGB"), dtype=np.uint8).copy()


def read_image_rgb(path: str | Path, notes: list[str] | None = None) -> np.ndarray:
    """Read an image file as an HxWx3 uint8 RGB array, upright (EXIF orientation applied).

    ``notes`` (when given) gets a line for every conversion a user should know of (bit depth).
    """
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    if not path.is_file():
        raise InputError(f"image '{path}' not found: check the path")
    try:
        with Image.open(path) as img:
            return to_rgb8(img, notes)
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise InputError(f"image '{path}' cannot be decoded ({exc.__class__.__name__}): use a valid JPEG/PNG/WebP file") from exc


def images_in_folder(folder: str | Path, hint: str) -> list[Path]:
    """The files of ``folder`` with an image suffix, sorted (not recursive); InputError ending in ``hint`` if none."""
    folder = Path(folder)
    found = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if not found:
        raise InputError(f"folder '{folder}' holds no images ({', '.join(IMAGE_SUFFIXES)}): {hint}")
    return found


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
            out.extend(images_in_folder(path, "point --images at a folder of photos"))
        elif path.is_file():
            out.append(path)
        else:
            raise InputError(f"{what} '{path}' not found: check --images")
    return out
