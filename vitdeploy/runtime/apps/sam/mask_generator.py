"""Segment everything: ``segment_anything.SamAutomaticMaskGenerator`` on exported models, torch-free.

The official algorithm, step by step (``segment_anything/automatic_mask_generator.py``; its utilities in
:mod:`vitdeploy.runtime.apps.sam.amg`): the image and, with ``crop_n_layers`` > 0, overlapping crops of it
(``generate_crop_boxes``) are each encoded; a grid of single-click prompts per crop layer
(``points_per_side`` a side, scaled down by ``crop_n_points_downscale_factor`` per layer, or the given
``point_grids``) is decoded into three candidate masks each as logits; masks whose predicted IoU is at
most ``pred_iou_thresh`` or whose stability score is below ``stability_score_thresh`` are dropped, so are
masks cut off by a crop's edge; box non-maximum suppression at ``box_nms_thresh`` per crop (best
predicted IoU first) and at ``crop_nms_thresh`` across crops (smaller crops first); then, with
``min_mask_region_area`` > 0, holes and islands smaller than that are removed and suppression runs again
(unchanged masks first). The records are the official ones (``segmentation`` as a binary mask, COCO's
uncompressed RLE or its compressed string, ``area``, ``bbox`` XYWH, ``predicted_iou``, ``point_coords``,
``stability_score``, ``crop_box`` XYWH).

What differs: the first argument is a :class:`~vitdeploy.runtime.apps.sam.predictor.SamPredictor` (exported
files), not a ``Sam`` model; the decoder graph takes one prompt per call, so ``points_per_batch`` is
accepted for the official signature and has no effect; the small-region clean-up uses SciPy where the
official uses OpenCV, and ``coco_rle`` is encoded without pycocotools. Tested against the official
generator on tiny seeded models, crops and clean-up included (tests/runtime/apps/test_mask_generator.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vitdeploy.errors import InputError
from vitdeploy.runtime.apps.sam.amg import (area_from_rle, box_nms, build_all_layer_point_grids, build_point_grid,
                                        coco_encode_rle, generate_crop_boxes, is_box_near_crop_edge, mask_to_box,
                                        mask_to_rle, remove_small_regions, require_scipy, rle_to_mask, stability_score,
                                        uncrop_boxes_xyxy, uncrop_mask, uncrop_points)

MASK_THRESHOLD = 0.0
OUTPUT_MODES = ("binary_mask", "uncompressed_rle", "coco_rle")


@dataclass
class MaskGeneratorOptions:
    """The official generator's parameters (same names, same defaults)."""

    points_per_side: int | None = 32
    points_per_batch: int = 64
    pred_iou_thresh: float = 0.88
    stability_score_thresh: float = 0.95
    stability_score_offset: float = 1.0
    box_nms_thresh: float = 0.7
    crop_n_layers: int = 0
    crop_nms_thresh: float = 0.7
    crop_overlap_ratio: float = 512 / 1500
    crop_n_points_downscale_factor: int = 1
    point_grids: list[np.ndarray] | None = None
    min_mask_region_area: int = 0
    output_mode: str = "binary_mask"

    def check(self) -> None:
        if (self.points_per_side is None) == (self.point_grids is None):
            raise InputError("give exactly one of points_per_side and point_grids (as the official generator): "
                             f"got points_per_side={self.points_per_side!r} and "
                             f"point_grids={'None' if self.point_grids is None else f'{len(self.point_grids)} grid(s)'}")
        if self.points_per_side is not None and (not isinstance(self.points_per_side, int) or self.points_per_side < 1):
            raise InputError(f"points_per_side must be a whole number of at least 1, got {self.points_per_side!r}")
        if not isinstance(self.crop_n_layers, int) or self.crop_n_layers < 0:
            raise InputError(f"crop_n_layers must be a whole number >= 0, got {self.crop_n_layers!r}")
        if not isinstance(self.crop_n_points_downscale_factor, int) or self.crop_n_points_downscale_factor < 1:
            raise InputError(f"crop_n_points_downscale_factor must be a whole number >= 1, got {self.crop_n_points_downscale_factor!r}")
        if self.point_grids is not None:
            grids = [np.asarray(g, dtype=np.float64) for g in self.point_grids]
            if len(grids) != self.crop_n_layers + 1:
                raise InputError(f"point_grids has {len(grids)} grid(s); crop_n_layers={self.crop_n_layers} needs "
                                 f"{self.crop_n_layers + 1} (one per crop layer)")
            for i, g in enumerate(grids):
                if g.ndim != 2 or g.shape[1] != 2 or len(g) == 0 or g.min() < 0 or g.max() > 1:
                    raise InputError(f"point_grids[{i}] must be an (N, 2) array of (x, y) in [0, 1], got shape {g.shape}")
        if self.output_mode not in OUTPUT_MODES:
            raise InputError(f"output_mode '{self.output_mode}' is not one of {', '.join(OUTPUT_MODES)}")
        if self.min_mask_region_area < 0:
            raise InputError(f"min_mask_region_area must be >= 0, got {self.min_mask_region_area}")

    def grids(self) -> list[np.ndarray]:
        """One grid of points in [0, 1]² per crop layer (after :meth:`check`: exactly one of the two sources is set)."""
        if self.point_grids is not None:
            return [np.asarray(g, dtype=np.float64) for g in self.point_grids]
        return build_all_layer_point_grids(int(self.points_per_side or 0), self.crop_n_layers, self.crop_n_points_downscale_factor)


@dataclass
class _Masks:
    """Candidate masks as the official ``MaskData``: parallel lists, RLEs in the image frame."""

    rles: list[dict[str, Any]] = field(default_factory=list)
    boxes: list[np.ndarray] = field(default_factory=list)  # XYXY, image frame
    ious: list[float] = field(default_factory=list)
    stabilities: list[float] = field(default_factory=list)
    points: list[np.ndarray] = field(default_factory=list)  # image frame
    crop_boxes: list[list[int]] = field(default_factory=list)  # XYXY

    def extend(self, other: _Masks) -> None:
        for name in self.__dataclass_fields__:
            getattr(self, name).extend(getattr(other, name))

    def keep(self, indices: np.ndarray) -> None:
        for name in self.__dataclass_fields__:
            values = getattr(self, name)
            setattr(self, name, [values[int(i)] for i in indices])


class SamAutomaticMaskGenerator:
    """``segment_anything.SamAutomaticMaskGenerator`` over a :class:`~vitdeploy.runtime.apps.sam.predictor.SamPredictor`.

    Args:
        predictor: the predictor of the exported encoder and decoder (where the official takes a ``Sam``).
        **options: the official generator's parameters (:class:`MaskGeneratorOptions`), same names and defaults.
    """

    #: The official parameters (SAM 2's generator has more, with other defaults).
    options_class: type[MaskGeneratorOptions] = MaskGeneratorOptions
    #: The predictor it takes, for people.
    predictor_name = "vitdeploy.runtime.SamPredictor(encoder, decoder)"

    @staticmethod
    def _takes(predictor: Any) -> bool:
        from vitdeploy.runtime.apps.sam.predictor import SamPredictor

        return isinstance(predictor, SamPredictor)

    def __init__(self, predictor: Any, **options: Any):
        if not self._takes(predictor):
            raise InputError(f"{type(self).__name__} takes a {self.predictor_name} of exported files, not a "
                             f"{type(predictor).__module__}.{type(predictor).__name__}: export the model's encoder and "
                             "decoder with 'vitdeploy export' and build that predictor from them")
        fields = self.options_class.__dataclass_fields__
        unknown = sorted(set(options) - set(fields))
        if unknown:
            raise InputError(f"unknown option(s) {', '.join(unknown)}: the official generator's parameters are "
                             f"{', '.join(fields)}")
        self.predictor = predictor
        self.options = self.options_class(**options)
        self.options.check()
        if self.options.min_mask_region_area > 0:
            require_scipy()  # missing: said now, not after minutes of decoding
        self.point_grids = self.options.grids()

    def point_count(self, image_hw: tuple[int, int]) -> int:
        """How many single-click prompts :meth:`generate` decodes for an image of ``image_hw``, over every crop."""
        _, layers = generate_crop_boxes(image_hw, self.options.crop_n_layers, self.options.crop_overlap_ratio)
        return sum(len(self.point_grids[layer]) for layer in layers)

    def generate(self, image: np.ndarray, progress: Callable[[int, int], None] | None = None) -> list[dict[str, Any]]:
        """Mask records for an HxWx3 uint8 RGB image (see the module docstring), in the official order.

        ``progress(done, total)`` counts grid points over every crop, from 0 once the first crop is encoded.
        """
        from vitdeploy.runtime.processing.preprocess import check_rgb_uint8

        check_rgb_uint8(image)
        opt = self.options
        height, width = image.shape[:2]
        crop_boxes, layers = generate_crop_boxes((height, width), opt.crop_n_layers, opt.crop_overlap_ratio)
        total, done = self.point_count((height, width)), 0

        def tick(points: int) -> None:  # 0 once a crop is encoded (reported for the first only), 1 per decoded point
            nonlocal done
            done += points
            if progress and (points or done == 0):
                progress(done, total)

        data = _Masks()
        for crop_box, layer in zip(crop_boxes, layers):
            data.extend(self._process_crop(image, crop_box, layer, (height, width), tick))
        if len(crop_boxes) > 1 and data.rles:  # duplicates across crops: masks from smaller crops first
            areas = np.array([(b[2] - b[0]) * (b[3] - b[1]) for b in data.crop_boxes], dtype=np.float32)
            data.keep(box_nms(np.stack(data.boxes), 1.0 / areas, opt.crop_nms_thresh))
        if opt.min_mask_region_area > 0 and data.rles:
            self._remove_small_regions(data, opt.min_mask_region_area, max(opt.box_nms_thresh, opt.crop_nms_thresh))
        records = []
        for i, rle in enumerate(data.rles):
            x0, y0, x1, y1 = (float(v) for v in data.boxes[i])
            c0, c1, c2, c3 = data.crop_boxes[i]
            segmentation: Any = rle
            if opt.output_mode == "binary_mask":
                segmentation = rle_to_mask(rle)
            elif opt.output_mode == "coco_rle":
                segmentation = coco_encode_rle(rle)
            records.append({
                "segmentation": segmentation,
                "area": area_from_rle(rle),
                "bbox": [x0, y0, x1 - x0, y1 - y0],
                "predicted_iou": data.ious[i],
                "point_coords": [[float(data.points[i][0]), float(data.points[i][1])]],
                "stability_score": data.stabilities[i],
                "crop_box": [c0, c1, c2 - c0, c3 - c1],
            })
        return records

    def _process_crop(self, image: np.ndarray, crop_box: list[int], layer: int, orig_size: tuple[int, int],
                      tick: Callable[[int], None]) -> _Masks:
        opt = self.options
        x0, y0, x1, y1 = crop_box
        crop = np.ascontiguousarray(image[y0:y1, x0:x1, :])
        self.predictor.set_image(crop)
        crop_h, crop_w = crop.shape[:2]
        points = self.point_grids[layer] * np.array([crop_w, crop_h], dtype=np.float64)
        tick(0)
        threshold = self.mask_threshold
        masks, ious, stabilities, sources = [], [], [], []
        for point in points:
            logits, scores = self._candidates(point)
            keep = np.ones(len(scores), dtype=bool)
            if opt.pred_iou_thresh > 0:  # the official filters apply only when their threshold is positive
                keep &= scores > opt.pred_iou_thresh
            stable = stability_score(logits, threshold, opt.stability_score_offset)
            if opt.stability_score_thresh > 0:
                keep &= stable >= opt.stability_score_thresh
            for j in np.flatnonzero(keep):
                masks.append(logits[j] > threshold)
                ious.append(float(scores[j]))
                stabilities.append(float(stable[j]))
                sources.append(point)
            tick(1)
        self._reset()
        out = _Masks()
        if not masks:
            return out
        stacked = np.stack(masks)
        boxes = mask_to_box(stacked)
        orig_h, orig_w = orig_size
        inside = ~is_box_near_crop_edge(boxes, crop_box, [0, 0, orig_w, orig_h])
        kept = np.flatnonzero(inside)
        if len(kept) == 0:
            return out
        order = kept[box_nms(boxes[kept], np.array(ious, np.float32)[kept], opt.box_nms_thresh)]
        for i in order:
            out.rles.append(mask_to_rle(uncrop_mask(stacked[i], crop_box, orig_h, orig_w)))
            out.boxes.append(uncrop_boxes_xyxy(boxes[i:i + 1], crop_box)[0])
            out.ious.append(ious[i])
            out.stabilities.append(stabilities[i])
            out.points.append(uncrop_points(sources[i][None], crop_box)[0])
            out.crop_boxes.append(list(crop_box))
        return out

    @property
    def mask_threshold(self) -> float:
        """Logits above it are the mask (SAM's ``mask_threshold``)."""
        return MASK_THRESHOLD

    def _candidates(self, point: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(K, H, W) logits and (K,) predicted IoUs of one click at ``point`` (crop pixels): three masks, as officially."""
        logits, scores, _ = self.predictor.predict(point[None], np.array([1]), multimask_output=True, return_logits=True)
        return logits, scores

    def _reset(self) -> None:
        self.predictor.reset_image()

    @staticmethod
    def _remove_small_regions(data: _Masks, min_area: int, nms_thresh: float) -> None:
        """The official ``postprocess_small_regions``: fill small holes, drop small islands, then suppress again
        preferring masks that needed no change."""
        cleaned, scores = [], []
        for rle in data.rles:
            mask, changed_holes = remove_small_regions(rle_to_mask(rle), min_area, mode="holes")
            mask, changed_islands = remove_small_regions(mask, min_area, mode="islands")
            cleaned.append(mask)
            scores.append(float(not (changed_holes or changed_islands)))
        boxes = mask_to_box(np.stack(cleaned))
        keep = box_nms(boxes, np.array(scores, np.float32), nms_thresh)
        for i in keep:
            if scores[i] == 0.0:
                data.rles[i] = mask_to_rle(cleaned[i])
                data.boxes[i] = boxes[i]
        data.keep(keep)


__all__ = ["MaskGeneratorOptions", "OUTPUT_MODES", "SamAutomaticMaskGenerator", "box_nms", "build_point_grid",
           "mask_to_box", "mask_to_rle", "rle_to_mask", "stability_score"]
