"""What the two video predictors' official calls check and read the same way (SAM 2's
:class:`~vitdeploy.runtime.apps.sam2.video_predictor.Sam2VideoPredictor` and SAM 3's tracker,
:class:`~vitdeploy.runtime.apps.sam3.tracker_predictor.Sam3TrackerPredictor`): a frame index, a prompt's points and
labels, how many tracked frames' outputs stay in memory, the memory attention file's bank, the frames a propagation
visits, and the state's bookkeeping when points are stored or cleared and an object is removed. Torch-free."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from vitdeploy.errors import InputError
from vitdeploy.runtime.apps.common.prompts import as_float_array
from vitdeploy.runtime.apps.sam2.past_outputs import memory_reach


def bank_slots(memory_attention: Any) -> tuple[int | None, int | None]:
    """The memory attention graph's bank sizes (frames, pointers): fixed ones, or None where it takes any (a named
    or unknown axis)."""
    shapes = memory_attention.input_shapes()
    dims = (shapes[name][1] for name in ("memory_features", "pointer_tokens"))
    return tuple(int(d) if isinstance(d, (int, np.integer)) and int(d) > 0 else None for d in dims)  # type: ignore


def check_frame(state: dict[str, Any], frame_idx: Any, what: str = "frame_idx") -> int:
    """``frame_idx`` as an int, or an InputError unless it is a frame of the state's video."""
    count = state["num_frames"]
    if isinstance(frame_idx, bool) or not isinstance(frame_idx, (int, np.integer)) or not 0 <= frame_idx < count:
        raise InputError(f"{what} {frame_idx!r} is not a frame of this video: it has {count} frames, 0 to {count - 1}")
    return int(frame_idx)


def prompt_arrays(points: Any, labels: Any, box: Any) -> tuple[np.ndarray, np.ndarray]:
    """``add_new_points_or_box``'s points and labels as (1, N, 2) float32 and (1, N) int32 (N may be 0 with a box),
    refused in the official words when only one of them is given, or neither they nor a box."""
    if (points is not None) != (labels is not None):
        raise InputError("points and labels must be provided together")
    if points is None and box is None:
        raise InputError("at least one of points or box must be provided as input")
    coords = np.zeros((1, 0, 2), np.float32) if points is None else as_float_array(points, "points").astype(np.float32)
    labels_ = np.zeros((1, 0), np.int32) if labels is None else np.asarray(labels, np.int32)
    coords = coords[None] if coords.ndim == 2 else coords
    labels_ = labels_[None] if labels_.ndim == 1 else labels_
    if coords.ndim != 3 or coords.shape[0] != 1 or coords.shape[-1] != 2 or labels_.shape != coords.shape[:2]:
        raise InputError(f"points must be (N, 2) with labels (N,), got {np.shape(points)} and {np.shape(labels)}")
    return coords, labels_


def frames_kept(frames_in_memory: Any, settings: Any) -> int:
    """How many of the most recently tracked frames' outputs stay in memory: ``frames_in_memory`` (a whole number, at
    least 1), or None for as many as the next frame reads (:func:`~vitdeploy.runtime.apps.sam2.past_outputs.
    memory_reach`)."""
    if frames_in_memory is None:
        return memory_reach(settings)
    if isinstance(frames_in_memory, bool) or not isinstance(frames_in_memory, int) or frames_in_memory < 1:
        raise InputError(f"frames_in_memory must be a whole number of frames, at least 1, or None (as many as the "
                         f"next frame reads), not {frames_in_memory!r}")
    return frames_in_memory


def processing_order(state: dict[str, Any], start_frame_idx: Any, max_frame_num_to_track: Any, reverse: bool, *,
                     zero_in_reverse: bool) -> list[int]:
    """The frames ``propagate_in_video`` visits from ``start_frame_idx``: at most ``max_frame_num_to_track`` (None:
    every frame) after it, forward or in ``reverse``. Starting in reverse at frame 0 visits frame 0 where
    ``zero_in_reverse`` (SAM 3's tracker), no frame where not (SAM 2's predictor), as officially."""
    start = check_frame(state, start_frame_idx, "start_frame_idx")
    if max_frame_num_to_track is None:
        max_frame_num_to_track = state["num_frames"]
    if isinstance(max_frame_num_to_track, bool) or not isinstance(max_frame_num_to_track, (int, np.integer)) \
            or max_frame_num_to_track < 0:
        raise InputError(f"max_frame_num_to_track must be a whole number of frames, at least 0, or None (every "
                         f"frame), not {max_frame_num_to_track!r}")
    if reverse:
        end = max(start - max_frame_num_to_track, 0)
        return list(range(start, end - 1, -1)) if start > 0 else ([0] if zero_in_reverse else [])
    end = min(start + max_frame_num_to_track, state["num_frames"] - 1)
    return list(range(start, end + 1))


def drop_object(state: dict[str, Any], obj_idx: int, per_object: tuple[str, ...]) -> list[int]:
    """Renumber the state's objects without ``obj_idx`` (``remove_object``): the ids, both id maps and each per-object
    dict named in ``per_object``; returns the old indices kept, in order."""
    old_ids = state["obj_ids"]
    kept = [i for i in range(len(old_ids)) if i != obj_idx]
    new_of_old = {old: new for new, old in enumerate(kept)}
    state["obj_ids"] = [old_ids[i] for i in kept]
    state["obj_id_to_idx"] = OrderedDict((obj, i) for i, obj in enumerate(state["obj_ids"]))
    state["obj_idx_to_id"] = OrderedDict((i, obj) for i, obj in enumerate(state["obj_ids"]))
    for name in per_object:
        state[name] = {new_of_old[k]: v for k, v in state[name].items() if k in new_of_old}
    return kept


def object_to_remove(state: dict[str, Any], obj_id: Any, strict: bool, missing: str) -> tuple[int | None, set[int]]:
    """``remove_object``'s object index and the frames it has prompts on: (None, no frames) for an id the state does
    not have, refused in one line saying ``missing`` where ``strict``."""
    obj_idx = state["obj_id_to_idx"].get(obj_id)
    if obj_idx is None:
        if strict:
            raise InputError(f"cannot remove object id {obj_id!r}: {missing} (the objects are {state['obj_ids']})")
        return None, set()
    return obj_idx, set(state["point_inputs_per_obj"][obj_idx]) | set(state["mask_inputs_per_obj"][obj_idx])


def clear_frame_prompts(state: dict[str, Any], frame_idx: Any, obj_id: Any,
                        index_of: Callable[[dict[str, Any], Any], int]) -> tuple[int, int]:
    """``clear_all_points_in_frame``'s first step: the frame checked, then the object's index (``index_of``, the
    predictor's ``_obj_id_to_idx``), and that object's points, mask and not yet consolidated outputs on the frame
    dropped; returns (frame_idx, obj_idx)."""
    frame_idx = check_frame(state, frame_idx)
    obj_idx = index_of(state, obj_id)
    state["point_inputs_per_obj"][obj_idx].pop(frame_idx, None)
    state["mask_inputs_per_obj"][obj_idx].pop(frame_idx, None)
    temp = state["temp_output_dict_per_obj"][obj_idx]
    temp["cond_frame_outputs"].pop(frame_idx, None)
    temp["non_cond_frame_outputs"].pop(frame_idx, None)
    return frame_idx, obj_idx


def store_points(state: dict[str, Any], obj_idx: int, frame_idx: int, coords: np.ndarray, labels: np.ndarray,
                 clear_old_points: bool) -> dict[str, np.ndarray]:
    """An object's points on a frame, after the ones it had there unless ``clear_old_points``, kept in the state and
    returned as the decoder's ``point_inputs`` (float32 coordinates)."""
    per_frame = state["point_inputs_per_obj"][obj_idx]
    old = None if clear_old_points else per_frame.get(frame_idx)
    if old is not None:
        coords = np.concatenate([old["point_coords"], coords], axis=1)
        labels = np.concatenate([old["point_labels"], labels], axis=1)
    per_frame[frame_idx] = {"point_coords": coords.astype(np.float32), "point_labels": labels}
    return per_frame[frame_idx]


__all__ = [
    "bank_slots", "check_frame", "clear_frame_prompts", "drop_object", "frames_kept", "object_to_remove",
    "processing_order", "prompt_arrays", "store_points",
]
