"""SAM 2's video predictor on exported files, torch-free: ``sam2.sam2_video_predictor.SAM2VideoPredictor``'s calls.

``Sam2VideoPredictor(image_encoder, decoder, memory_encoder, memory_attention)`` takes the four files ``vitdeploy
export`` writes for one SAM 2 model (``-r sam2.1_hiera_tiny``, ``_decoder``, ``_memory_encoder``,
``_memory_attention``) and answers the official calls with their meanings: ``init_state`` (a folder of JPEG frames or
a video file), ``add_new_points_or_box`` (several objects, several frames; clicks on a tracked frame correct it),
``add_new_mask``, ``propagate_in_video`` (forward or reverse, a start frame, a frame budget), ``clear_all_prompts_in_frame``,
``remove_object``, ``reset_state``. The inference state is the official dictionary (the same keys: per-object inputs,
prompted and tracked frame outputs, temporary outputs until the next propagation), its tensors NumPy arrays, and
memories are kept as the official predictor keeps them: in bfloat16, per object, the most recent frame's features
cached. Unlike the official predictor, memory stays flat on a long video: no frame's pixels are held
(:mod:`vitdeploy.runtime.processing.video_frames`), and the outputs of frames further back than the next frame reads
go to a temporary file, read back only when a later call needs them (:mod:`vitdeploy.runtime.apps.sam2.past_outputs`).

Each official model call is one graph: the image encoder per frame, memory attention (the bank chosen by
:mod:`vitdeploy.runtime.apps.sam2.memory_bank`), the prompt encoder + mask decoder, the memory encoder; the choices
between calls (multimask or not, the best mask, the object pointer's token, no-object scores, hole filling) are the
official ones in NumPy (:mod:`vitdeploy.runtime.processing.sam2_masks`).

Returned masks are (objects, 1, H, W) float32 logits at the video's size, as the official ones; they are NumPy arrays
that also answer ``.cpu()``, ``.numpy()`` and ``.detach()``, so the official examples'
``(out_mask_logits[i] > 0.0).cpu().numpy()`` runs unchanged. Errors are :class:`vitdeploy.errors.InputError` (a
``ValueError`` would be the official one's for a bad prompt, ``RuntimeError`` for a missing one): one line naming the
fix.

Two differences, both where the official code cannot run as configured: hole filling (``fill_hole_area``, 8 as
``build_sam2_video_predictor`` sets it) needs the official CUDA extension, which CPU installs lack (then it skips the
step with a warning); here it runs with SciPy. And the official predictor stops with a dtype error on the CPU in
float32 when an object's memory has no object pointer (an object prompted later than the frame tracked: its bfloat16
memories reach a float32 layer); here they are read as float32, as ``torch.cat`` promotes them whenever a pointer is
there.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import numpy as np

from vitdeploy.errors import InputError
from vitdeploy.runtime.apps.sam2.past_outputs import move_past_output
from vitdeploy.runtime.apps.sam2.video_calls import (check_frame, clear_frame_prompts, drop_object, object_to_remove,
                                                     processing_order, prompt_arrays, store_points)
from vitdeploy.runtime.apps.sam2.track_step import TrackStep
from vitdeploy.runtime.apps.common.files import OpenModel
from vitdeploy.runtime.apps.common.prompts import check_prompts_inside
from vitdeploy.runtime.apps.sam2.files import VIDEO, VIDEO_FILES, check_video_files
from vitdeploy.runtime.backends.base import Runner
from vitdeploy.runtime.deploy.loader import OpenOptions
from vitdeploy.runtime.deploy.plan import ModelPlan
from vitdeploy.runtime.processing.sam2_masks import NO_OBJ_SCORE, non_overlapping, resize_mask_input
from vitdeploy.runtime.processing.recorded_inputs import RecordsInputs
from vitdeploy.runtime.processing.sam2_transforms import resize_bilinear
from vitdeploy.runtime.processing.video_frames import VideoFrames

#: The predictor's graphs, by attribute name.
GRAPHS = tuple(role for role, _ in VIDEO_FILES)


class Logits(np.ndarray):
    """Mask logits as a NumPy array that also answers the ``torch.Tensor`` calls the official examples make on them."""

    def cpu(self) -> Logits:
        return self

    def detach(self) -> Logits:
        return self

    def numpy(self) -> np.ndarray:
        return self.view(np.ndarray)


class Sam2VideoPredictor(TrackStep, RecordsInputs):
    """``SAM2VideoPredictor`` on exported files (see the module docstring).

    Args:
        image_encoder, decoder, memory_encoder, memory_attention: the exported files (``.onnx``) or Runners.
        device, threads, runtime, inference_precision: as :class:`vitdeploy.runtime.SamPredictor`'s (the precision
            applies to the image encoder).
        fill_hole_area, non_overlap_masks, clear_non_cond_mem_around_input, add_all_frames_to_correct_as_cond: the
            official predictor's options, with ``build_sam2_video_predictor``'s values by default.
        frames_in_memory: how many of the most recently tracked frames' outputs (per object) stay in memory; older
            ones go to the session's temporary file and are read back when a later call needs them
            (:mod:`vitdeploy.runtime.apps.sam2.past_outputs`). None: as many as the next frame may read.
    """

    RECORDABLE = GRAPHS
    RUNS = "the video predictor"

    def __init__(self, image_encoder: Runner | str | os.PathLike, decoder: Runner | str | os.PathLike,
                 memory_encoder: Runner | str | os.PathLike, memory_attention: Runner | str | os.PathLike, *,
                 options: OpenOptions | None = None, device: str = "cpu", threads: int | None = None,
                 runtime: str = "auto", inference_precision: str | None = None, fill_hole_area: int = 8,
                 non_overlap_masks: bool = False, clear_non_cond_mem_around_input: bool = False,
                 add_all_frames_to_correct_as_cond: bool = False, frames_in_memory: int | None = None):
        o = OpenOptions.of(options, device=device, threads=threads, runtime=runtime, inference_precision=inference_precision)
        self._open(VIDEO.open({"image_encoder": image_encoder, "decoder": decoder, "memory_encoder": memory_encoder,
                               "memory_attention": memory_attention}, o),
                   fill_hole_area, non_overlap_masks, clear_non_cond_mem_around_input, add_all_frames_to_correct_as_cond,
                   frames_in_memory)

    @classmethod
    def from_plan(cls, plan: ModelPlan, *, fill_hole_area: int = 8, non_overlap_masks: bool = False,
                  clear_non_cond_mem_around_input: bool = False,
                  add_all_frames_to_correct_as_cond: bool = False,
                  frames_in_memory: int | None = None) -> Sam2VideoPredictor:
        """The predictor of a plan made from checked files (a job's worker): each file opened as planned, nothing
        checked or decided again."""
        predictor = cls.__new__(cls)
        predictor._open(VIDEO.open(plan=plan), fill_hole_area, non_overlap_masks, clear_non_cond_mem_around_input,
                        add_all_frames_to_correct_as_cond, frames_in_memory)
        return predictor

    def _open(self, model: OpenModel, fill_hole_area: int, non_overlap_masks: bool,
              clear_non_cond_mem_around_input: bool, add_all_frames_to_correct_as_cond: bool,
              frames_in_memory: int | None) -> None:
        self._take_graphs(model, ("image_encoder", "decoder", "memory_encoder", "memory_attention"), frames_in_memory)
        self.fill_hole_area = int(fill_hole_area)
        self.non_overlap_masks = bool(non_overlap_masks)
        self.clear_non_cond_mem_around_input = bool(clear_non_cond_mem_around_input)
        self.add_all_frames_to_correct_as_cond = bool(add_all_frames_to_correct_as_cond)

    @property
    def device(self) -> str:
        return "cpu"

    def _run(self, graph: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return getattr(self, graph).run(self._recorded(graph, feeds))

    # --- the inference state -------------------------------------------------------------------------

    def init_state(self, video_path: str | os.PathLike, offload_video_to_cpu: bool = False,
                   offload_state_to_cpu: bool = False, async_loading_frames: bool = False,
                   progress: Any = None) -> dict[str, Any]:
        """Read the video (every frame, resized) and return a new inference state; frame 0's features are computed.
        The offload and async options are accepted for the official calls' sake: the state is in host memory, and the
        frames are decoded up front (``progress(done, total)`` is called per frame)."""
        images = VideoFrames(video_path, self.image_size, progress)
        state: dict[str, Any] = {
            "images": images, "num_frames": len(images), "offload_video_to_cpu": offload_video_to_cpu,
            "offload_state_to_cpu": offload_state_to_cpu, "video_height": images.height, "video_width": images.width,
            "device": "cpu", "storage_device": "cpu", "point_inputs_per_obj": {}, "mask_inputs_per_obj": {},
            "cached_features": {}, "constants": {}, "obj_id_to_idx": OrderedDict(), "obj_idx_to_id": OrderedDict(),
            "obj_ids": [], "output_dict_per_obj": {}, "temp_output_dict_per_obj": {}, "frames_tracked_per_obj": {},
        }
        self._get_image_feature(state, 0)
        return state

    def _obj_id_to_idx(self, state: dict[str, Any], obj_id: Any) -> int:
        obj_idx = state["obj_id_to_idx"].get(obj_id)
        if obj_idx is not None:
            return obj_idx
        obj_idx = len(state["obj_id_to_idx"])  # new objects are taken at any time, as officially
        state["obj_id_to_idx"][obj_id] = obj_idx
        state["obj_idx_to_id"][obj_idx] = obj_id
        state["obj_ids"] = list(state["obj_id_to_idx"])
        state["point_inputs_per_obj"][obj_idx] = {}
        state["mask_inputs_per_obj"][obj_idx] = {}
        state["output_dict_per_obj"][obj_idx] = {"cond_frame_outputs": {}, "non_cond_frame_outputs": {}}
        state["temp_output_dict_per_obj"][obj_idx] = {"cond_frame_outputs": {}, "non_cond_frame_outputs": {}}
        state["frames_tracked_per_obj"][obj_idx] = {}
        return obj_idx

    # --- prompts ------------------------------------------------------------------------------------

    def add_new_points_or_box(self, inference_state: dict[str, Any], frame_idx: int, obj_id: Any, points: Any = None,
                              labels: Any = None, clear_old_points: bool = True, normalize_coords: bool = True,
                              box: Any = None):
        """Clicks (and/or a box) for one object on one frame -> (frame_idx, obj_ids, masks of every object there)."""
        state = inference_state
        frame_idx = check_frame(state, frame_idx)
        coords, labels_ = prompt_arrays(points, labels, box)
        if normalize_coords:  # pixels of the video's frames: inside them, a box in order, as every predictor's
            check_prompts_inside((state["video_height"], state["video_width"]), points, box)
        if box is not None:
            if not clear_old_points:
                raise InputError("cannot add box without clearing old points, since box prompt must be provided before "
                                 "any point prompt (please use clear_old_points=True instead)")
            corners = np.asarray(box, np.float32).reshape(1, 2, 2)
            coords = np.concatenate([corners, coords], axis=1)
            labels_ = np.concatenate([np.array([[2, 3]], np.int32), labels_], axis=1)
        if normalize_coords:
            coords = coords / np.array([state["video_width"], state["video_height"]], np.float32)
        coords = (coords * np.float32(self.image_size)).astype(np.float32)
        obj_idx = self._obj_id_to_idx(state, obj_id)
        point_inputs = store_points(state, obj_idx, frame_idx, coords, labels_, clear_old_points)
        state["mask_inputs_per_obj"][obj_idx].pop(frame_idx, None)
        return self._prompted(state, frame_idx, obj_idx, point_inputs, None)

    def add_new_points(self, *args: Any, **kwargs: Any):
        """Deprecated officially: :meth:`add_new_points_or_box`."""
        return self.add_new_points_or_box(*args, **kwargs)

    def add_new_mask(self, inference_state: dict[str, Any], frame_idx: int, obj_id: Any, mask: Any):
        """A mask (H, W) for one object on one frame -> (frame_idx, obj_ids, masks of every object there)."""
        state = inference_state
        frame_idx = check_frame(state, frame_idx)
        mask = np.asarray(mask)
        if mask.ndim != 2:
            raise InputError(f"mask must be one (H, W) mask, got shape {mask.shape}")
        mask_inputs = resize_mask_input(mask, self.image_size)
        obj_idx = self._obj_id_to_idx(state, obj_id)
        state["mask_inputs_per_obj"][obj_idx][frame_idx] = mask_inputs
        state["point_inputs_per_obj"][obj_idx].pop(frame_idx, None)
        return self._prompted(state, frame_idx, obj_idx, None, mask_inputs)

    def _prompted(self, state: dict[str, Any], frame_idx: int, obj_idx: int, point_inputs: dict[str, np.ndarray] | None,
                  mask_inputs: np.ndarray | None):
        """The common end of add_new_points_or_box and add_new_mask: run the frame, keep the output until the next
        propagation, return every object's mask on this frame at the video's size."""
        tracked = state["frames_tracked_per_obj"][obj_idx]
        is_init_cond_frame = frame_idx not in tracked
        reverse = False if is_init_cond_frame else tracked[frame_idx]["reverse"]
        output_dict = state["output_dict_per_obj"][obj_idx]
        temp = state["temp_output_dict_per_obj"][obj_idx]
        is_cond = is_init_cond_frame or self.add_all_frames_to_correct_as_cond
        key = "cond_frame_outputs" if is_cond else "non_cond_frame_outputs"
        prev_logits = None
        if point_inputs is not None:  # earlier mask logits of this object on this frame go in with the new clicks
            prev = temp[key].get(frame_idx)
            if prev is None:
                prev = output_dict["cond_frame_outputs"].get(frame_idx)
            if prev is None:
                prev = output_dict["non_cond_frame_outputs"].get(frame_idx)
            if prev is not None and prev["pred_masks"] is not None:
                prev_logits = np.clip(prev["pred_masks"], -32.0, 32.0)
        out, _ = self._run_single_frame_inference(state, output_dict, frame_idx, is_init_cond_frame, point_inputs,
                                                  mask_inputs, reverse, run_mem_encoder=False,
                                                  prev_sam_mask_logits=prev_logits)
        temp[key][frame_idx] = out
        consolidated = self._consolidate_temp_output_across_obj(state, frame_idx, is_cond)
        return frame_idx, state["obj_ids"], self._video_res(state, consolidated)

    # --- tracking ------------------------------------------------------------------------------------

    def propagate_in_video_preflight(self, inference_state: dict[str, Any]) -> None:
        """Encode the memories of the frames prompted since the last propagation and file them with the outputs."""
        state = inference_state
        if not state["obj_ids"]:
            raise InputError("no points, box or mask given for any object: add some with add_new_points_or_box or "
                             "add_new_mask before propagating")
        for obj_idx in range(len(state["obj_ids"])):
            output_dict = state["output_dict_per_obj"][obj_idx]
            temp = state["temp_output_dict_per_obj"][obj_idx]
            for key in ("non_cond_frame_outputs", "cond_frame_outputs"):
                for frame_idx, out in temp[key].items():
                    if out["maskmem_features"] is None:  # the frames the user interacted with: binarized if clicked
                        feats = self._get_image_feature(state, frame_idx)
                        out["maskmem_features"] = self._encode_memory(feats, out["pred_masks"], out["object_score_logits"],
                                                                      is_mask_from_pts=True)
                    output_dict[key][frame_idx] = out
                    if self.clear_non_cond_mem_around_input:
                        self._clear_obj_non_cond_mem_around_input(state, frame_idx, obj_idx)
                temp[key].clear()
            if not output_dict["cond_frame_outputs"]:
                obj_id = state["obj_idx_to_id"][obj_idx]
                raise InputError(f"object id {obj_id!r} has no points, box or mask on any frame: prompt it with "
                                 "add_new_points_or_box or add_new_mask, or remove it with remove_object")
            for frame_idx in output_dict["cond_frame_outputs"]:
                output_dict["non_cond_frame_outputs"].pop(frame_idx, None)

    def propagate_in_video(self, inference_state: dict[str, Any], start_frame_idx: int | None = None,
                           max_frame_num_to_track: int | None = None,
                           reverse: bool = False) -> Iterator[tuple[int, list, Logits]]:
        """Track every object through the video: yields (frame_idx, obj_ids, masks) per frame, from the first prompted
        frame (or ``start_frame_idx``), forward or in ``reverse``, ``max_frame_num_to_track`` frames after the start
        at most."""
        state = inference_state
        self.propagate_in_video_preflight(state)
        objects = len(state["obj_ids"])
        if start_frame_idx is None:
            start_frame_idx = min(t for out in state["output_dict_per_obj"].values() for t in out["cond_frame_outputs"])
        order = processing_order(state, start_frame_idx, max_frame_num_to_track, reverse, zero_in_reverse=False)
        for frame_idx in order:
            masks = []
            for obj_idx in range(objects):
                output_dict = state["output_dict_per_obj"][obj_idx]
                if frame_idx in output_dict["cond_frame_outputs"]:
                    pred_masks = output_dict["cond_frame_outputs"][frame_idx]["pred_masks"]
                    if self.clear_non_cond_mem_around_input:
                        self._clear_obj_non_cond_mem_around_input(state, frame_idx, obj_idx)
                else:
                    out, pred_masks = self._run_single_frame_inference(state, output_dict, frame_idx, False, None, None,
                                                                       reverse, run_mem_encoder=True)
                    output_dict["non_cond_frame_outputs"][frame_idx] = out
                    behind = frame_idx + self.frames_in_memory if reverse else frame_idx - self.frames_in_memory
                    move_past_output(state, output_dict["non_cond_frame_outputs"], behind)
                state["frames_tracked_per_obj"][obj_idx][frame_idx] = {"reverse": reverse}
                masks.append(pred_masks)
            yield frame_idx, state["obj_ids"], self._video_res(state, np.concatenate(masks))

    # --- outputs ------------------------------------------------------------------------------------

    def _consolidate_temp_output_across_obj(self, state: dict[str, Any], frame_idx: int, is_cond: bool) -> np.ndarray:
        """Every object's latest mask logits on a frame at the video's size (NO_OBJ_SCORE where it has none)."""
        key = "cond_frame_outputs" if is_cond else "non_cond_frame_outputs"
        size = (state["video_height"], state["video_width"])
        masks = np.full((len(state["obj_ids"]), 1, *size), NO_OBJ_SCORE, np.float32)
        for obj_idx in range(len(state["obj_ids"])):
            output_dict = state["output_dict_per_obj"][obj_idx]
            out = state["temp_output_dict_per_obj"][obj_idx][key].get(frame_idx)
            if out is None:
                out = output_dict["cond_frame_outputs"].get(frame_idx)
            if out is None:
                out = output_dict["non_cond_frame_outputs"].get(frame_idx)
            if out is not None:
                masks[obj_idx] = resize_bilinear(out["pred_masks"], size, antialias=False)[0]
        return masks

    def _video_res(self, state: dict[str, Any], masks: np.ndarray) -> Logits:
        """``_get_orig_video_res_output``: (N, 1, h, w) logits at the video's size, without overlaps if asked."""
        masks = resize_bilinear(masks, (state["video_height"], state["video_width"]), antialias=False)
        if self.non_overlap_masks:
            masks = non_overlapping(masks)
        return np.ascontiguousarray(masks, np.float32).view(Logits)

    # --- editing ------------------------------------------------------------------------------------

    def clear_all_prompts_in_frame(self, inference_state: dict[str, Any], frame_idx: int, obj_id: Any,
                                   need_output: bool = True):
        """Remove one object's clicks or mask on a frame (its output there, if any, becomes a tracked frame's)."""
        state = inference_state
        frame_idx, obj_idx = clear_frame_prompts(state, frame_idx, obj_id, self._obj_id_to_idx)
        temp_all = state["temp_output_dict_per_obj"]
        output_dict = state["output_dict_per_obj"][obj_idx]
        out = output_dict["cond_frame_outputs"].pop(frame_idx, None)
        if out is not None:
            output_dict["non_cond_frame_outputs"][frame_idx] = out
            state["frames_tracked_per_obj"][obj_idx].pop(frame_idx, None)
        if not need_output:
            return None
        is_cond = any(frame_idx in t["cond_frame_outputs"] for t in temp_all.values())
        consolidated = self._consolidate_temp_output_across_obj(state, frame_idx, is_cond)
        return frame_idx, state["obj_ids"], self._video_res(state, consolidated)

    def reset_state(self, inference_state: dict[str, Any]) -> None:
        """Forget every object, prompt and result (the frames and their cached features stay)."""
        state = inference_state
        for name in ("obj_id_to_idx", "obj_idx_to_id", "point_inputs_per_obj", "mask_inputs_per_obj",
                     "output_dict_per_obj", "temp_output_dict_per_obj", "frames_tracked_per_obj"):
            state[name].clear()
        state["obj_ids"] = []
        state.pop("past_outputs", None)  # the moved outputs' file, deleted with its last reference

    def remove_object(self, inference_state: dict[str, Any], obj_id: Any, strict: bool = False, need_output: bool = True):
        """Remove an object; returns (remaining obj_ids, [(frame_idx, masks)] of the frames it had prompts on)."""
        state = inference_state
        old_idx, prompted = object_to_remove(state, obj_id, strict, "it was never prompted")
        updated: list[tuple[int, Logits]] = []
        if old_idx is None:
            return state["obj_ids"], updated
        if len(state["obj_id_to_idx"]) == 1:
            self.reset_state(state)
            return state["obj_ids"], updated
        for frame_idx in prompted:
            self.clear_all_prompts_in_frame(state, frame_idx, obj_id, need_output=False)
        drop_object(state, old_idx, ("point_inputs_per_obj", "mask_inputs_per_obj", "output_dict_per_obj",
                                     "temp_output_dict_per_obj", "frames_tracked_per_obj"))
        if need_output:
            temp_all = state["temp_output_dict_per_obj"]
            for frame_idx in prompted:
                is_cond = any(frame_idx in t["cond_frame_outputs"] for t in temp_all.values())
                updated.append((frame_idx, self._video_res(state, self._consolidate_temp_output_across_obj(
                    state, frame_idx, is_cond))))
        return state["obj_ids"], updated

    def _clear_obj_non_cond_mem_around_input(self, state: dict[str, Any], frame_idx: int, obj_idx: int) -> None:
        """Drop one object's tracked-frame memories within ``stride * num_maskmem`` frames of a corrected frame."""
        reach = self.settings.memory_temporal_stride_for_eval * self.settings.num_maskmem
        non_cond = state["output_dict_per_obj"][obj_idx]["non_cond_frame_outputs"]
        for t in range(frame_idx - reach, frame_idx + reach + 1):
            non_cond.pop(t, None)


__all__ = ["GRAPHS", "Logits", "Sam2VideoPredictor", "VIDEO_FILES", "check_video_files"]
