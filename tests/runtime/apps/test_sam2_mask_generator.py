"""Segment everything with SAM 2: vitdeploy's torch-free Sam2AutomaticMaskGenerator vs the official
SAM2AutomaticMaskGenerator, on the tiny SAM 2.1 whose objects are present (tests/sam2_video_fixtures.py)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.sam_tiny import sample_image
from tests.sam2_video_fixtures import clip_arch
from vitdeploy.errors import InputError
from vitdeploy.runtime.apps.sam.mask_generator import rle_to_mask

pytest.importorskip("sam2", reason="the official sam2 package is not installed (scripts/test.sh installs it)")
pytest_plugins = ["tests.sam2_video_fixtures", "tests.sam_tiny_fixtures"]

#: Matched masks of the two (the graphs equal the official modules to ~1e-6: only pixels on the threshold may differ).
MASK_IOU_MIN = 0.99
#: Thresholds that keep some of the tiny model's masks and drop others, each in a gap between its values (measured
#: over all 75 candidates, three masks per click or one: predicted IoU 0.37-0.73, stability 0.64-0.99), so that a
#: difference of rounding between the two cannot move a mask across one.
OPTIONS = dict(points_per_side=5, pred_iou_thresh=0.5036, stability_score_thresh=0.8436, stability_score_offset=0.1)
CANDIDATES = 5 * 5 * 3


def official_generator(checkpoint, **options: Any):
    from sam2.automatic_mask_generator import SAM2AutomaticMaskGenerator
    from sam2.build_sam import build_sam2

    arch = clip_arch()
    model = build_sam2(arch.config, device="cpu", hydra_overrides_extra=list(arch.overrides))
    model.load_state_dict(torch.load(checkpoint, weights_only=True)["model"], strict=True)
    generator = SAM2AutomaticMaskGenerator(model.eval(), output_mode="uncompressed_rle", **options)
    # The official image predictor hard-codes the feature sizes of a 1024-px model; this one is 256 px.
    grid = int(model.sam_image_embedding_size)
    generator.predictor._bb_feat_sizes = [(4 * grid, 4 * grid), (2 * grid, 2 * grid), (grid, grid)]
    return generator


@pytest.mark.parametrize("extra", [dict(box_nms_thresh=1.0), dict(box_nms_thresh=0.9), dict(box_nms_thresh=1.0, use_m2m=True),
                                   dict(box_nms_thresh=1.0, multimask_output=False)])
def test_same_masks_as_the_official_sam2_generator(sam2_video: dict[str, Any], extra: dict[str, Any]) -> None:
    from vitdeploy.runtime.apps.sam2.mask_generator import Sam2AutomaticMaskGenerator
    from vitdeploy.runtime.apps.sam2.image_predictor import Sam2ImagePredictor

    image = sample_image(60, 84, seed=5)
    predictor = Sam2ImagePredictor(sam2_video["encoder"], sam2_video["decoder"], threads=2, runtime="onnxruntime")
    ours = Sam2AutomaticMaskGenerator(predictor, output_mode="uncompressed_rle", **OPTIONS, **extra).generate(image)
    with torch.inference_mode():
        theirs = official_generator(sam2_video["checkpoint"], **OPTIONS, **extra).generate(image)
    assert len(theirs) >= 5, "the test needs masks to compare"
    assert len(theirs) < CANDIDATES // (1 if extra.get("multimask_output", True) else 3), "the filters should drop some"
    assert len(ours) == len(theirs), (len(ours), len(theirs))
    for a, b in zip(ours, theirs):  # both best predicted IoU first
        ma, mb = rle_to_mask(a["segmentation"]), rle_to_mask(b["segmentation"])
        assert (ma & mb).sum() / max((ma | mb).sum(), 1) >= MASK_IOU_MIN
        assert a["point_coords"][0] == pytest.approx(b["point_coords"][0])
        assert a["predicted_iou"] == pytest.approx(b["predicted_iou"], abs=1e-4)
        assert a["stability_score"] == pytest.approx(b["stability_score"], abs=0.02)
        assert a["bbox"] == pytest.approx([float(v) for v in b["bbox"]], abs=1)
    print(f"{extra}: {len(ours)} masks")


def test_each_generator_takes_its_own_predictor(sam2_video: dict[str, Any], tiny_sam_artifacts) -> None:
    from vitdeploy.runtime.apps.sam.mask_generator import SamAutomaticMaskGenerator
    from vitdeploy.runtime.apps.sam2.mask_generator import Sam2AutomaticMaskGenerator, mask_generator_for
    from vitdeploy.runtime.apps.sam2.image_predictor import Sam2ImagePredictor
    from vitdeploy.runtime.apps.sam.predictor import SamPredictor

    sam2 = Sam2ImagePredictor(sam2_video["encoder"], sam2_video["decoder"], threads=1, runtime="onnxruntime")
    sam1 = SamPredictor(tiny_sam_artifacts.encoder, tiny_sam_artifacts.decoder, threads=1, runtime="onnxruntime")
    assert type(mask_generator_for(sam2)) is Sam2AutomaticMaskGenerator
    assert type(mask_generator_for(sam1)) is SamAutomaticMaskGenerator
    assert mask_generator_for(sam2).options.pred_iou_thresh == 0.8 and mask_generator_for(sam1).options.pred_iou_thresh == 0.88
    with pytest.raises(InputError, match="takes a vitdeploy.runtime.Sam2ImagePredictor"):
        Sam2AutomaticMaskGenerator(sam1)
    with pytest.raises(InputError, match="takes a vitdeploy.runtime.SamPredictor"):
        SamAutomaticMaskGenerator(sam2)
    with pytest.raises(InputError, match="unknown option.*use_m2m"):
        SamAutomaticMaskGenerator(sam1, use_m2m=True)
