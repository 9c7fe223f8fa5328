"""SAM 2's image transforms and mask post-processing in NumPy (no torch): ``sam2.utils.transforms.SAM2Transforms``.

* The image: ``ToTensor`` (HxWx3 uint8 -> 3xHxW float32 in [0, 1]), torchvision's ``Resize((S, S))`` (the aspect
  ratio is not kept: bilinear with antialiasing, PyTorch's ``_upsample_bilinear2d_aa`` filter), ``Normalize``.
* Prompts: pixels of the original image -> the S x S input frame (``transform_coords``/``transform_boxes``).
* Masks: the decoder's 4h x 4w logits -> the original size (``postprocess_masks``: bilinear, ``align_corners=False``,
  no antialiasing), after the optional clean-up of the low-resolution logits: background regions (<= the threshold,
  8-connected) of at most ``max_hole_area`` pixels become foreground (threshold + 10), foreground regions of at most
  ``max_sprinkle_area`` pixels background (threshold - 10); 0 (off) by default, as the official. The official
  needs its CUDA extension (SAM 2) or scikit-image (SAM 3's CPU path) for the connected components and skips the
  step with a warning without them; here they need SciPy, and the step is skipped with a warning without it.

Each resize is separable and linear, so it is one banded (out, in) matrix per axis, built once per size and applied
as its taps.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from vitdeploy.runtime.processing.postprocess import AxisTaps, bilinear_matrix, resize_by_taps


@lru_cache(maxsize=32)
def antialias_bilinear_matrix(in_size: int, out_size: int) -> np.ndarray:
    """(out_size, in_size) weights of PyTorch's antialiased bilinear resize along one axis (``antialias=True``).

    PyTorch's ``_compute_indices_min_size_weights_aa`` with the triangle filter: the filter is widened by the scale
    when shrinking (support = scale), each output's taps span ``[center - support, center + support]`` clipped to
    the input and are normalised to sum 1. When enlarging it is plain bilinear with clamped edges.
    """
    scale = in_size / out_size
    support = scale if scale >= 1.0 else 1.0
    invscale = 1.0 / scale if scale >= 1.0 else 1.0
    out = np.zeros((out_size, in_size), dtype=np.float64)
    for i in range(out_size):
        center = scale * (i + 0.5)
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), in_size)
        taps = np.arange(lo, hi)
        weights = np.maximum(0.0, 1.0 - np.abs((taps - center + 0.5) * invscale))
        total = weights.sum()
        if total > 0:
            out[i, lo:hi] = weights / total
    return out


class Sam2Transforms:
    """The official transforms for a ``resolution`` x ``resolution`` encoder (see the module docstring)."""

    def __init__(self, resolution: int, pixel_mean, pixel_std, mask_threshold: float = 0.0, max_hole_area: float = 0.0,
                 max_sprinkle_area: float = 0.0):
        self.resolution = int(resolution)
        self.mean = (np.asarray(pixel_mean, np.float32) / np.float32(255.0)).reshape(3, 1, 1)
        self.std = (np.asarray(pixel_std, np.float32) / np.float32(255.0)).reshape(3, 1, 1)
        self.mask_threshold = mask_threshold
        self.max_hole_area, self.max_sprinkle_area = float(max_hole_area), float(max_sprinkle_area)

    def __call__(self, image: np.ndarray) -> np.ndarray:
        """HxWx3 uint8 RGB -> (3, S, S) float32, normalized."""
        x = image.astype(np.float32).transpose(2, 0, 1) / np.float32(255.0)  # ToTensor
        resized = resize_bilinear(x, (self.resolution, self.resolution), antialias=True)  # Resize((S, S))
        return ((resized - self.mean) / self.std).astype(np.float32)

    def transform_coords(self, coords: np.ndarray, normalize: bool, orig_hw: tuple[int, int]) -> np.ndarray:
        """Pixels (``normalize``) or [0, 1] coordinates -> the S x S input frame, as float32."""
        coords = np.asarray(coords, dtype=np.float32).copy()
        if normalize:
            height, width = orig_hw
            coords[..., 0] = coords[..., 0] / np.float32(width)
            coords[..., 1] = coords[..., 1] / np.float32(height)
        return coords * np.float32(self.resolution)

    def transform_boxes(self, boxes: np.ndarray, normalize: bool, orig_hw: tuple[int, int]) -> np.ndarray:
        """XYXY boxes -> (B, 2, 2) corners in the input frame."""
        return self.transform_coords(np.asarray(boxes, dtype=np.float32).reshape(-1, 2, 2), normalize, orig_hw)

    def postprocess_masks(self, low_res: np.ndarray, orig_hw: tuple[int, int]) -> np.ndarray:
        """(..., 4h, 4w) logits -> (..., H, W) logits at the original size (float32), small holes and sprinkles
        removed first where ``max_hole_area``/``max_sprinkle_area`` ask for it."""
        masks, threshold = np.asarray(low_res, np.float32), float(self.mask_threshold)
        background = masks <= threshold  # both regions from the decoder's logits, as the official labels them
        if self.max_hole_area > 0:
            masks = replace_small_regions(masks, background, self.max_hole_area, threshold + 10.0)
        if self.max_sprinkle_area > 0:
            masks = replace_small_regions(masks, ~background, self.max_sprinkle_area, threshold - 10.0)
        return resize_bilinear(masks, orig_hw, antialias=False)


def replace_small_regions(scores: np.ndarray, region: np.ndarray, max_area: float, value: float) -> np.ndarray:
    """``scores`` (..., H, W) with every 8-connected component of ``region`` of at most ``max_area`` pixels set to
    ``value``, per (H, W) mask (the official ``connected_components`` then ``areas <= max_area``). Without SciPy: the
    scores unchanged and a warning, as the official without its connected-components backend."""
    try:
        from scipy import ndimage
    except ImportError:
        warnings.warn("removing small mask regions (max_hole_area, max_sprinkle_area, fill_hole_area) needs SciPy "
                      "(pip install scipy): skipped, as the official skips it without its connected-components backend",
                      stacklevel=3)
        return scores
    out = np.array(scores, dtype=np.float32, copy=True)
    flat, where = out.reshape(-1, *out.shape[-2:]), np.asarray(region, bool).reshape(-1, *out.shape[-2:])
    eight = np.ones((3, 3), dtype=bool)
    for mask, inside in zip(flat, where):
        labels, count = ndimage.label(inside, structure=eight)
        if count == 0:
            continue
        small = np.bincount(labels.ravel()) <= max_area
        small[0] = False  # label 0 is outside the region
        mask[small[labels]] = value
    return out


@dataclass(frozen=True)
class Sam2Preprocessor:
    """SAM 2's image preprocessing in the two steps calibration and ``validate --images`` use: ``resize`` (HxWx3 uint8
    -> (3, S, S) float32 in [0, 1], the square antialiased resize) and ``normalize_and_pad`` (-> (1, 3, S, S),
    normalized; nothing to pad: the resize is square). ``input_size`` is S."""

    input_size: int
    pixel_mean: tuple[float, ...]
    pixel_std: tuple[float, ...]

    def _transforms(self) -> Sam2Transforms:
        return Sam2Transforms(self.input_size, self.pixel_mean, self.pixel_std)

    def resize(self, image: np.ndarray) -> np.ndarray:
        x = image.astype(np.float32).transpose(2, 0, 1) / np.float32(255.0)
        return resize_bilinear(x, (self.input_size, self.input_size), antialias=True)

    def normalize_and_pad(self, resized: np.ndarray) -> np.ndarray:
        t = self._transforms()
        return ((resized - t.mean) / t.std).astype(np.float32)[None]

    def __call__(self, image: np.ndarray) -> np.ndarray:
        return self.normalize_and_pad(self.resize(image))


@lru_cache(maxsize=32)
def _axis_taps(in_size: int, out_size: int, antialias: bool) -> AxisTaps:
    matrix = antialias_bilinear_matrix(in_size, out_size) if antialias else bilinear_matrix(in_size, out_size)
    return AxisTaps.from_matrix(matrix.astype(np.float32))


def resize_bilinear(x: np.ndarray, size: tuple[int, int], antialias: bool,
                    finish: Callable[[np.ndarray], Any] | None = None) -> np.ndarray:
    """(..., h, w) -> (..., H, W) float32: PyTorch's ``F.interpolate(mode="bilinear", align_corners=False)``, with
    ``antialias`` as it takes it (the same array back when the size is already right); ``finish`` is applied in
    place to the result, block by block while each is in cache (a sigmoid).

    Each axis is its banded matrix applied as its taps (2 per output without antialiasing) by SAM's mask upscaler's
    :func:`~vitdeploy.runtime.processing.postprocess.resize_by_taps`: as two dense matrix products, 200 of SAM 3's
    288x288 mask logits to an 1800x1200 photograph were 144 times the arithmetic (1.80 s against 1.26 s)."""
    if x.shape[-2:] == tuple(size):
        if finish is None:
            return np.asarray(x, np.float32)
        same = np.array(x, np.float32)
        finish(same)
        return same
    height, width = int(size[0]), int(size[1])
    rows, cols = _axis_taps(x.shape[-2], height, antialias), _axis_taps(x.shape[-1], width, antialias)
    out = resize_by_taps(np.asarray(x).reshape(-1, *x.shape[-2:]), rows, cols, finish)
    return out.reshape(*x.shape[:-2], height, width)


__all__ = ["Sam2Preprocessor", "Sam2Transforms", "antialias_bilinear_matrix", "replace_small_regions", "resize_bilinear"]
