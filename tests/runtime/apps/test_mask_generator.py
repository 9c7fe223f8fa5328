"""Segment everything: vitdeploy's torch-free SamAutomaticMaskGenerator vs the official one on a tiny seeded SAM."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.sam_tiny import TinySamArtifacts, sample_image, tiny_official_sam
from vitdeploy.runtime import SamPredictor
from vitdeploy.runtime.apps.sam.mask_generator import SamAutomaticMaskGenerator, box_nms, mask_to_rle, rle_to_mask

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
    ours = SamAutomaticMaskGenerator(SamPredictor(tiny_sam_artifacts.encoder, tiny_sam_artifacts.decoder, threads=1,
                                                  runtime="onnxruntime"),
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


def _official_with(image: np.ndarray, **options) -> list[dict]:
    from segment_anything import SamAutomaticMaskGenerator as Official

    torch.manual_seed(0)
    with torch.no_grad():
        return Official(tiny_official_sam(), **options).generate(image)


def _assert_same_records(ours: list[dict], theirs: list[dict], label: str) -> int:
    """Same records in the same order; returns how many segmentations are identical."""
    assert len(ours) == len(theirs), f"{label}: {len(ours)} masks, official {len(theirs)}"
    same = 0
    for a, b in zip(ours, theirs):
        ma = a["segmentation"] if isinstance(a["segmentation"], np.ndarray) else rle_to_mask(a["segmentation"])
        mb = b["segmentation"] if isinstance(b["segmentation"], np.ndarray) else rle_to_mask(b["segmentation"])
        iou = (ma & mb).sum() / max((ma | mb).sum(), 1)
        assert iou >= MASK_IOU_MIN, (label, iou)
        assert a["point_coords"][0] == pytest.approx([float(v) for v in b["point_coords"][0]]), label
        assert a["crop_box"] == [int(v) for v in b["crop_box"]], (label, a["crop_box"], b["crop_box"])
        assert a["predicted_iou"] == pytest.approx(b["predicted_iou"], abs=1e-4), label
        assert a["bbox"] == pytest.approx([float(v) for v in b["bbox"]], abs=1), label
        same += bool(np.array_equal(ma, mb))
    return same


CROP_OPTIONS = dict(points_per_side=4, pred_iou_thresh=0.1, stability_score_thresh=0.1, stability_score_offset=0.1,
                    box_nms_thresh=1.0)


def test_crop_edge_filter_and_crop_boxes_match_the_official_helpers() -> None:
    from segment_anything.utils import amg as official

    from vitdeploy.runtime.apps.sam import amg

    for size, layers, overlap in (((150, 230), 1, 512 / 1500), ((480, 640), 2, 0.25), ((37, 1001), 3, 0.5)):
        assert amg.generate_crop_boxes(size, layers, overlap) == official.generate_crop_boxes(size, layers, overlap)
    rng = np.random.default_rng(1)
    boxes = np.sort(rng.uniform(0, 120, (200, 2, 2)), axis=1).reshape(200, 4)[:, [0, 2, 1, 3]].round().astype(np.float32)
    for crop in ([0, 0, 230, 150], [0, 0, 131, 94], [99, 56, 230, 150], [40, 10, 171, 104]):
        ours = amg.is_box_near_crop_edge(boxes, crop, [0, 0, 230, 150])
        theirs = official.is_box_near_crop_edge(torch.from_numpy(boxes), crop, [0, 0, 230, 150]).numpy()
        assert np.array_equal(ours, theirs), crop
        if crop != [0, 0, 230, 150]:  # the whole image has no inner edge: nothing is near one; the crops drop some
            assert 0 < ours.sum() < len(boxes), (crop, int(ours.sum()))
        else:
            assert ours.sum() == 0
    assert amg.build_all_layer_point_grids(6, 2, 2)[2].shape == official.build_all_layer_point_grids(6, 2, 2)[2].shape == (1, 2)


@pytest.fixture
def keep_masks_at_crop_edges(monkeypatch: pytest.MonkeyPatch):
    """A random tiny model's masks fill whatever crop they come from, so the edge filter (compared with the official
    one above) drops every crop's masks; with it off on both sides, the rest of the crop path is compared."""
    import segment_anything.automatic_mask_generator as official

    import vitdeploy.runtime.apps.sam.mask_generator as ours

    def nothing_near(boxes, crop_box, orig_box, atol=20.0):
        return torch.zeros(len(boxes), dtype=torch.bool) if isinstance(boxes, torch.Tensor) else np.zeros(len(boxes), bool)

    monkeypatch.setattr(official, "is_box_near_crop_edge", nothing_near)
    monkeypatch.setattr(ours, "is_box_near_crop_edge", nothing_near)


@pytest.mark.parametrize("options", [
    dict(crop_n_layers=1, crop_overlap_ratio=0.25),
    dict(crop_n_layers=1, crop_n_points_downscale_factor=2, crop_nms_thresh=0.5),
    dict(min_mask_region_area=200),
    dict(crop_n_layers=1, min_mask_region_area=120),
    dict(points_per_side=None, point_grids=[np.array([[0.25, 0.3], [0.7, 0.6], [0.5, 0.5]]),
                                            np.array([[0.5, 0.5], [0.2, 0.8]])], crop_n_layers=1),
], ids=["crops", "crops-downscale", "small-regions", "crops-small-regions", "point-grids"])
def test_crops_small_regions_and_point_grids_match_the_official_generator(tiny_sam_artifacts: TinySamArtifacts,
                                                                          options: dict, keep_masks_at_crop_edges) -> None:
    image = sample_image(150, 230, seed=7)
    merged = {**CROP_OPTIONS, **options}
    ours = SamAutomaticMaskGenerator(SamPredictor(tiny_sam_artifacts.encoder, tiny_sam_artifacts.decoder, threads=1,
                                                  runtime="onnxruntime"),
                                     output_mode="binary_mask", **merged).generate(image)
    theirs = _official_with(image, output_mode="binary_mask", **merged)
    assert theirs, "the test needs masks to compare"
    same = _assert_same_records(ours, theirs, str(options))
    crops = {tuple(r["crop_box"]) for r in ours}
    print(f"{options}: {len(ours)} masks from {len(crops)} crop(s), {same} identical")
    assert same >= len(ours) - 1
    if options.get("crop_n_layers"):
        assert len(crops) > 1, "masks from the crops should survive, or the crop path is not compared"
    if options.get("min_mask_region_area"):  # the clean-up changed masks: the comparison covers it
        plain = _official_with(image, output_mode="binary_mask", **{**merged, "min_mask_region_area": 0})
        assert any(len(plain) != len(theirs) or not np.array_equal(a["segmentation"], b["segmentation"])
                   for a, b in zip(plain, theirs))


def test_coco_rle_strings_are_pycocotools(tiny_sam_artifacts: TinySamArtifacts) -> None:
    from pycocotools import mask as mask_utils

    from vitdeploy.runtime.apps.sam.amg import coco_encode_rle

    image = sample_image(48, 80, seed=5)
    ours = SamAutomaticMaskGenerator(SamPredictor(tiny_sam_artifacts.encoder, tiny_sam_artifacts.decoder, threads=1,
                                                  runtime="onnxruntime"),
                                     output_mode="coco_rle", box_nms_thresh=1.0, **OPTIONS).generate(image)
    theirs = _official(image, "coco_rle", 1.0)
    assert len(ours) == len(theirs) > 0
    assert sum(a["segmentation"] == b["segmentation"] for a, b in zip(ours, theirs)) >= len(ours) - 1
    rng = np.random.default_rng(3)
    for shape in ((7, 9), (1, 1), (64, 33), (5, 300)):  # long runs need several 5-bit groups, and negative deltas
        for mask in (rng.random(shape) > 0.5, np.zeros(shape, bool), np.ones(shape, bool),
                     np.kron(rng.random((shape[0], 1)) > 0.3, np.ones((1, shape[1]), bool))):
            official = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
            assert coco_encode_rle(mask_to_rle(mask)) == {"size": list(official["size"]), "counts": official["counts"].decode()}


def test_official_calls_that_cannot_work_are_refused_at_construction(tiny_sam_artifacts: TinySamArtifacts) -> None:
    from vitdeploy.errors import InputError

    predictor = SamPredictor(tiny_sam_artifacts.encoder, tiny_sam_artifacts.decoder, threads=1,
                                                  runtime="onnxruntime")
    with pytest.raises(InputError, match="takes a vitdeploy.runtime.SamPredictor.*not a segment_anything.modeling.sam.Sam"):
        SamAutomaticMaskGenerator(tiny_official_sam())
    with pytest.raises(InputError, match="exactly one of points_per_side and point_grids"):
        SamAutomaticMaskGenerator(predictor, points_per_side=None)
    with pytest.raises(InputError, match="point_grids has 1 grid.*crop_n_layers=1 needs 2"):
        SamAutomaticMaskGenerator(predictor, points_per_side=None, point_grids=[np.ones((2, 2)) / 2], crop_n_layers=1)
    with pytest.raises(InputError, match="unknown option.*crop_layers"):
        SamAutomaticMaskGenerator(predictor, crop_layers=1)
    with pytest.raises(InputError, match="output_mode 'polygons' is not one of"):
        SamAutomaticMaskGenerator(predictor, output_mode="polygons")
    # The official defaults, every one of them, are accepted as the official names.
    SamAutomaticMaskGenerator(predictor, points_per_side=32, points_per_batch=64, pred_iou_thresh=0.88,
                              stability_score_thresh=0.95, stability_score_offset=1.0, box_nms_thresh=0.7, crop_n_layers=0,
                              crop_nms_thresh=0.7, crop_overlap_ratio=512 / 1500, crop_n_points_downscale_factor=1,
                              point_grids=None, min_mask_region_area=0, output_mode="binary_mask")


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
            "--stability-score-offset", "0.1", "--box-nms-thresh", "1.0", "--threads", "1", "--runtime", "onnxruntime"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    expected = _official(sample_image(48, 80, seed=5), "uncompressed_rle", 1.0)
    assert len(data["masks"]) == len(expected) and data["size"] == [48, 80]
    assert np.asarray(Image.open(tmp_path / "masks.overlay.png")).shape == (48, 80, 3)
    wrong = CliRunner().invoke(cli, [*args[:8], str(tmp_path / "m.png")])
    assert wrong.exit_code == 1 and "must be a .json file" in wrong.output
