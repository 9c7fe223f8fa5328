"""The automatic mask generator's utilities in NumPy: ``segment_anything/utils/amg.py`` without torch, OpenCV or
pycocotools.

Each function computes what its official namesake computes (tests/runtime/apps/test_mask_generator.py compares them):

- point grids and crop boxes (``build_point_grid``, ``build_all_layer_point_grids``, ``generate_crop_boxes``);
- mask statistics (``stability_score``, ``mask_to_box``), box non-maximum suppression with torchvision's
  semantics (stable descending order, areas without +1, suppress at IoU > threshold);
- run-length encodings: COCO's uncompressed RLE and its compressed string form, which every model's masks are
  written in (:mod:`vitdeploy.runtime.apps.common.rle`, imported here under the official names);
- crops: the edge filter (``is_box_near_crop_edge``), moving boxes, points and masks back to the image;
- small-region clean-up (``remove_small_regions``): OpenCV's 8-connected components replaced by
  ``scipy.ndimage.label`` with a 3x3 structure, whose labels are in the same raster order.
"""

from __future__ import annotations

import math
from itertools import product
from typing import Any

import numpy as np

from vitdeploy.errors import MissingDependencyError
from vitdeploy.runtime.apps.common.rle import area_from_rle, coco_encode_rle, mask_to_box, mask_to_rle, rle_to_mask


def build_point_grid(n_per_side: int) -> np.ndarray:
    """(n², 2) points in [0, 1] x [0, 1], as the official ``build_point_grid`` (x varies fastest)."""
    offset = 1 / (2 * n_per_side)
    one_side = np.linspace(offset, 1 - offset, n_per_side)
    xs = np.tile(one_side[None, :], (n_per_side, 1))
    ys = np.tile(one_side[:, None], (1, n_per_side))
    return np.stack([xs, ys], axis=-1).reshape(-1, 2)


def build_all_layer_point_grids(n_per_side: int, n_layers: int, scale_per_layer: int) -> list[np.ndarray]:
    """One grid per crop layer, ``n_per_side / scale_per_layer**i`` points a side in layer i."""
    return [build_point_grid(int(n_per_side / (scale_per_layer**i))) for i in range(n_layers + 1)]


def generate_crop_boxes(im_size: tuple[int, int], n_layers: int, overlap_ratio: float) -> tuple[list[list[int]], list[int]]:
    """XYXY crop boxes and their layer: the whole image, then (2**i)**2 overlapping crops in layer i."""
    crop_boxes, layer_idxs = [[0, 0, im_size[1], im_size[0]]], [0]
    im_h, im_w = im_size
    short_side = min(im_h, im_w)

    def crop_len(orig_len: int, n_crops: int, overlap: int) -> int:
        return int(math.ceil((overlap * (n_crops - 1) + orig_len) / n_crops))

    for i_layer in range(n_layers):
        n_crops_per_side = 2 ** (i_layer + 1)
        overlap = int(overlap_ratio * short_side * (2 / n_crops_per_side))
        crop_w = crop_len(im_w, n_crops_per_side, overlap)
        crop_h = crop_len(im_h, n_crops_per_side, overlap)
        crop_box_x0 = [int((crop_w - overlap) * i) for i in range(n_crops_per_side)]
        crop_box_y0 = [int((crop_h - overlap) * i) for i in range(n_crops_per_side)]
        for x0, y0 in product(crop_box_x0, crop_box_y0):
            crop_boxes.append([x0, y0, min(x0 + crop_w, im_w), min(y0 + crop_h, im_h)])
            layer_idxs.append(i_layer + 1)
    return crop_boxes, layer_idxs


def stability_score(logits: np.ndarray, threshold: float, offset: float) -> np.ndarray:
    """IoU of the masks thresholded at ``threshold + offset`` and ``threshold - offset``, per mask (C, H, W) -> (C,)."""
    flat = logits.reshape(len(logits), -1)
    intersections = (flat > threshold + offset).sum(axis=1, dtype=np.int64)
    unions = (flat > threshold - offset).sum(axis=1, dtype=np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):  # an empty union is NaN, as in the official (never kept)
        return (intersections / unions).astype(np.float32)


def box_nms(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float) -> np.ndarray:
    """Indices kept by non-maximum suppression, highest score first (torchvision.ops.nms semantics: areas without +1)."""
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    boxes = np.asarray(boxes, dtype=np.float32)
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    keep: list[int] = []
    suppressed = np.zeros(len(boxes), dtype=bool)
    for i in order:
        if suppressed[i]:
            continue
        keep.append(int(i))
        x0 = np.maximum(boxes[i, 0], boxes[:, 0])
        y0 = np.maximum(boxes[i, 1], boxes[:, 1])
        x1 = np.minimum(boxes[i, 2], boxes[:, 2])
        y1 = np.minimum(boxes[i, 3], boxes[:, 3])
        inter = np.clip(x1 - x0, 0, None) * np.clip(y1 - y0, 0, None)
        union = areas[i] + areas - inter
        iou = np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)
        suppressed |= iou > iou_threshold
    return np.array(keep, dtype=np.int64)


def is_box_near_crop_edge(boxes: np.ndarray, crop_box: list[int], orig_box: list[int], atol: float = 20.0) -> np.ndarray:
    """Masks whose box (crop frame) touches the crop's edge but not the image's: cut off by the crop, dropped."""
    crop = np.asarray(crop_box, dtype=np.float32)
    orig = np.asarray(orig_box, dtype=np.float32)
    uncropped = uncrop_boxes_xyxy(boxes, crop_box).astype(np.float32)
    near_crop_edge = np.abs(uncropped - crop[None, :]) <= atol
    near_image_edge = np.abs(uncropped - orig[None, :]) <= atol
    return np.any(near_crop_edge & ~near_image_edge, axis=1)


def uncrop_boxes_xyxy(boxes: np.ndarray, crop_box: list[int]) -> np.ndarray:
    x0, y0 = crop_box[0], crop_box[1]
    return np.asarray(boxes) + np.array([[x0, y0, x0, y0]], dtype=np.asarray(boxes).dtype)


def uncrop_points(points: np.ndarray, crop_box: list[int]) -> np.ndarray:
    return np.asarray(points) + np.array([[crop_box[0], crop_box[1]]], dtype=np.asarray(points).dtype)


def uncrop_mask(mask: np.ndarray, crop_box: list[int], orig_h: int, orig_w: int) -> np.ndarray:
    """A crop's (h, w) mask placed in the (orig_h, orig_w) image, zeros around it."""
    x0, y0, x1, y1 = crop_box
    if x0 == 0 and y0 == 0 and x1 == orig_w and y1 == orig_h:
        return mask
    out = np.zeros((orig_h, orig_w), dtype=mask.dtype)
    out[y0:y1, x0:x1] = mask
    return out


def require_scipy() -> Any:
    """``scipy.ndimage``, or MissingDependencyError naming the extra (the official generator checks OpenCV the same
    way, when it is built with ``min_mask_region_area`` > 0)."""
    try:
        from scipy import ndimage
    except ImportError as exc:
        raise MissingDependencyError("scipy", "min_mask_region_area > 0 (the small-region clean-up)",
                                     "pip install 'vitdeploy[amg]' (or: pip install scipy)") from exc
    return ndimage


def remove_small_regions(mask: np.ndarray, area_thresh: float, mode: str) -> tuple[np.ndarray, bool]:
    """Fill holes (``mode="holes"``) or drop islands (``"islands"``) smaller than ``area_thresh`` pixels;
    returns the mask and whether it changed. 8-connected components, as the official's OpenCV call."""
    ndimage = require_scipy()
    correct_holes = mode == "holes"
    working = np.logical_xor(correct_holes, mask)
    regions, n_regions = ndimage.label(working, structure=np.ones((3, 3), dtype=bool))
    sizes = np.bincount(regions.ravel(), minlength=n_regions + 1)[1:]
    small_regions = [i + 1 for i, size in enumerate(sizes) if size < area_thresh]
    if not small_regions:
        return mask, False
    fill_labels = [0, *small_regions]
    if not correct_holes:
        fill_labels = [i for i in range(n_regions + 1) if i not in fill_labels]
        if not fill_labels:  # every island is small: keep the largest
            fill_labels = [int(np.argmax(sizes)) + 1]
    return np.isin(regions, fill_labels), True


__all__ = ["area_from_rle", "box_nms", "build_all_layer_point_grids", "build_point_grid", "coco_encode_rle",
           "generate_crop_boxes", "is_box_near_crop_edge", "mask_to_box", "mask_to_rle", "remove_small_regions",
           "require_scipy", "rle_to_mask", "stability_score", "uncrop_boxes_xyxy", "uncrop_mask", "uncrop_points"]
