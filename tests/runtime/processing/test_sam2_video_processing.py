"""SAM 2's video processing in NumPy against the official code (or, for hole filling, whose official kernel is CUDA-only,
OpenCV's connected components): frames as the official loader makes them, bfloat16 memories, hole filling, the
non-overlap constraint and the mask-prompt path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tests.sam2_video_fixtures import write_clip
from vitdeploy.errors import InputError
from vitdeploy.runtime.processing import sam2_masks
from vitdeploy.runtime.processing.video_frames import VideoFrames

#: Float32 arithmetic in another order (einsum vs PyTorch's kernels).
ATOL = 1e-5


def test_frames_are_the_official_loaders_bit_for_bit(tmp_path: Path) -> None:
    sam2_misc = pytest.importorskip("sam2.utils.misc", reason="the official sam2 package is not installed")
    clip = write_clip(tmp_path / "clip", frames=3, size=(90, 130))
    images, height, width = sam2_misc.load_video_frames(str(clip), 64, offload_video_to_cpu=True,
                                                        compute_device=torch.device("cpu"))
    frames = VideoFrames(clip, 64)
    assert (len(frames), frames.height, frames.width) == (3, height, width) == (3, 90, 130)
    for i in range(3):
        assert np.array_equal(frames.model_input(i)[0], images[i].numpy()), i
    assert frames.original(1).shape == (90, 130, 3)


def test_frames_are_not_held_in_memory_and_read_back_the_same(tmp_path: Path) -> None:
    """A folder's frames are read from their files when asked for, a video file's from a temporary file: opening 40
    frames holds less than one frame (tracemalloc sees NumPy's allocations), and each frame reads back as decoded."""
    import tracemalloc

    cv2 = pytest.importorskip("cv2", reason="opencv-python-headless is not installed")
    from PIL import Image

    clip = write_clip(tmp_path / "clip", frames=40, size=(90, 130))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        frames = VideoFrames(clip, 256)
        held = tracemalloc.get_traced_memory()[0] - before  # the frame files' names and numbers
    finally:
        tracemalloc.stop()
    assert held < 256 * 256 * 3, held  # less than one resized frame, for 40 of them
    assert np.array_equal(frames.resized(7), np.asarray(Image.open(clip / "00007.jpg").convert("RGB").resize((256, 256))))

    video = tmp_path / "clip.mp4"
    writer = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"mp4v"), 10, (130, 90))
    for i in range(12):
        writer.write(np.asarray(Image.open(clip / f"{i:05d}.jpg"))[:, :, ::-1])
    writer.release()
    capture, decoded = cv2.VideoCapture(str(video)), []
    while True:
        ok, bgr = capture.read()
        if not ok:
            break
        decoded.append(np.ascontiguousarray(bgr[:, :, ::-1]))
    from_file = VideoFrames(video, 64)
    assert len(from_file) == len(decoded) == 12
    for i in (0, 5, 11):
        assert np.array_equal(from_file.original(i), decoded[i]), i
        assert np.array_equal(from_file.resized(i), np.asarray(Image.fromarray(decoded[i]).resize((64, 64)))), i


def test_bad_frame_folders_are_refused_by_name(tmp_path: Path) -> None:
    clip = write_clip(tmp_path / "clip", frames=4)
    (clip / "00002.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    with pytest.raises(InputError, match=r"frame 2 \('00002.jpg'\) cannot be read .*extract the frames again"):
        VideoFrames(clip, 64)
    named = tmp_path / "named"
    named.mkdir()
    (named / "first.jpg").write_bytes((clip / "00000.jpg").read_bytes())
    with pytest.raises(InputError, match=r"not named by their frame index"):
        VideoFrames(named, 64)
    write_clip(tmp_path / "sizes", frames=2)
    write_clip(tmp_path / "other", frames=3, size=(50, 70))
    (tmp_path / "sizes" / "00002.jpg").write_bytes((tmp_path / "other" / "00002.jpg").read_bytes())
    with pytest.raises(InputError, match=r"frame 2 is 70x50 but frame 0 is 160x120"):
        VideoFrames(tmp_path / "sizes", 64)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=r"no frames in"):
        VideoFrames(tmp_path / "empty", 64)
    with pytest.raises(InputError, match=r"no video or frame folder at"):
        VideoFrames(tmp_path / "missing", 64)


def test_bfloat16_storage_rounds_as_torch() -> None:
    x = np.random.default_rng(0).standard_normal(4096).astype(np.float32) * 50
    ties = np.array([1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, -(1.0 + 2.0 ** -8)], np.float32)  # halfway: to even
    for values in (x, ties):
        expected = torch.from_numpy(values).to(torch.bfloat16).float().numpy()
        assert np.array_equal(sam2_masks.to_bfloat16(values).astype(np.float32), expected)


def test_fill_holes_fills_small_background_regions_8_connected() -> None:
    import cv2

    pytest.importorskip("scipy", reason="hole filling needs SciPy")
    rng = np.random.default_rng(1)
    scores = rng.standard_normal((3, 1, 48, 48)).astype(np.float32) + 0.8  # mostly foreground, many small holes
    filled = sam2_masks.fill_holes(scores, max_area=8)
    for i in range(3):
        count, labels, stats, _ = cv2.connectedComponentsWithStats((scores[i, 0] <= 0).astype(np.uint8), connectivity=8)
        small = np.isin(labels, [k for k in range(1, count) if stats[k, cv2.CC_STAT_AREA] <= 8])
        expected = np.where(small, np.float32(0.1), scores[i, 0])
        assert small.any() and np.array_equal(filled[i, 0], expected), i


def test_non_overlap_is_the_officials() -> None:
    sam2_base = pytest.importorskip("sam2.modeling.sam2_base", reason="the official sam2 package is not installed")
    scores = np.random.default_rng(2).standard_normal((3, 1, 20, 24)).astype(np.float32) * 5
    official = sam2_base.SAM2Base._apply_non_overlapping_constraints(None, torch.from_numpy(scores)).numpy()
    assert np.array_equal(sam2_masks.non_overlapping(scores), official)


def test_mask_prompt_path_is_the_officials() -> None:
    """add_new_mask's resize (antialiased, >= 0.5), _use_mask_as_output's logits, and mask_downsample's convolution."""
    rng = np.random.default_rng(3)
    mask = rng.random((90, 130)) > 0.6
    resized = F.interpolate(torch.from_numpy(mask)[None, None].float(), size=(64, 64), mode="bilinear",
                            align_corners=False, antialias=True)
    official = (resized >= 0.5).float()
    mine = sam2_masks.resize_mask_input(mask, 64)
    differ = mine != official.numpy()  # only where the resized value is 0.5 up to rounding (a random mask has many)
    assert np.all(np.abs(resized.numpy()[differ] - 0.5) < 1e-6), resized.numpy()[differ]
    high = official * 20.0 - 10.0
    low = F.interpolate(high, size=(16, 16), align_corners=False, mode="bilinear", antialias=True)
    assert np.allclose(sam2_masks.mask_as_output(official.numpy()), low.numpy(), atol=ATOL)
    conv = torch.nn.Conv2d(1, 1, kernel_size=4, stride=4)
    settings = {"weight": conv.weight.detach().reshape(4, 4).tolist(), "bias": float(conv.bias), "kernel": 4, "stride": 4}
    with torch.no_grad():
        expected = conv(official).numpy()
    assert np.allclose(sam2_masks.downsample_mask_prompt(official.numpy(), settings), expected, atol=ATOL)
