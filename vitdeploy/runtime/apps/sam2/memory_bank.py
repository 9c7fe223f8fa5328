"""Which memories a SAM 2 frame attends to, and the memory-attention graph's inputs that hold them (torch-free).

The selection is ``SAM2Base._prepare_memory_conditioned_features`` (and ``select_closest_cond_frames``) line for line:
the prompted (conditioning) frames, the ``num_maskmem - 1`` frames before the current one in tracking order (every
``memory_temporal_stride_for_eval``-th, the last one always), the object pointers of the prompted frames (only those
in the past with ``only_obj_ptrs_in_the_past_for_eval``) and of up to ``max_obj_ptrs_in_encoder - 1`` frames before,
each with its signed (or absolute) frame distance. What the official code computes from those with weights -- the
temporal encodings, the pointers' projection and no-object mixing -- is in the graph
(:mod:`vitdeploy.rewrites.sam2_memory`); this module only chooses and stacks.

A frame's output (``out``) is a dict with ``maskmem_features`` (1, mem_dim, h, w; bfloat16 as the official predictor
stores it), ``obj_token`` (C,) (the SAM output token of the chosen mask) and ``obj_presence`` (its
``lambda_is_obj_appearing``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vitdeploy.errors import InputError


@dataclass(frozen=True)
class TrackerSettings:
    """The official ``SAM2Base`` settings the selection and the per-frame choices follow (the memory attention file's
    ``tracker`` metadata)."""

    num_maskmem: int
    max_obj_ptrs_in_encoder: int
    max_cond_frames_in_attn: int
    memory_temporal_stride_for_eval: int
    only_obj_ptrs_in_the_past_for_eval: bool
    use_signed_tpos_enc_to_obj_ptrs: bool
    multimask_output_in_sam: bool
    multimask_min_pt_num: int
    multimask_max_pt_num: int
    multimask_output_for_tracking: bool
    use_multimask_token_for_obj_ptr: bool
    pred_obj_scores: bool
    soft_no_obj_ptr: bool
    use_mask_input_as_output_without_sam: bool
    binarize_mask_from_pts_for_mem_enc: bool
    no_mem_embed: tuple[float, ...]
    mask_downsample: dict[str, Any]

    @classmethod
    def from_metadata(cls, tracker: dict[str, Any]) -> TrackerSettings:
        from dataclasses import fields

        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n not in tracker]
        if missing:
            raise InputError(f"the memory attention file's 'tracker' metadata lacks {missing}: export it again with "
                             "'vitdeploy export -r sam2.1_hiera_tiny_memory_attention' (or the size you use)")
        values = {n: tracker[n] for n in names}
        values["no_mem_embed"] = tuple(float(v) for v in tracker["no_mem_embed"])
        return cls(**values)


def select_closest_cond_frames(frame_idx: int, cond_outputs: dict[int, Any], max_cond_frame_num: int):
    """``sam2.modeling.sam2_utils.select_closest_cond_frames``: (selected, unselected) prompted frames."""
    if max_cond_frame_num == -1 or len(cond_outputs) <= max_cond_frame_num:
        return cond_outputs, {}
    selected = {}
    before = max((t for t in cond_outputs if t < frame_idx), default=None)
    if before is not None:
        selected[before] = cond_outputs[before]
    after = min((t for t in cond_outputs if t >= frame_idx), default=None)
    if after is not None:
        selected[after] = cond_outputs[after]
    remaining = max_cond_frame_num - len(selected)
    closest = sorted((t for t in cond_outputs if t not in selected), key=lambda t: abs(t - frame_idx))[:remaining]
    selected.update((t, cond_outputs[t]) for t in closest)
    return selected, {t: v for t, v in cond_outputs.items() if t not in selected}


@dataclass
class MemoryBank:
    """The memories one frame attends to: (t_pos, out) frames and (signed distance, out) pointers, in the official
    order, and the pointers' distance normaliser ``max_obj_ptrs_in_encoder - 1`` (capped by the video length)."""

    frames: list[tuple[int, dict[str, Any]]]
    pointers: list[tuple[int, dict[str, Any]]]
    t_diff_max: int

    def feeds(self, frame_slots: int | None = None, pointer_slots: int | None = None) -> dict[str, np.ndarray]:
        """The memory attention graph's bank inputs. ``frame_slots``/``pointer_slots``: a graph of fixed bank size
        (padded with masked entries; an InputError when the bank needs more); None: as many as in use (at least one
        pointer entry, masked when there is none)."""
        f, p = len(self.frames), len(self.pointers)
        frames_n = f if frame_slots is None else frame_slots
        pointers_n = max(p, 1) if pointer_slots is None else pointer_slots
        if f > frames_n or p > pointers_n:
            raise InputError(f"this frame attends to {f} memory frame(s) and {p} object pointer(s), more than the memory "
                             f"attention file's fixed bank ({frames_n} frames, {pointers_n} pointers) holds: export it "
                             "with larger [memory] frame_slots/pointer_slots, or use a file whose bank is dynamic (the "
                             "ONNX export, on ONNX Runtime or OpenVINO)")
        first = self.frames[0][1]["maskmem_features"]
        features = np.zeros((1, frames_n, *first.shape[1:]), np.float32)
        tpos = np.zeros((1, frames_n), np.int64)
        memory_mask = np.zeros((1, frames_n), np.float32)
        for i, (t_pos, out) in enumerate(self.frames):
            features[0, i] = out["maskmem_features"][0].astype(np.float32)
            tpos[0, i] = t_pos
            memory_mask[0, i] = 1.0
        channels = self.frames[0][1]["obj_token"].shape[-1]  # every output has a token; a bank has a frame
        tokens = np.zeros((1, pointers_n, channels), np.float32)
        presence = np.ones((1, pointers_n), np.float32)
        ptpos = np.zeros((1, pointers_n), np.float32)
        pointer_mask = np.zeros((1, pointers_n), np.float32)
        for i, (distance, out) in enumerate(self.pointers):
            tokens[0, i] = out["obj_token"]
            presence[0, i] = out["obj_presence"]
            ptpos[0, i] = np.float32(distance) / np.float32(self.t_diff_max)  # float32, as torch divides the int tensor
            pointer_mask[0, i] = 1.0
        return {"memory_features": features, "memory_tpos": tpos, "memory_mask": memory_mask, "pointer_tokens": tokens,
                "pointer_presence": presence, "pointer_tpos": ptpos, "pointer_mask": pointer_mask}


def select_memory(frame_idx: int, output_dict: dict[str, dict[int, Any]], settings: TrackerSettings, num_frames: int,
                  reverse: bool, selected_frames: list[int] | None = None) -> MemoryBank:
    """The bank of a frame that is not an initial conditioning frame (``_prepare_memory_conditioned_features``).

    ``selected_frames``: SAM 3's memory selection (``use_memory_selection``; :func:`frame_filter`'s list, oldest
    first): the recent memories and pointers are taken from it, as ``Sam3TrackerBase`` takes them, instead of from
    the last frames in tracking order."""
    cond = output_dict["cond_frame_outputs"]
    non_cond = output_dict["non_cond_frame_outputs"]
    if not cond:
        raise InputError("this object has no prompted frame to track from: add points, a box or a mask first")
    selected, unselected = select_closest_cond_frames(frame_idx, cond, settings.max_cond_frames_in_attn)
    frames: list[tuple[int, dict[str, Any]]] = [(0, out) for out in selected.values()]
    stride = settings.memory_temporal_stride_for_eval
    for t_pos in range(1, settings.num_maskmem):
        t_rel = settings.num_maskmem - t_pos  # how many frames before the current one
        if selected_frames is not None:
            if t_rel > len(selected_frames):
                continue
            prev = selected_frames[-t_rel]
        elif t_rel == 1:
            prev = frame_idx + 1 if reverse else frame_idx - 1
        elif not reverse:
            prev = ((frame_idx - 2) // stride) * stride - (t_rel - 2) * stride
        else:
            prev = -(-(frame_idx + 2) // stride) * stride + (t_rel - 2) * stride
        out = non_cond.get(prev, unselected.get(prev))
        if out is not None:
            frames.append((t_pos, out))

    max_pointers = min(num_frames, settings.max_obj_ptrs_in_encoder)
    if settings.only_obj_ptrs_in_the_past_for_eval:
        pointer_cond = {t: o for t, o in selected.items() if (t >= frame_idx if reverse else t <= frame_idx)}
    else:
        pointer_cond = selected
    sign = -1 if reverse else 1
    pointers = [((frame_idx - t) * sign if settings.use_signed_tpos_enc_to_obj_ptrs else abs(frame_idx - t), out)
                for t, out in pointer_cond.items()]
    for t_diff in range(1, max_pointers):
        if selected_frames is not None:
            if t_diff >= len(selected_frames):  # as the official loop stops: the oldest selected frame gives none
                break
            t = selected_frames[-t_diff]
        else:
            t = frame_idx + t_diff if reverse else frame_idx - t_diff
            if t < 0 or t >= num_frames:
                break
        out = non_cond.get(t, unselected.get(t))
        if out is not None:
            pointers.append((t_diff, out))
    return MemoryBank(frames, pointers, max_pointers - 1)


def frame_filter(output_dict: dict[str, dict[int, Any]], reverse: bool, frame_idx: int, num_frames: int,
                 settings: TrackerSettings, threshold: float) -> list[int]:
    """``Sam3TrackerBase.frame_filter``: the tracked frames (every ``memory_temporal_stride_for_eval``-th, back from
    the previous one in tracking order) whose ``eff_iou_score`` is above ``threshold`` (``mf_threshold``), at most
    ``max_obj_ptrs_in_encoder - 1`` of them, oldest first, and the previous frame always; none on the first frame of
    the direction tracked."""
    if (frame_idx == 0 and not reverse) or (frame_idx == num_frames - 1 and reverse):
        return []
    max_num = min(num_frames, settings.max_obj_ptrs_in_encoder)
    stride = settings.memory_temporal_stride_for_eval
    if not reverse:
        order, must_include = range(frame_idx - 1, 0, -stride), frame_idx - 1
    else:
        order, must_include = range(frame_idx + 1, num_frames, stride), frame_idx + 1
    non_cond = output_dict["non_cond_frame_outputs"]
    valid: list[int] = []
    for i in order:
        out = non_cond.get(i)
        if out is None or "eff_iou_score" not in out:
            continue
        if out["eff_iou_score"] > threshold:
            valid.insert(0, i)
        if len(valid) >= max_num - 1:
            break
    if must_include not in valid:
        valid.append(must_include)
    return valid


__all__ = ["MemoryBank", "TrackerSettings", "frame_filter", "select_closest_cond_frames", "select_memory"]
