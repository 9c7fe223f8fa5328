"""Segment everything: ``segment_anything.SamAutomaticMaskGenerator`` on exported models, torch-free.

The official algorithm, step by step (``segment_anything/automatic_mask_generator.py`` and
``utils/amg.py`` of the official package): a regular grid of ``points_per_side``² single-click
prompts, each decoded into three candidate masks (multimask) at the image's size as logits; masks
whose predicted IoU is at most ``pred_iou_thresh`` or whose stability score (IoU of the mask
thresholded at ``+offset`` and ``-offset``) is below ``stability_score_thresh`` are dropped; the rest
are thresholded at 0, boxed, run-length encoded (column-major, as COCO's uncompressed RLE) and
de-duplicated by box non-maximum suppression at ``box_nms_thresh``, best predicted IoU first. The
records are the official ones (``segmentation``, ``area``, ``bbox`` XYWH, ``predicted_iou``,
``point_coords``, ``stability_score``, ``crop_box``).

Not ported: crop layers (``crop_n_layers > 0``) and the small-region clean-up
(``min_mask_region_area > 0``, which needs OpenCV); both default to off in the official generator,
and are refused here rather than ignored. The decoder graph takes one prompt per call (its
batch axis is static), so the points run one after another: ``points_per_batch`` is accepted for
the official signature and has no effect. Tested against the official generator on tiny seeded
models (tests/test_mask_generator.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from vitdeploy.errors import InputError

MASK_THRESHOLD = 0.0


def build_point_grid(n_per_side: int) -> np.ndarray:
    """(n², 2) points in [0, 1] x [0, 1], as the official ``build_point_grid`` (x varies fastest)."""
    offset = 1 / (2 * n_per_side)
    one_side = np.linspace(offset, 1 - offset, n_per_side)
    xs = np.tile(one_side[None, :], (n_per_side, 1))
    ys = np.tile(one_side[:, None], (1, n_per_side))
    return np.stack([xs, ys], axis=-1).reshape(-1, 2)


def stability_score(logits: np.ndarray, threshold: float, offset: float) -> np.ndarray:
    """IoU of the masks thresholded at ``threshold + offset`` and ``threshold - offset``, per mask (C, H, W) -> (C,)."""
    flat = logits.reshape(len(logits), -1)
    intersections = (flat > threshold + offset).sum(axis=1, dtype=np.int64)
    unions = (flat > threshold - offset).sum(axis=1, dtype=np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):  # an empty union is NaN, as in the official (never kept)
        return (intersections / unions).astype(np.float32)


def mask_to_box(masks: np.ndarray) -> np.ndarray:
    """(C, H, W) bool -> (C, 4) XYXY boxes of their pixels (inclusive maxima); an empty mask gives [0, 0, 0, 0]."""
    boxes = np.zeros((len(masks), 4), np.float32)
    for i, mask in enumerate(masks):
        rows, cols = np.any(mask, axis=1), np.any(mask, axis=0)
        if rows.any():
            y = np.flatnonzero(rows)
            x = np.flatnonzero(cols)
            boxes[i] = (x[0], y[0], x[-1], y[-1])
    return boxes


def mask_to_rle(mask: np.ndarray) -> dict[str, Any]:
    """COCO's uncompressed RLE of an (H, W) bool mask: run lengths in column-major order, starting with zeros."""
    h, w = mask.shape
    flat = mask.T.reshape(-1)
    change = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    edges = np.concatenate([[0], change, [flat.size]])
    counts = np.diff(edges).tolist()
    if flat.size and flat[0]:
        counts = [0, *counts]
    return {"size": [h, w], "counts": [int(c) for c in counts]}


def rle_to_mask(rle: dict[str, Any]) -> np.ndarray:
    """The (H, W) bool mask of an uncompressed RLE."""
    h, w = rle["size"]
    values = np.zeros(h * w, dtype=bool)
    position, value = 0, False
    for count in rle["counts"]:
        values[position:position + count] = value
        position += count
        value = not value
    return values.reshape(w, h).T


def box_nms(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float) -> np.ndarray:
    """Indices kept by non-maximum suppression, highest score first (torchvision.ops.nms semantics: areas without +1)."""
    order = np.argsort(-scores, kind="stable")
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


@dataclass
class MaskGeneratorOptions:
    """The official generator's parameters (same names and defaults)."""

    points_per_side: int = 32
    points_per_batch: int = 64
    pred_iou_thresh: float = 0.88
    stability_score_thresh: float = 0.95
    stability_score_offset: float = 1.0
    box_nms_thresh: float = 0.7
    crop_n_layers: int = 0
    min_mask_region_area: int = 0
    output_mode: str = "binary_mask"

    def check(self) -> None:
        if self.points_per_side < 1:
            raise InputError(f"points_per_side must be at least 1, got {self.points_per_side}")
        if self.crop_n_layers:
            raise InputError("crop layers (crop_n_layers > 0) are not supported by vitdeploy's mask generator: use 0")
        if self.min_mask_region_area:
            raise InputError("min_mask_region_area > 0 (OpenCV clean-up) is not supported by vitdeploy's mask generator: use 0")
        if self.output_mode not in ("binary_mask", "uncompressed_rle"):
            raise InputError(f"output_mode '{self.output_mode}' is not supported: use binary_mask or uncompressed_rle "
                             "(coco_rle needs pycocotools: encode the uncompressed RLE with it)")


class SamAutomaticMaskGenerator:
    """``segment_anything.SamAutomaticMaskGenerator`` over a :class:`~vitdeploy.runtime.sam_predictor.SamPredictor`."""

    def __init__(self, predictor: Any, **options: Any):
        self.predictor = predictor
        self.options = MaskGeneratorOptions(**options)
        self.options.check()

    def generate(self, image: np.ndarray, progress: Callable[[int, int], None] | None = None) -> list[dict[str, Any]]:
        """Mask records for an HxWx3 uint8 RGB image (see the module docstring), best predicted IoU first.

        ``progress(done, total)`` counts grid points, from 0 when the image has been encoded.
        """
        opt = self.options
        self.predictor.set_image(image)
        height, width = image.shape[:2]
        points = build_point_grid(opt.points_per_side) * np.array([width, height], dtype=np.float64)
        kept_masks, ious, stabilities, sources = [], [], [], []
        if progress:
            progress(0, len(points))
        for k, point in enumerate(points):
            logits, scores, _ = self.predictor.predict(point[None], np.array([1]), multimask_output=True, return_logits=True)
            stable = stability_score(logits, MASK_THRESHOLD, opt.stability_score_offset)
            keep = np.ones(len(scores), dtype=bool)
            if opt.pred_iou_thresh > 0:  # the official filters apply only when their threshold is positive
                keep &= scores > opt.pred_iou_thresh
            if opt.stability_score_thresh > 0:
                keep &= stable >= opt.stability_score_thresh
            for j in np.flatnonzero(keep):
                kept_masks.append(logits[j] > MASK_THRESHOLD)
                ious.append(float(scores[j]))
                stabilities.append(float(stable[j]))
                sources.append(point)
            if progress:
                progress(k + 1, len(points))
        self.predictor.reset_image()
        if not kept_masks:
            return []
        masks = np.stack(kept_masks)
        boxes = mask_to_box(masks)
        keep = box_nms(boxes, np.array(ious, np.float32), opt.box_nms_thresh)
        records = []
        for i in keep:
            x0, y0, x1, y1 = (float(v) for v in boxes[i])
            records.append({
                "segmentation": masks[i] if opt.output_mode == "binary_mask" else mask_to_rle(masks[i]),
                "area": int(masks[i].sum()),
                "bbox": [x0, y0, x1 - x0, y1 - y0],
                "predicted_iou": ious[i],
                "point_coords": [[float(sources[i][0]), float(sources[i][1])]],
                "stability_score": stabilities[i],
                "crop_box": [0, 0, width, height],
            })
        return records


__all__ = ["MaskGeneratorOptions", "SamAutomaticMaskGenerator", "box_nms", "build_point_grid", "mask_to_box",
           "mask_to_rle", "rle_to_mask", "stability_score"]
