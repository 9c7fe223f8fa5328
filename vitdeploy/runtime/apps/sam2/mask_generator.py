"""Segment everything with SAM 2: ``sam2.automatic_mask_generator.SAM2AutomaticMaskGenerator`` on exported files,
torch-free.

SAM 1's generator (:mod:`vitdeploy.runtime.apps.sam.mask_generator`: the same grid, crops, filters, suppression and
records) over :class:`~vitdeploy.runtime.apps.sam2.image_predictor.Sam2ImagePredictor`, with what SAM 2's adds: the default
``pred_iou_thresh`` 0.8, ``mask_threshold`` (stability and binarization around it), ``multimask_output`` (three masks
per click, or the one the decoder chooses), and ``use_m2m`` (each candidate decoded again with its own low-resolution
logits as the mask prompt, one mask out, before the filters). The official predictor inside the generator also fills
holes and removes sprinkles smaller than ``min_mask_region_area`` with its CUDA extension (skipped without it, as on
CPU installs): not done here; the generator's own small-region clean-up is (SciPy, as for SAM 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vitdeploy.runtime.apps.sam.mask_generator import MaskGeneratorOptions, SamAutomaticMaskGenerator


@dataclass
class Sam2MaskGeneratorOptions(MaskGeneratorOptions):
    """The official SAM 2 generator's parameters (same names, same defaults)."""

    pred_iou_thresh: float = 0.8
    mask_threshold: float = 0.0
    use_m2m: bool = False
    multimask_output: bool = True


class Sam2AutomaticMaskGenerator(SamAutomaticMaskGenerator):
    """``SAM2AutomaticMaskGenerator`` over a :class:`~vitdeploy.runtime.apps.sam2.image_predictor.Sam2ImagePredictor`.

    Args:
        predictor: the predictor of the exported SAM 2 encoder and decoder (where the official takes a ``SAM2Base``).
        **options: the official generator's parameters (:class:`Sam2MaskGeneratorOptions`), same names and defaults.
    """

    options_class = Sam2MaskGeneratorOptions
    predictor_name = "vitdeploy.runtime.Sam2ImagePredictor(encoder, decoder)"

    @staticmethod
    def _takes(predictor: Any) -> bool:
        from vitdeploy.runtime.apps.sam2.image_predictor import Sam2ImagePredictor

        return isinstance(predictor, Sam2ImagePredictor)

    @property
    def mask_threshold(self) -> float:
        return float(self.options.mask_threshold)

    def _candidates(self, point: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        opt = self.options
        click, label = point[None], np.array([1])
        logits, scores, low_res = self.predictor.predict(click, label, multimask_output=opt.multimask_output,
                                                         return_logits=True)
        if opt.use_m2m:  # refine_with_m2m: each candidate again, its own logits as the mask prompt, one mask out
            refined = [self.predictor.predict(click, label, mask_input=low_res[j][None], multimask_output=False,
                                              return_logits=True) for j in range(len(scores))]
            logits = np.concatenate([r[0] for r in refined])
            scores = np.concatenate([r[1] for r in refined])
        return logits, scores

    def _reset(self) -> None:
        self.predictor.reset_predictor()


def mask_generator_for(predictor: Any, **options: Any) -> SamAutomaticMaskGenerator:
    """The official generator of the predictor's model: SAM 2's for a Sam2ImagePredictor, else SAM's."""
    from vitdeploy.runtime.apps.sam2.image_predictor import Sam2ImagePredictor

    kind = Sam2AutomaticMaskGenerator if isinstance(predictor, Sam2ImagePredictor) else SamAutomaticMaskGenerator
    return kind(predictor, **options)


__all__ = ["Sam2AutomaticMaskGenerator", "Sam2MaskGeneratorOptions", "mask_generator_for"]
