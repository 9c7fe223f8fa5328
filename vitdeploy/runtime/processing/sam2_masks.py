"""SAM 2's video mask arithmetic in NumPy (no torch), each function the official one it names.

* :func:`to_bfloat16` -- ``maskmem_features.to(torch.bfloat16)``: the official video predictor stores every memory
  in bfloat16 (round to nearest even); the memory attention reads it back as float32.
* :func:`fill_holes` -- ``sam2.utils.misc.fill_holes_in_mask_scores``: background regions (scores <= 0) of at most
  ``max_area`` pixels, 8-connected, become 0.1. The official one needs sam2's CUDA extension and silently skips the
  step without it (a warning); here it needs SciPy (``pip install scipy``) and says so when it is missing.
* :func:`non_overlapping` -- ``SAM2Base._apply_non_overlapping_constraints``.
* :func:`resize_mask_input`, :func:`mask_as_output`, :func:`downsample_mask_prompt` -- the mask-prompt path of
  ``add_new_mask`` and ``SAM2Base._use_mask_as_output`` (antialiased bilinear resizes, the +-10 logits, the 4x4
  stride-4 ``mask_downsample`` convolution).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vitdeploy.runtime.processing.sam2_transforms import replace_small_regions, resize_bilinear

#: ``sam2.modeling.sam2_base.NO_OBJ_SCORE``: the mask score of an object that is not there.
NO_OBJ_SCORE = -1024.0
#: ``_use_mask_as_output``: a binary mask becomes logits mask * 20 - 10 (sigmoid(-10) = 4.5e-5).
MASK_OUT_SCALE, MASK_OUT_BIAS = 20.0, -10.0


def to_bfloat16(x: np.ndarray) -> np.ndarray:
    """``x`` rounded to bfloat16 (round to nearest even, as ``tensor.to(torch.bfloat16)``), stored as bfloat16."""
    import ml_dtypes  # onnx's own dependency: there wherever vitdeploy is

    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16)


def fill_holes(mask_scores: np.ndarray, max_area: int) -> np.ndarray:
    """``fill_holes_in_mask_scores``: 8-connected regions of scores <= 0 with at most ``max_area`` pixels get 0.1,
    per (..., H, W) mask. Without SciPy: the scores unchanged and a warning, as the official one without its CUDA
    extension."""
    scores = np.asarray(mask_scores, np.float32)
    return replace_small_regions(scores, scores <= 0, max_area, 0.1)


def non_overlapping(pred_masks: np.ndarray) -> np.ndarray:
    """``_apply_non_overlapping_constraints``: (N, 1, H, W) scores; where an object is not the highest-scoring one,
    its score is clamped to at most -10."""
    if pred_masks.shape[0] == 1:
        return pred_masks
    best = np.argmax(pred_masks, axis=0)[None]  # 1, 1, H, W
    keep = best == np.arange(pred_masks.shape[0]).reshape(-1, 1, 1, 1)
    return np.where(keep, pred_masks, np.minimum(pred_masks, -10.0)).astype(np.float32)


def resize_mask_input(mask: np.ndarray, input_size: int) -> np.ndarray:
    """``add_new_mask``'s mask prompt: an (H, W) mask -> (1, 1, S, S) float32 0/1 (antialiased bilinear, >= 0.5)."""
    m = np.asarray(mask).astype(bool).astype(np.float32)[None, None]
    if m.shape[-2:] == (input_size, input_size):
        return m
    return (resize_bilinear(m, (input_size, input_size), antialias=True) >= 0.5).astype(np.float32)


def mask_as_output(mask_inputs: np.ndarray) -> np.ndarray:
    """``_use_mask_as_output``'s low-resolution logits: (1, 1, S, S) 0/1 -> (1, 1, S/4, S/4) (antialiased)."""
    high = mask_inputs.astype(np.float32) * np.float32(MASK_OUT_SCALE) + np.float32(MASK_OUT_BIAS)
    return resize_bilinear(high, (high.shape[-2] // 4, high.shape[-1] // 4), antialias=True)


def downsample_mask_prompt(mask_inputs: np.ndarray, conv: dict[str, Any]) -> np.ndarray:
    """``SAM2Base.mask_downsample(mask)``: a k x k stride-k convolution, one channel in and out (weights from the
    memory attention file's ``tracker``) -> the decoder's (1, 1, S/k, S/k) mask prompt."""
    k = int(conv["kernel"])
    if int(conv["stride"]) != k:
        raise ValueError("mask_downsample with a stride other than its kernel is not an official SAM 2 layer")
    weight = np.asarray(conv["weight"], np.float32).reshape(k, k)
    m = mask_inputs.astype(np.float32)[0, 0]
    tiles = m.reshape(m.shape[0] // k, k, m.shape[1] // k, k)
    return (np.einsum("iajb,ab->ij", tiles, weight) + np.float32(conv["bias"])).astype(np.float32)[None, None]


__all__ = ["MASK_OUT_BIAS", "MASK_OUT_SCALE", "NO_OBJ_SCORE", "downsample_mask_prompt", "fill_holes", "mask_as_output",
           "non_overlapping", "resize_mask_input", "to_bfloat16"]
