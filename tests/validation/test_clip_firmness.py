"""The video agreement benchmark's reading of a failed clip: how far the logits moved, and how firm the FP32 mask was
(``benchmarks/bf16_video_agreement.py``'s ``firmness``): a soft mask loses pixels to a change a firm one shrugs off."""

from __future__ import annotations

import numpy as np

from tests.conftest import load_benchmark

#: The share of a mask within a change of its threshold, against its value drawn analytically: sampling error of the
#: ~38,000 foreground pixels of a 240 x 320 frame (standard deviation about 0.002).
SHARE_ATOL = 0.01


def clip(logits: np.ndarray, scores: float = 1.0) -> dict:
    """A variant's saved arrays as the benchmark keeps them: (frames, H, W) logits, their masks, one score a frame."""
    return {"masks": logits > 0, "logits": logits, "scores": np.full(len(logits), scores)}


def test_a_soft_mask_fails_where_a_firm_one_holds_under_the_same_change() -> None:
    bench = load_benchmark("bf16_video_agreement")
    rng = np.random.default_rng(0)
    change = 0.05 * rng.choice([-1.0, 1.0], size=(3, 240, 320))  # every logit moved by 0.05, either way
    soft = rng.uniform(-0.3, 0.3, size=(3, 240, 320))  # seeded weights' masks: logits near the threshold
    firm = np.where(soft > 0, 5.0, -5.0)  # the same masks, their logits far from it

    soft_row = bench.against_fp32(clip(soft), clip(soft + change))
    firm_row = bench.against_fp32(clip(firm), clip(firm + change))

    assert not soft_row["holds"] and soft_row["min_iou"] < 0.99
    assert firm_row["holds"] and firm_row["min_iou"] == 1.0
    for row in (soft_row, firm_row):
        assert abs(row["worst_frame_max_logit_diff"] - 0.05) < 1e-9
    assert abs(soft_row["mask_within_moved"] - 0.05 / 0.3) < SHARE_ATOL  # uniform logits: 0.05 of the 0.3 above 0
    assert firm_row["mask_within_moved"] == 0.0
    assert firm_row["reference_stability"] == 1.0 and firm_row["reference_median_logit"] == 5.0
    assert soft_row["reference_stability"] == 0.0  # no logit reaches +1: the official generator drops it
    assert abs(soft_row["reference_median_logit"] - 0.15) < SHARE_ATOL


def test_files_without_logits_keep_the_mask_and_score_columns() -> None:
    """Agreement files written before the logits were kept still compare: masks and scores only."""
    bench = load_benchmark("bf16_video_agreement")
    masks = np.zeros((2, 8, 8), bool)
    masks[:, 2:6, 2:6] = True
    row = bench.against_fp32({"masks": masks, "scores": np.ones(2)}, {"masks": masks, "scores": np.ones(2)})
    assert row["holds"] and row["min_iou"] == 1.0 and "worst_frame_max_logit_diff" not in row
