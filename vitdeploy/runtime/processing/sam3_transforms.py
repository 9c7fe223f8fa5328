"""SAM 3's image preprocessing in NumPy (no torch): ``sam3.model.sam3_image_processor.Sam3Processor.transform``.

``v2.ToDtype(uint8) -> v2.Resize((S, S)) -> v2.ToDtype(float32, scale=True) -> v2.Normalize(0.5, 0.5)``. Unlike SAM 2
(which resizes floats), SAM 3 resizes the **uint8** image: PyTorch's uint8 antialiased bilinear kernel (ported from
Pillow-SIMD), which quantizes each axis's filter weights to int16 with the most fractional bits that keep the largest
weight below 2^15, resizes the width first and rounds to uint8, then the height (the same rounding). Pillow's own
resize differs from it by one level on up to a quarter of the pixels; this module gives PyTorch's bytes exactly
(tests compare them with torchvision's, up- and down-scaling).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from vitdeploy.runtime.processing.sam2_transforms import antialias_bilinear_matrix

#: PyTorch's limit on the weights' fractional bits (``_compute_index_ranges_int16_weights``).
MAX_PRECISION = 22


@lru_cache(maxsize=32)
def int16_taps(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(input index per output and tap (out, K), int16 weight per output and tap (out, K) as int32, precision bits)."""
    weights = antialias_bilinear_matrix(in_size, out_size)
    largest = float(weights.max())
    precision = 0
    while precision < MAX_PRECISION and int(0.5 + largest * (1 << (precision + 1))) < (1 << 15):
        precision += 1
    scaled = weights * (1 << precision)
    quantized = np.trunc(np.where(scaled < 0, scaled - 0.5, scaled + 0.5)).astype(np.int32)  # C's (int16_t) cast
    nonzero = weights != 0
    taps = int(nonzero.sum(axis=1).max())
    first = np.minimum(nonzero.argmax(axis=1), in_size - taps)  # a window of `taps` inputs that holds every weight
    index = first[:, None] + np.arange(taps)[None]
    return index, np.take_along_axis(quantized, index, axis=1), precision


def _resize_axis(image: np.ndarray, axis: int, out_size: int) -> np.ndarray:
    index, weights, precision = int16_taps(image.shape[axis], out_size)
    shape = list(image.shape)
    shape[axis] = out_size
    acc = np.full(shape, 1 << (precision - 1), np.int32)  # + half: round to nearest
    view = [1] * image.ndim
    view[axis] = out_size
    for tap in range(index.shape[1]):
        acc += np.take(image, index[:, tap], axis=axis) * weights[:, tap].reshape(view)
    return np.clip(acc >> precision, 0, 255).astype(np.uint8)


def resize_uint8_antialiased(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """HxWxC uint8 -> size[0] x size[1] x C uint8, byte for byte PyTorch's ``interpolate(uint8, "bilinear",
    antialias=True)`` (torchvision's ``Resize`` of a uint8 image): the width, then the height, each rounded."""
    out = np.asarray(image, np.uint8)
    if out.shape[1] != size[1]:
        out = _resize_axis(out, 1, int(size[1]))
    if out.shape[0] != size[0]:
        out = _resize_axis(out, 0, int(size[0]))
    return out


@dataclass(frozen=True)
class Sam3Preprocessor:
    """SAM 3's image preprocessing in the two steps calibration and ``validate --images`` use: ``resize`` (HxWx3 uint8
    -> (3, S, S) float32 in [0, 1]: the uint8 resize, then ``ToDtype(float32, scale=True)``) and
    ``normalize_and_pad`` (-> (1, 3, S, S); nothing to pad: the resize is square). ``input_size`` is S."""

    input_size: int
    pixel_mean: tuple[float, ...]
    pixel_std: tuple[float, ...]

    def resize(self, image: np.ndarray) -> np.ndarray:
        resized = resize_uint8_antialiased(image, (self.input_size, self.input_size))
        return resized.transpose(2, 0, 1).astype(np.float32) * np.float32(1.0 / 255)

    def normalize_and_pad(self, resized: np.ndarray) -> np.ndarray:
        mean = (np.asarray(self.pixel_mean, np.float32) / np.float32(255.0)).reshape(3, 1, 1)
        std = (np.asarray(self.pixel_std, np.float32) / np.float32(255.0)).reshape(3, 1, 1)
        return ((resized - mean) / std).astype(np.float32)[None]

    def __call__(self, image: np.ndarray) -> np.ndarray:
        return self.normalize_and_pad(self.resize(image))


__all__ = ["Sam3Preprocessor", "int16_taps", "resize_uint8_antialiased"]
