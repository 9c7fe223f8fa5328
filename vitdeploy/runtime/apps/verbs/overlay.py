"""Mask pictures for people: a binary mask PNG and the mask blended over the image, with the prompts drawn."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from vitdeploy.fileio import atomic_output

MASK_COLOR = (30, 144, 255)  # the blue of the official notebooks
FOREGROUND_COLOR = (0, 200, 0)
BACKGROUND_COLOR = (220, 0, 0)
BOX_COLOR = (255, 200, 0)


def overlay_mask(
    image: np.ndarray,
    mask: np.ndarray,
    *,
    alpha: float = 0.5,
    color: Sequence[int] = MASK_COLOR,
    points: np.ndarray | None = None,
    labels: np.ndarray | None = None,
    box: np.ndarray | None = None,
) -> np.ndarray:
    """HxWx3 uint8 image with ``mask`` (H, W) blended in ``color``; points (green 1 / red 0) and box drawn."""
    from PIL import Image, ImageDraw

    out = image.astype(np.float32)
    tint = np.asarray(color, dtype=np.float32)
    m = np.asarray(mask, dtype=bool)
    out[m] = (1.0 - alpha) * out[m] + alpha * tint
    picture = Image.fromarray(np.clip(out + 0.5, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(picture)
    radius = max(2, round(0.01 * max(image.shape[:2])))
    if box is not None:
        x0, y0, x1, y1 = (float(v) for v in np.asarray(box).reshape(-1)[:4])
        draw.rectangle([x0, y0, x1, y1], outline=BOX_COLOR, width=max(1, radius // 2))
    if points is not None:
        labs = np.ones(len(points)) if labels is None else np.asarray(labels).reshape(-1)
        for (x, y), lab in zip(np.asarray(points, dtype=np.float64), labs):
            fill = FOREGROUND_COLOR if lab == 1 else BACKGROUND_COLOR
            draw.ellipse([x - radius, y - radius, x + radius, y + radius], fill=fill, outline=(255, 255, 255))
    return np.asarray(picture)


def overlay_masks(image: np.ndarray, masks: Sequence[np.ndarray], *, alpha: float = 0.45, seed: int = 0) -> np.ndarray:
    """HxWx3 uint8 image with every mask blended in its own seeded random color, largest first (small masks stay visible)."""
    out = image.astype(np.float32)
    colors = np.random.default_rng(seed).integers(40, 256, (len(masks), 3)).astype(np.float32)
    for k in sorted(range(len(masks)), key=lambda i: -int(np.count_nonzero(masks[i]))):
        m = np.asarray(masks[k], dtype=bool)
        out[m] = (1.0 - alpha) * out[m] + alpha * colors[k]
    return np.clip(out + 0.5, 0, 255).astype(np.uint8)


def save_png(array: np.ndarray, path: str | os.PathLike) -> Path:
    """Write an HxW bool/uint8 or HxWx3 uint8 array as PNG, atomically (bool masks become 0/255)."""
    from PIL import Image

    arr = np.asarray(array)
    if arr.dtype == np.bool_:
        arr = arr.astype(np.uint8) * 255
    with atomic_output(path) as tmp:
        Image.fromarray(arr).save(tmp, format="PNG")
    return Path(path)
