"""Segment everything: vitdeploy's torch-free SamAutomaticMaskGenerator vs the official one on a tiny seeded SAM."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.sam_tiny import TinySamArtifacts, sample_image, tiny_official_sam
from vitdeploy.runtime import SamPredictor
from vitdeploy.runtime.mask_generator import SamAutomaticMaskGenerator, box_nms, mask_to_rle, rle_to_mask

pytest_plugins = ["tests.sam_tiny_fixtures"]

#: Both generators see the same prompts; the exported graphs match the official modules to ~1e-6, so masks are
#: equal but for pixels whose logit is within that of 0: IoU of matched masks at least this.
MASK_IOU_MIN = 0.99
#: Thresholds that keep some of a random tiny model's masks and drop others at every filter (the official defaults
#: keep one: its masks barely depend on the click).
#: Its boxes are nearly all the whole image, so box NMS at 0.9 keeps one mask; at 1.0 it keeps every mask (the NMS itself
#: is compared with torchvision's below).
OPTIONS = dict(points_per_side=6, pred_iou_thresh=0.1, stability_score_thresh=0.1, stability_score_offset=0.1)


def _official(image: np.ndarray, output_mode: str, nms: float) -> list[dict]:
    from segment_anything import SamAutomaticMaskGenerator as Official

    torch.manual_seed(0)
    with torch.no_grad():
        return Official(tiny_official_sam(), output_mode=output_mode, box_nms_thresh=nms, **OPTIONS).generate(image)


@pytest.mark.parametrize("shape,nms,least", [((48, 80), 1.0, 10), ((72, 40), 1.0, 10), ((48, 80), 0.9, 1)])
def test_same_masks_as_the_official_generator(tiny_sam_artifacts: TinySamArtifacts, shape: tuple[int, int], nms: float,
                                              least: int) -> None:
    image = sample_image(*shape, seed=5)
    ours = SamAutomaticMaskGenerator(SamPredictor(tiny_sam_artifacts.encoder, tiny_sam_artifacts.decoder, threads=1),
                                     output_mode="uncompressed_rle", box_nms_thresh=nms, **OPTIONS).generate(image)
    theirs = _official(image, "uncompressed_rle", nms)
    assert len(theirs) >= least, "the test needs masks to compare"
    assert len(theirs) < 6 * 6 * 3 or nms < 1, "the filters should drop some masks"
    assert len(ours) == len(theirs)
    same_rle = 0
    for a, b in zip(ours, theirs):  # both best predicted IoU first
        ma, mb = rle_to_mask(a["segmentation"]), rle_to_mask(b["segmentation"])
        iou = (ma & mb).sum() / max((ma | mb).sum(), 1)
        assert iou >= MASK_IOU_MIN, iou
        assert a["point_coords"][0] == pytest.approx(b["point_coords"][0])
        assert a["predicted_iou"] == pytest.approx(b["predicted_iou"], abs=1e-4)
        assert a["stability_score"] == pytest.approx(b["stability_score"], abs=0.02)
        assert a["bbox"] == pytest.approx([float(v) for v in b["bbox"]], abs=1)
        assert a["area"] == int(ma.sum()) and abs(a["area"] - b["area"]) <= 1  # a pixel may flip (see below)
        assert a["crop_box"] == [float(v) for v in b["crop_box"]] or a["crop_box"] == b["crop_box"]
        same_rle += a["segmentation"] == {"size": list(b["segmentation"]["size"]), "counts": list(b["segmentation"]["counts"])}
    print(f"{shape}: {len(ours)} masks, {same_rle} with identical RLE")
    assert same_rle >= len(ours) - 1  # measured: all equal; a logit within ~1e-6 of 0 may flip a pixel on another CPU


def test_rle_and_nms_match_the_official_helpers() -> None:
    from segment_anything.utils.amg import mask_to_rle_pytorch
    from torchvision.ops import nms

    rng = np.random.default_rng(0)
    masks = rng.random((5, 7, 9)) > 0.5
    masks[0] = False
    masks[1] = True
    for mask, official in zip(masks, mask_to_rle_pytorch(torch.from_numpy(masks))):
        assert mask_to_rle(mask) == official
        assert np.array_equal(rle_to_mask(mask_to_rle(mask)), mask)
    boxes = np.sort(rng.uniform(0, 50, (40, 2, 2)), axis=1).reshape(40, 4)[:, [0, 2, 1, 3]].astype(np.float32)
    scores = rng.random(40).astype(np.float32)
    assert box_nms(boxes, scores, 0.3).tolist() == nms(torch.from_numpy(boxes), torch.from_numpy(scores), 0.3).tolist()


def test_unported_options_are_refused(tiny_sam_artifacts: TinySamArtifacts) -> None:
    from vitdeploy.errors import InputError

    predictor = SamPredictor(tiny_sam_artifacts.encoder, tiny_sam_artifacts.decoder, threads=1)
    for bad in ({"crop_n_layers": 1}, {"min_mask_region_area": 10}, {"output_mode": "coco_rle"}):
        with pytest.raises(InputError):
            SamAutomaticMaskGenerator(predictor, **bad)


def test_segment_all_writes_records_and_an_overlay(tiny_sam_artifacts: TinySamArtifacts, tmp_path) -> None:
    import json

    from click.testing import CliRunner
    from PIL import Image

    from vitdeploy.cli import cli

    image = tmp_path / "scene.png"
    Image.fromarray(sample_image(48, 80, seed=5)).save(image)
    out = tmp_path / "masks.json"
    args = ["segment-all", "-e", str(tiny_sam_artifacts.encoder), "-d", str(tiny_sam_artifacts.decoder), "-i", str(image),
            "-o", str(out), "--points-per-side", "6", "--pred-iou-thresh", "0.1", "--stability-score-thresh", "0.1",
            "--stability-score-offset", "0.1", "--box-nms-thresh", "1.0", "--threads", "1"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    expected = _official(sample_image(48, 80, seed=5), "uncompressed_rle", 1.0)
    assert len(data["masks"]) == len(expected) and data["size"] == [48, 80]
    assert np.asarray(Image.open(tmp_path / "masks.overlay.png")).shape == (48, 80, 3)
    wrong = CliRunner().invoke(cli, [*args[:8], str(tmp_path / "m.png")])
    assert wrong.exit_code == 1 and "must be a .json file" in wrong.output
