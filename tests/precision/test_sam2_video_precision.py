"""SAM 2's video path in lower precision, judged by the masks it tracks: the image encoder in FP16 and INT8 (calibrated
on images) and memory attention in FP16 (calibrated on its inputs recorded while tracking), each against all-FP32 on
the synthetic 30-frame clip, every frame and object, by the named mask budgets SAM 1 uses."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.cli_helpers import run
from tests.sam2_video_fixtures import FRAMES
from vitdeploy.validation.masks import compare_masks

pytest.importorskip("sam2", reason="the official sam2 package is not installed (scripts/test.sh installs it)")
pytest_plugins = ["tests.sam2_video_fixtures"]

PROMPTS = dict(points=["0:1:25,45"], boxes=["10:2:100,25,130,50"])


def tracked_masks(files: dict[str, Any], **replace: Path) -> dict[int, np.ndarray]:
    """frame -> (objects, H, W) masks of the two objects tracked forward and backward, as ``vitdeploy track`` does."""
    from vitdeploy.runtime.apps.sam2.video_predictor import Sam2VideoPredictor
    from vitdeploy.runtime.apps.verbs.tracking import FramePrompt, track

    chosen = [replace.get(k, files[k]) for k in ("encoder", "decoder", "memory_encoder", "memory_attention")]
    predictor = Sam2VideoPredictor(*chosen, threads=2, runtime="onnxruntime")
    state = predictor.init_state(files["clip"])
    prompts = [FramePrompt(0, 1, points=[(25.0, 45.0, 1)]), FramePrompt(10, 2, box=(100.0, 25.0, 130.0, 50.0))]
    return {frame: logits[:, 0] > 0 for frame, _, logits, _ in track(predictor, state, prompts)}


@pytest.fixture(scope="module")
def lower_precision(sam2_video: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The encoder in FP16 and INT8 (bundled images) and memory attention in FP16 (inputs recorded on the clip)."""
    root = tmp_path_factory.mktemp("sam2_precision")
    checkpoint = str(sam2_video["checkpoint"])
    files = {}
    for precision in ("fp16", "int8"):
        files[f"encoder_{precision}"] = root / f"encoder.{precision}.onnx"
        code, output = run("calibrate", str(sam2_video["encoder"]), "-p", precision, "-o", str(files[f"encoder_{precision}"]),
                           "--checkpoint", checkpoint, "--threads", "2")
        assert code == 0, output
    recorded = root / "memory_attention_inputs.npz"
    code, output = run("track", "-e", str(sam2_video["encoder"]), "-d", str(sam2_video["decoder"]),
                       "-m", str(sam2_video["memory_encoder"]), "-a", str(sam2_video["memory_attention"]),
                       "-i", str(sam2_video["clip"]), "-p", PROMPTS["points"][0], "-b", PROMPTS["boxes"][0],
                       "-o", str(root / "tracks"), "--no-overlay", "--threads", "2",
                       "--record-inputs", f"memory_attention:{recorded}")
    assert code == 0, output
    kept = re.search(rf"recorded (\d+) of {2 * (FRAMES - 1)} memory_attention input set\(s\)", output)
    assert kept and 8 <= int(kept.group(1)) <= 16, output  # every call to 16, then thinned to every other, ...
    files["memory_attention_fp16"] = root / "memory_attention.fp16.onnx"
    code, output = run("calibrate", str(sam2_video["memory_attention"]), "-p", "fp16", "--feeds", str(recorded),
                       "-o", str(files["memory_attention_fp16"]), "--checkpoint", checkpoint, "--threads", "2")
    assert code == 0 and "parity vs eager official" in output and "FAIL" not in output, output
    return files


@pytest.fixture(scope="module")
def fp32_masks(sam2_video: dict[str, Any]) -> dict[int, np.ndarray]:
    return tracked_masks(sam2_video)


@pytest.mark.parametrize("graph,precision", [("encoder", "fp16"), ("encoder", "int8"), ("memory_attention", "fp16")])
def test_lower_precision_tracks_within_its_mask_budget(sam2_video: dict[str, Any], lower_precision: dict[str, Path],
                                                       fp32_masks: dict[int, np.ndarray], graph: str,
                                                       precision: str) -> None:
    reference = fp32_masks
    candidate = tracked_masks(sam2_video, **{graph: lower_precision[f"{graph}_{precision}"]})
    assert sorted(candidate) == sorted(reference) == list(range(FRAMES))
    worst = 1.0
    for frame, masks in reference.items():
        for obj in range(masks.shape[0]):
            agreement = compare_masks(masks[obj], candidate[frame][obj], precision, label=f"{graph} {precision}/"
                                                                                         f"frame {frame}/object {obj}")
            assert agreement, agreement.summary()
            worst = min(worst, min(agreement.iou))
    print(f"{graph} {precision}: worst mask IoU vs FP32 over {FRAMES} frames x 2 objects = {worst:.5f}")
