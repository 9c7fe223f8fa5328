"""The official predictor example's calls, unchanged, on ``segment_anything.SamPredictor`` and on vitdeploy's.

The calls of segment-anything's ``notebooks/predictor_example.ipynb`` (one point, a second point with a
negative label, a box, a box with a point, the best low-res logits fed back as ``mask_input``,
``return_logits``, batched boxes through ``transform.apply_boxes_torch`` and ``predict_torch``), plus a
BGR image and ``reset_image``, made on both predictors with the same tiny seeded model. The attribute
values official code reads (``original_size``, ``input_size``, ``transform.target_length``,
``model.image_format``, ``model.mask_threshold``, ``device``) are the same.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.sam_tiny import SEED, TinySamArtifacts, sample_image, tiny_official_sam
from vitdeploy.runtime import SamPredictor
from vitdeploy.validation.masks import MaskTolerance, compare_masks

#: Per-mask agreement asked of the same model on the same image: the two compute the same FP32 numbers
#: (logits within ~1e-6 of their scale), so a mask may differ only where a logit sits on the threshold.
EXAMPLE_MASKS = MaskTolerance("official example", iou_min=0.998, dice_min=0.999)
SCORE_ABS = 1e-5

pytest_plugins = ["tests.sam_tiny_fixtures"]


@pytest.fixture(scope="module")
def pair(tiny_sam_artifacts: TinySamArtifacts):
    from segment_anything import SamPredictor as OfficialPredictor

    return OfficialPredictor(tiny_official_sam(SEED)), SamPredictor(tiny_sam_artifacts.encoder, tiny_sam_artifacts.decoder,
                                                                     threads=2, runtime="onnxruntime")


def same(ref: tuple, out: tuple, label: str) -> None:
    ref = tuple(r.detach().cpu().numpy() if isinstance(r, torch.Tensor) else r for r in ref)
    out = tuple(o.detach().cpu().numpy() if isinstance(o, torch.Tensor) else o for o in out)
    assert out[0].shape == ref[0].shape and out[0].dtype == ref[0].dtype, (label, out[0].shape, ref[0].shape)
    masks = compare_masks(ref[0], out[0], EXAMPLE_MASKS, label=label)  # logits (return_logits) thresholded at 0
    assert masks, masks.summary()
    worst = float(np.max(np.abs(ref[1] - out[1])))
    print(f"{label}: min IoU {min(masks.iou):.6f} over {len(masks.iou)} mask(s), scores within {worst:.1e}")
    assert worst <= SCORE_ABS, f"{label}: scores differ by {worst:.2e} > {SCORE_ABS}"
    assert out[2].shape == ref[2].shape


def test_attributes_official_code_reads(pair) -> None:
    official, ours = pair
    official.reset_image()
    ours.reset_image()
    # Before an image: the official reset_image clears is_image_set and features (original_size/input_size are
    # set only by set_image); ours has them as None.
    assert official.is_image_set is ours.is_image_set is False and official.features is ours.features is None
    assert ours.original_size is None and ours.input_size is None
    image = sample_image(48, 80, seed=1)
    official.set_image(image)
    ours.set_image(image)
    assert ours.original_size == official.original_size == (48, 80)
    assert ours.input_size == tuple(official.input_size) and isinstance(ours.input_size, tuple)
    assert ours.transform.target_length == official.transform.target_length
    assert ours.model.image_format == official.model.image_format and ours.model.mask_threshold == official.model.mask_threshold
    assert ours.model.image_encoder.img_size == official.model.image_encoder.img_size
    assert str(ours.device) == str(official.device) == "cpu"
    assert ours.get_image_embedding().shape == tuple(official.get_image_embedding().shape)
    # The transform's methods give the official numbers, torch in -> torch out.
    coords = np.array([[10.0, 20.0], [79.0, 47.0]])
    np.testing.assert_allclose(ours.transform.apply_coords(coords, image.shape[:2]),
                               official.transform.apply_coords(coords, image.shape[:2]), rtol=0, atol=1e-12)
    boxes = torch.tensor([[3.0, 4.0, 60.0, 40.0], [0.0, 0.0, 80.0, 48.0]])
    got, ref = ours.transform.apply_boxes_torch(boxes, image.shape[:2]), official.transform.apply_boxes_torch(boxes, image.shape[:2])
    assert isinstance(got, torch.Tensor) and got.dtype == ref.dtype and torch.allclose(got, ref)
    np.testing.assert_array_equal(ours.transform.apply_image(image), official.transform.apply_image(image))


def test_the_predictor_example_runs_unchanged_on_both(pair) -> None:
    """Each block of the notebook, on each predictor, with the same arguments."""
    image = sample_image(90, 70, seed=2)
    results: dict[str, list] = {}
    for predictor in pair:
        calls = results.setdefault(type(predictor).__module__.split(".")[0], [])
        predictor.set_image(image)
        input_point = np.array([[30, 45]])
        input_label = np.array([1])
        masks, scores, logits = predictor.predict(point_coords=input_point, point_labels=input_label, multimask_output=True)
        calls.append(("one point", (masks, scores, logits)))
        input_point = np.array([[30, 45], [50, 20]])
        input_label = np.array([1, 0])
        mask_input = logits[np.argmax(scores), :, :]
        calls.append(("two points, mask_input", predictor.predict(
            point_coords=input_point, point_labels=input_label, mask_input=mask_input[None, :, :], multimask_output=False)))
        input_box = np.array([10, 15, 60, 80])
        calls.append(("box", predictor.predict(point_coords=None, point_labels=None, box=input_box[None, :],
                                                multimask_output=False)))
        calls.append(("box and point", predictor.predict(point_coords=np.array([[40, 60]]), point_labels=np.array([0]),
                                                         box=input_box, multimask_output=False)))
        calls.append(("logits", predictor.predict(point_coords=input_point, point_labels=input_label, return_logits=True)))
        input_boxes = torch.tensor([[5, 5, 40, 60], [20, 30, 65, 88], [0, 0, 70, 90]], device=predictor.device)
        transformed_boxes = predictor.transform.apply_boxes_torch(input_boxes, image.shape[:2])
        calls.append(("batched boxes", predictor.predict_torch(point_coords=None, point_labels=None, boxes=transformed_boxes,
                                                               multimask_output=False)))
        points = predictor.transform.apply_coords_torch(torch.tensor([[[30, 45]], [[50, 20]]]), image.shape[:2])
        calls.append(("batched points", predictor.predict_torch(points, torch.tensor([[1], [1]]))))
        predictor.set_image(np.ascontiguousarray(image[..., ::-1]), image_format="BGR")
        calls.append(("BGR", predictor.predict(point_coords=np.array([[30, 45]]), point_labels=np.array([1]))))
        predictor.reset_image()
        assert not predictor.is_image_set
    (official_calls, our_calls) = results["segment_anything"], results["vitdeploy"]
    for (label, ref), (_, out) in zip(official_calls, our_calls, strict=True):
        same(ref, out, label)
    batched = dict(our_calls)["batched boxes"]
    assert isinstance(batched[0], torch.Tensor) and tuple(batched[0].shape) == (3, 1, 90, 70) and batched[0].dtype == torch.bool
    assert dict(our_calls)["logits"][0].dtype == np.float32
