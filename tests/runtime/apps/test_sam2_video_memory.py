"""A long video in flat memory: the video predictor keeps no frame's pixels and moves the outputs of frames the next
frame cannot read to a temporary file (vitdeploy.runtime.apps.sam2.past_outputs), with the same masks as when it keeps
everything in memory, as the official predictor does. Memory is measured with tracemalloc (NumPy's allocations are
traced), so the measure sees what the predictor holds, not what the allocator keeps."""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.sam2_video_fixtures import write_clip
from vitdeploy.errors import InputError
from vitdeploy.runtime.apps.sam2.past_outputs import PastOutput, memory_reach

pytest.importorskip("sam2", reason="the official sam2 package is not installed (scripts/test.sh installs it)")
pytest_plugins = ["tests.sam2_video_fixtures"]

LONG = 48  # frames: three times the memory reach of the tiny model (16 frames)
FIRST, LAST = 24, LONG - 1  # the frames between which growth is measured (both past the reach)
#: Growth allowed per frame where outputs are moved, as a share of one frame's moved arrays (48 KB for the tiny model:
#: memory 32 KB, logits 16 KB): what stays in memory per frame, its output's small parts (the pointer's token, 1 KB at
#: this size and at full size, where the moved arrays are 768 KB) and their Python bookkeeping. Measured on an Intel
#: Xeon Ice Lake: 3.5 KB a frame moved, 51.9 KB a frame kept.
FLAT_SHARE = 0.15


def resident_bytes(state: dict[str, Any]) -> int:
    """The bytes of the NumPy arrays a session's per-object outputs hold in memory (a moved output's large parts are
    records, not arrays)."""
    return sum(value.nbytes for name in ("output_dict_per_obj", "temp_output_dict_per_obj")
               for per_obj in state[name].values() for frames in per_obj.values() for out in frames.values()
               for value in dict.values(out) if isinstance(value, np.ndarray))


def predictor_for(files: dict[str, Any], **options: Any):
    from vitdeploy.runtime.apps.sam2.video_predictor import Sam2VideoPredictor

    return Sam2VideoPredictor(files["encoder"], files["decoder"], files["memory_encoder"], files["memory_attention"],
                              threads=2, runtime="onnxruntime", fill_hole_area=0, **options)


def track_long(predictor: Any, clip: Path) -> tuple[dict[int, np.ndarray], dict[int, int], dict[str, Any]]:
    """One object tracked forward through ``clip``: (masks per frame, traced bytes per frame, the state)."""
    tracemalloc.start()
    try:
        state = predictor.init_state(str(clip))
        predictor.add_new_points_or_box(state, frame_idx=0, obj_id=1, points=[[25, 45]], labels=[1])
        masks, traced = {}, {}
        for frame_idx, _, logits in predictor.propagate_in_video(state):
            masks[frame_idx] = np.array(logits)
            del logits
            traced[frame_idx] = tracemalloc.get_traced_memory()[0] - sum(m.nbytes for m in masks.values())
    finally:
        tracemalloc.stop()
    return masks, traced, state


@pytest.fixture(scope="module")
def long_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_clip(tmp_path_factory.mktemp("long") / "clip", frames=LONG)


def test_a_long_clip_tracks_in_flat_memory_with_the_same_masks(sam2_video: dict[str, Any], long_clip: Path) -> None:
    moved = predictor_for(sam2_video)
    kept = predictor_for(sam2_video, frames_in_memory=10 ** 6)  # every output in memory, as the official keeps them
    assert moved.frames_in_memory == memory_reach(moved.settings) == 16
    masks_moved, traced_moved, state_moved = track_long(moved, long_clip)
    masks_kept, traced_kept, state_kept = track_long(kept, long_clip)
    assert sorted(masks_moved) == sorted(masks_kept) == list(range(LONG))
    for t in masks_kept:  # the same bytes read back: the same masks, bit for bit
        assert np.array_equal(masks_moved[t], masks_kept[t]), t
    outputs = state_moved["output_dict_per_obj"][0]["non_cond_frame_outputs"]
    moved_frames = sorted(t for t, out in outputs.items() if isinstance(out, PastOutput))
    assert moved_frames == list(range(1, LONG - 16)) and len(moved_frames) == LONG - 17

    one_output = sum(a.nbytes for a in (outputs[LAST]["maskmem_features"], outputs[LAST]["pred_masks"]))
    grown_kept = (traced_kept[LAST] - traced_kept[FIRST]) / (LAST - FIRST)
    grown_moved = (traced_moved[LAST] - traced_moved[FIRST]) / (LAST - FIRST)
    assert grown_kept >= 0.9 * one_output, (grown_kept, one_output)  # the measure sees a frame's output kept
    assert grown_moved <= FLAT_SHARE * one_output, (grown_moved, one_output)
    assert resident_bytes(state_moved) == resident_bytes(state_kept) - (LONG - 17) * one_output


def test_outputs_read_back_serve_a_reverse_pass_and_a_click(sam2_video: dict[str, Any], long_clip: Path) -> None:
    """Outputs moved during a forward pass are what a reverse pass and a correction click read: the same masks as with
    everything in memory."""
    results = []
    for frames_in_memory in (1, 10 ** 6):
        predictor = predictor_for(sam2_video, frames_in_memory=frames_in_memory)
        state = predictor.init_state(str(long_clip))
        predictor.add_new_points_or_box(state, frame_idx=0, obj_id=1, points=[[25, 45]], labels=[1])
        list(predictor.propagate_in_video(state, max_frame_num_to_track=30))
        _, _, clicked = predictor.add_new_points_or_box(state, frame_idx=20, obj_id=1, points=[[75, 45]], labels=[1],
                                                        clear_old_points=False)
        back = {t: np.array(m) for t, _, m in predictor.propagate_in_video(state, start_frame_idx=30, reverse=True)}
        results.append((np.array(clicked), back))
    (clicked_a, back_a), (clicked_b, back_b) = results
    assert np.array_equal(clicked_a, clicked_b)
    assert sorted(back_a) == sorted(back_b) == list(range(31))
    for t in back_b:
        assert np.array_equal(back_a[t], back_b[t]), t


def test_frames_in_memory_must_be_a_count(sam2_video: dict[str, Any]) -> None:
    for bad in (0, -3, 2.5, True, "16"):
        with pytest.raises(InputError, match=r"frames_in_memory must be a whole number of frames, at least 1, or None"):
            predictor_for(sam2_video, frames_in_memory=bad)
