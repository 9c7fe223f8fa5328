"""The output dicts of SAM 3's tracker (:class:`~vitdeploy.runtime.apps.sam3.tracker_predictor.Sam3TrackerPredictor`),
as the official batched predictor keeps them: one output per frame for all objects under two keys (prompted,
tracked), each object's slice of it, and the memory score memory selection reads. Torch-free."""

from __future__ import annotations

from typing import Any

import numpy as np

#: ``_consolidate_temp_output_across_obj``'s object score for an object without an output on a frame (present).
MISSING_OBJECT_SCORE = 10.0
#: The two keys of every output dict.
COND, NON_COND = "cond_frame_outputs", "non_cond_frame_outputs"


def memory_score(object_score_logits: np.ndarray, iou_score: np.ndarray) -> float:
    """``Sam3TrackerBase.cal_mem_score``: the mean over objects of the IoU estimate times the object score rescaled to
    [0, 1] (``sigmoid * 2 - 1`` where the object is present, 0 where not), in float32."""
    s = np.asarray(object_score_logits, np.float32)
    norm = np.where(s > 0, (np.float32(1.0) / (np.float32(1.0) + np.exp(-s))) * np.float32(2.0) - np.float32(1.0),
                    np.float32(0.0)).astype(np.float32)
    return float(np.mean(norm * np.asarray(iou_score, np.float32), dtype=np.float32))


def object_slice(out: dict[str, Any], i: int, copy: bool = False) -> dict[str, Any]:
    """``_add_output_per_object``'s slice of one object from a frame's output for all objects (views, or ``copy``;
    no ``eff_iou_score``, as officially, so a click's memory selection sees none)."""
    def part(name: str, index: Any) -> Any:
        value = out[name]
        return None if value is None else (value[index].copy() if copy else value[index])

    return {"maskmem_features": part("maskmem_features", slice(i, i + 1)), "pred_masks": part("pred_masks", slice(i, i + 1)),
            "obj_token": part("obj_token", i), "obj_presence": float(out["obj_presence"][i]),
            "object_score_logits": part("object_score_logits", slice(i, i + 1)),
            "iou_score": part("iou_score", slice(i, i + 1))}


__all__ = ["COND", "MISSING_OBJECT_SCORE", "NON_COND", "memory_score", "object_slice"]
