"""SAM 3's detector on video is the image detector's file: the official video model's detector
(``Sam3ImageOnVideoMultiGPU`` as ``build_sam3_video_model`` builds it, on the same parts and weights) against the
image detector's graph on ONNX Runtime and the NumPy joint score (tiny seeded model)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tests.family_exports import SEED, family_export

pytest.importorskip("sam3", reason="the official sam3 package is not installed (scripts/test.sh installs it)")

#: float32 agreement of the NumPy joint score with the official (its log of a ratio of float32 probabilities)
LOGIT_ABS_MAX = 1e-4
FP32_REL_MAX = 1e-4


def official_video_detector(metadata: dict):
    """``build_sam3_video_model``'s detector call (use_early_fusion, supervise_joint_box_scores=has_presence_token,
    the builder's other defaults) on the parts of the image detector the file was exported from."""
    from sam3.model.sam3_image import Sam3ImageOnVideoMultiGPU

    from vitdeploy.models.sam3_detector import Sam3DetectorArch, load_sam3_detector

    image = load_sam3_detector(Sam3DetectorArch.from_dict(metadata["architecture"]), random_seed=SEED)
    return Sam3ImageOnVideoMultiGPU(
        num_feature_levels=1, backbone=None, transformer=image.transformer, segmentation_head=image.segmentation_head,
        semantic_segmentation_head=None, input_geometry_encoder=image.geometry_encoder, use_early_fusion=True,
        use_dot_prod_scoring=True, dot_prod_scoring=image.dot_prod_scoring, supervise_joint_box_scores=True).eval()


def test_the_video_detectors_scores_are_the_image_files_joint_score(tmp_path_factory: pytest.TempPathFactory) -> None:
    from vitdeploy.families import FAMILIES
    from vitdeploy.metadata import read_onnx_metadata
    from vitdeploy.models.sam3_detector import build_position_encoding
    from vitdeploy.rewrites.sam3_detector import INPUT_NAMES, Sam3Detector
    from vitdeploy.runtime.apps.sam3.scores import video_detection_logits, video_detection_scores
    from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner

    path: Path = family_export(tmp_path_factory, "sam3_detector")[0]
    metadata = read_onnx_metadata(path)
    video = Sam3Detector(official_video_detector(metadata), build_position_encoding(metadata["architecture"]["d_model"]))
    runner = OnnxRuntimeRunner(path, threads=2)
    for inputs in FAMILIES["sam3_detector"].random_input_sets(metadata, [], {}, 3, seed=1):
        with torch.no_grad():
            logits, boxes, masks, presence = (t.numpy() for t in video(*(torch.from_numpy(inputs.feeds[n])
                                                                        for n in INPUT_NAMES)))
        out = runner.run(inputs.feeds)
        ours = video_detection_logits(out["pred_logits"], out["presence_logit"])
        assert np.abs(ours - logits).max() < LOGIT_ABS_MAX, inputs.name
        assert not np.allclose(out["pred_logits"], logits, atol=1e-2)  # the image file's own logits are not these
        scores = video_detection_scores(out["pred_logits"], out["presence_logit"])
        assert np.abs(scores - 1.0 / (1.0 + np.exp(-logits))).max() < LOGIT_ABS_MAX
        for name, want in (("pred_boxes", boxes), ("pred_masks", masks), ("presence_logit", presence)):
            got = out[name]
            assert np.linalg.norm(got - want) <= FP32_REL_MAX * np.linalg.norm(want), (inputs.name, name)


def test_the_joint_logit_is_clamped_as_the_officials() -> None:
    """Scores at the ends: probabilities below inverse_sigmoid's eps give its floor, log(1e-3); the clamp
    to [-10, 10] is never reached from a product of probabilities."""
    from sam3.model.model_misc import inverse_sigmoid

    from vitdeploy.runtime.apps.sam3.scores import video_detection_logits

    logits = np.array([[-30.0, -8.0, 0.0, 3.0, 30.0]], np.float32)
    presence = np.array([[4.0]], np.float32)
    joint = torch.sigmoid(torch.from_numpy(logits)) * torch.sigmoid(torch.from_numpy(presence))
    want = inverse_sigmoid(joint).clamp(min=-10.0, max=10.0).numpy()
    assert np.abs(video_detection_logits(logits, presence) - want).max() < 1e-5
    assert video_detection_logits(logits, presence)[0, 0] == pytest.approx(np.log(1e-3), abs=1e-5)
