"""SAM prompt transforms and mask post-processing in NumPy (no torch).

Numerically the official pipeline: ``ResizeLongestSide.apply_coords``/``apply_boxes`` for prompts and
``Sam.postprocess_masks`` for masks (bilinear ``F.interpolate`` to the encoder's input size, crop the
padding, bilinear ``F.interpolate`` to the original size, ``align_corners=False`` both times).

Both resizes and the crop are linear maps along each axis, so they are composed once per image into
one small tap table per axis (at most a few low-resolution taps per output pixel): upscaling a mask is
then two gathers proportional to the output size, with no 1024x1024 intermediate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from vitdeploy.runtime.processing.preprocess import preprocess_shape


def bilinear_matrix(in_size: int, out_size: int) -> np.ndarray:
    """(out_size, in_size) matrix of PyTorch's bilinear resize along one axis (``align_corners=False``).

    Mirrors ``area_pixel_compute_source_index`` in float32, as PyTorch computes it for float tensors:
    source = (dst + 0.5) * (in / out) - 0.5, clamped at 0; the upper neighbour is clamped at the last
    index. (In float64 the source positions of a 1024 -> 300 resize differ by up to 2e-4 pixel.)
    """
    if in_size <= 0 or out_size <= 0:
        raise ValueError(f"sizes must be positive, got {in_size} -> {out_size}")
    half = np.float32(0.5)
    scale = np.float32(in_size) / np.float32(out_size)
    src = np.maximum(scale * (np.arange(out_size, dtype=np.float32) + half) - half, np.float32(0.0))
    lo = np.minimum(src.astype(np.int64), in_size - 1)
    hi = np.minimum(lo + 1, in_size - 1)
    frac = np.clip(src - lo.astype(np.float32), np.float32(0.0), np.float32(1.0)).astype(np.float64)
    out = np.zeros((out_size, in_size), dtype=np.float64)
    rows = np.arange(out_size)
    np.add.at(out, (rows, lo), 1.0 - frac)
    np.add.at(out, (rows, hi), frac)
    return out


@dataclass(frozen=True)
class AxisTaps:
    """A banded (out, in) matrix as per-row taps: ``out[i] = sum_t weight[i, t] * x[index[i, t]]``."""

    index: np.ndarray  # out, T int64
    weight: np.ndarray  # out, T float32

    @classmethod
    def from_matrix(cls, matrix: np.ndarray) -> AxisTaps:
        nonzero = matrix != 0.0
        taps = max(1, int(nonzero.sum(axis=1).max()))
        order = np.argsort(~nonzero, axis=1, kind="stable")[:, :taps]  # nonzero columns first, in order
        weight = np.take_along_axis(matrix, order, axis=1)
        return cls(index=order.astype(np.int64), weight=weight.astype(np.float32))


@dataclass(frozen=True)
class MaskUpscaler:
    """Low-resolution mask logits (K, h, w) -> logits in the original image size (K, H, W)."""

    rows: AxisTaps
    cols: AxisTaps
    original_size: tuple[int, int]

    @classmethod
    def for_image(cls, low_res_hw: tuple[int, int], input_size: int, original_size: tuple[int, int]) -> MaskUpscaler:
        """Compose upscale-to-``input_size``, crop to the resized image, resize to ``original_size``."""
        height, width = original_size
        resized_h, resized_w = preprocess_shape(height, width, input_size)
        rows = bilinear_matrix(resized_h, height) @ bilinear_matrix(low_res_hw[0], input_size)[:resized_h]
        cols = bilinear_matrix(resized_w, width) @ bilinear_matrix(low_res_hw[1], input_size)[:resized_w]
        return cls(AxisTaps.from_matrix(rows), AxisTaps.from_matrix(cols), (int(height), int(width)))

    def __call__(self, low_res: np.ndarray) -> np.ndarray:
        """(K, h, w) float -> (K, H, W) float32 logits."""
        return resize_by_taps(low_res, self.rows, self.cols)


def resize_by_taps(x: np.ndarray, rows: AxisTaps, cols: AxisTaps,
                   finish: Callable[[np.ndarray], Any] | None = None) -> np.ndarray:
    """(K, h, w) -> (K, H, W) float32 by each axis's taps: columns first, on the small array; then rows, gathering
    whole contiguous rows of the output width (a gather along the last axis of the large array is several times
    slower); ``finish`` as :func:`gather_rows` takes it."""
    low = np.ascontiguousarray(np.asarray(x, dtype=np.float32).transpose(0, 2, 1))  # K, w, h
    wide = np.ascontiguousarray(gather_rows(low, cols).transpose(0, 2, 1))  # K, h, W
    return gather_rows(wide, rows, finish)  # K, H, W


def gather_rows(x: np.ndarray, taps: AxisTaps, finish: Callable[[np.ndarray], Any] | None = None,
                block_bytes: int = 1 << 18) -> np.ndarray:
    """``out[:, i, :] = sum_t weight[i, t] * x[:, index[i, t], :]`` for a (K, n, m) array; ``finish`` (if given) is
    applied in place to each finished block of ``out`` while it is in cache (SAM 3's sigmoid of its masks).

    Works on blocks of about ``block_bytes`` (a few instances by a few output rows) so the scratch stays in cache:
    16 rows of every instance at once was 2.3x faster than whole-array passes for 3 SAM masks of a 1500x2250 image,
    but 200 of SAM 3's masks made each block 23 MB; and ``np.take(mode="clip")``, which writes ``out`` directly
    (the default mode buffers it; every index is in range by construction).
    """
    count, rows, width = x.shape[0], taps.index.shape[0], x.shape[2]
    row_bytes = width * 4
    per_block = max(1, min(count, block_bytes // (row_bytes * 8)))  # instances per block, at least 8 rows each
    rows_per_block = max(1, min(rows, block_bytes // (row_bytes * per_block)))
    out = np.empty((count, rows, width), dtype=np.float32)
    scratch = np.empty((per_block, rows_per_block, width), dtype=np.float32)
    for first in range(0, count, per_block):
        source = x[first:first + per_block]
        for start in range(0, rows, rows_per_block):
            stop = min(rows, start + rows_per_block)
            block = out[first:first + per_block, start:stop]
            tmp = scratch[: block.shape[0], : stop - start]
            np.take(source, taps.index[start:stop, 0], axis=1, out=tmp, mode="clip")
            np.multiply(tmp, taps.weight[start:stop, 0, None], out=block)
            for t in range(1, taps.index.shape[1]):
                np.take(source, taps.index[start:stop, t], axis=1, out=tmp, mode="clip")
                tmp *= taps.weight[start:stop, t, None]
                block += tmp
            if finish is not None:
                finish(block)
    return out
