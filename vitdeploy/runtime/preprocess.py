"""SAM preprocessing in NumPy: resize the longest side, normalize, pad bottom/right to a square.

Numerically the official pipeline: ``ResizeLongestSide.apply_image`` (PIL bilinear resize through
torchvision's ``to_pil_image``/``resize``) followed by ``Sam.preprocess`` (normalize, then zero-pad).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vitdeploy.errors import InputError


def preprocess_shape(old_h: int, old_w: int, long_side: int) -> tuple[int, int]:
    """Output (h, w) for a longest side of ``long_side`` (``ResizeLongestSide.get_preprocess_shape``)."""
    scale = long_side * 1.0 / max(old_h, old_w)
    return int(old_h * scale + 0.5), int(old_w * scale + 0.5)


@dataclass(frozen=True)
class SamPreprocessor:
    """Image -> normalized, padded (1, 3, S, S) float32 model input."""

    input_size: int
    pixel_mean: Sequence[float]
    pixel_std: Sequence[float]

    def resize(self, image: np.ndarray) -> np.ndarray:
        """HxWx3 uint8 -> resized hxwx3 uint8 with the longest side equal to ``input_size``."""
        from PIL import Image

        check_rgb_uint8(image)
        h, w = preprocess_shape(image.shape[0], image.shape[1], self.input_size)
        # torchvision's resize on a PIL image is PIL's bilinear resize with (w, h) order.
        return np.asarray(Image.fromarray(image).resize((w, h), Image.BILINEAR))

    def normalize_and_pad(self, resized: np.ndarray) -> np.ndarray:
        """hxwx3 uint8 -> (1, 3, S, S) float32: normalized, zero-padded bottom/right."""
        mean = np.asarray(self.pixel_mean, dtype=np.float32)
        std = np.asarray(self.pixel_std, dtype=np.float32)
        x = (resized.astype(np.float32) - mean) / std  # h, w, 3
        h, w = x.shape[:2]
        out = np.zeros((1, 3, self.input_size, self.input_size), dtype=np.float32)
        out[0, :, :h, :w] = x.transpose(2, 0, 1)
        return out

    def __call__(self, image: np.ndarray) -> np.ndarray:
        return self.normalize_and_pad(self.resize(image))


def check_rgb_uint8(image: object) -> None:
    """Raise InputError unless ``image`` is an HxWx3 uint8 array."""
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        desc = f"{image.dtype} array of shape {image.shape}" if isinstance(image, np.ndarray) else type(image).__name__
        raise InputError(f"expected an HxWx3 uint8 RGB image, got a {desc}: convert it with np.asarray(img.convert('RGB'))")
    if image.shape[0] == 0 or image.shape[1] == 0:
        raise InputError(f"image has an empty side ({image.shape[0]}x{image.shape[1]})")
