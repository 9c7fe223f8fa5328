"""SAM 3's tracker used as SAM 2 is, on exported files, torch-free: ``sam3.model.sam3_tracking_predictor.
Sam3TrackerPredictor``'s calls with their meanings (the official example ``sam3_for_sam2_video_task_example``).

``Sam3TrackerPredictor(vision, interactive, memory_encoder, memory_attention)`` takes four files ``vitdeploy export``
writes for one SAM 3 model (``-r sam3``, ``sam3_interactive``, ``sam3_memory_encoder``, ``sam3_memory_attention``)
and answers ``init_state(video_path=...)`` (a folder of JPEG frames or a video file), ``add_new_points_or_box`` and
``add_new_points`` (-> ``(frame_idx, obj_ids, low_res_masks, video_res_masks)``, the low-resolution masks None as
officially), ``propagate_in_video(state, start_frame_idx, max_frame_num_to_track, reverse,
propagate_preflight=True)`` (-> per frame ``(frame_idx, obj_ids, low_res_masks, video_res_masks, obj_scores)``),
``propagate_in_video_preflight``, ``clear_all_points_in_frame``, ``clear_all_points_in_video`` and
``remove_object``.

It is the official *batched* predictor, not SAM 2's per-object one (:class:`~vitdeploy.runtime.apps.sam2.
video_predictor.Sam2VideoPredictor`), and it follows the official code where they differ:

* one output per frame for all objects (``output_dict``), sliced per object (``output_dict_per_obj``) for clicks;
  new objects only before tracking starts, or after ``clear_all_points_in_video``;
* before tracking, the prompted frames' masks of every object are consolidated (an object without a prompt there is
  an empty mask, its pointer the no-object one), made non-overlapping at the model's image size and encoded again
  into memory (the memory encoder file takes masks at that size too);
* coordinates are relative by default (``rel_coordinates=True``: fractions of the frame, scaled to the model's
  input; with ``rel_coordinates=False`` they are pixels of the model's square input, and ``normalize_coords`` is
  ignored, as officially); at most ``max_point_num_in_prompt_enc`` (16) points reach the decoder, the first and last
  halves;
* a click on a tracked frame is decoded on that frame's own features (``use_prev_mem_frame=False``), and every
  corrected frame becomes a prompted one (``add_all_frames_to_correct_as_cond``);
* memory selection (``use_memory_selection``, on as ``build_sam3_video_model`` builds the tracker; off is the
  builder's ``apply_temporal_disambiguation=False``): a tracked frame enters later frames' memory only when its
  ``eff_iou_score`` -- the mean over objects of the IoU estimate times the object score rescaled to [0, 1] -- is above
  ``mf_threshold`` (0.01), the previous frame always (:func:`~vitdeploy.runtime.apps.sam2.memory_bank.frame_filter`);
* memories are stored in bfloat16, as the official stores them in any precision;
* ``build_tracker``'s defaults: no hole filling, overlapping output masks, memories around a corrected frame cleared
  for a single object (``clear_non_cond_mem_around_input``), tracking from 0 in reverse tracks frame 0.

Each model call is one graph, as in SAM 2's predictor (:class:`~vitdeploy.runtime.apps.sam2.track_step.TrackStep`):
the vision encoder per frame (its ``image_embed`` and ``high_res_feats_*`` carry the tracker's ``conv_s0``/
``conv_s1`` and ``no_mem_embed``), memory attention, the interactive decoder (SAM 2's decoder contract: the
official mask choice, dynamic multimask via stability), the memory encoder; frames are normalized as the official
``init_state`` loads them (``load_video_frames``' ImageNet mean and std). The official runs its tracker inside a
BF16 autocast on a GPU; here the files run in the precision they were opened in.

Returned masks are float32 logits (objects, 1, H, W) at the video's size that also answer ``.cpu()``,
``.numpy()`` and ``.detach()``, so ``(video_res_masks[i] > 0.0).cpu().numpy()`` runs unchanged. Errors are
:class:`vitdeploy.errors.InputError`, one line naming the fix. As in SAM 2's predictor, memory
stays flat on a long video: no frame's pixels are held, and tracked frames' outputs further back than
``frames_in_memory`` (default: as far as the next frame reads without memory selection, 16 frames) go to the
session's temporary file, read back byte for byte when memory selection or a later call reaches them. Not built:
``add_new_mask`` and the ``cached_features`` a detector hands over (``Sam3VideoPredictor``'s path).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import numpy as np

from vitdeploy.errors import InputError
from vitdeploy.runtime.apps.common.files import OpenModel
from vitdeploy.runtime.apps.common.prompts import as_float_array, check_box_order
from vitdeploy.runtime.apps.sam2.memory_bank import MemoryBank, frame_filter, select_memory
from vitdeploy.runtime.apps.sam2.past_outputs import PastOutput, move_past_output
from vitdeploy.runtime.apps.sam2.video_calls import check_frame, processing_order, prompt_arrays, store_points
from vitdeploy.runtime.apps.sam2.track_step import TrackStep
from vitdeploy.runtime.apps.sam2.video_predictor import Logits
from vitdeploy.runtime.apps.sam3.files import TRACKER
from vitdeploy.runtime.apps.sam3.tracker_edits import TrackerEdits
from vitdeploy.runtime.apps.sam3.tracker_outputs import (COND, MISSING_OBJECT_SCORE, NON_COND, memory_score,
                                                        object_slice)
from vitdeploy.runtime.backends.base import Runner
from vitdeploy.runtime.deploy.loader import OpenOptions
from vitdeploy.runtime.deploy.plan import ModelPlan
from vitdeploy.runtime.processing.recorded_inputs import RecordsInputs
from vitdeploy.runtime.processing.sam2_masks import NO_OBJ_SCORE, fill_holes, non_overlapping
from vitdeploy.runtime.processing.sam2_transforms import resize_bilinear
from vitdeploy.runtime.processing.video_frames import VideoFrames

#: The graphs, by the attribute names :class:`TrackStep` runs them under.
GRAPHS = ("image_encoder", "decoder", "memory_encoder", "memory_attention")
class Sam3TrackerPredictor(TrackerEdits, TrackStep, RecordsInputs):
    """``Sam3TrackerPredictor`` on exported files (see the module docstring).

    Args:
        vision, interactive, memory_encoder, memory_attention: the exported files (``.onnx``) or Runners.
        options, device, threads, runtime, inference_precision: how to open them, as for every predictor.
        fill_hole_area, non_overlap_masks_for_output, clear_non_cond_mem_around_input,
        clear_non_cond_mem_for_multi_obj, always_start_from_first_ann_frame, max_point_num_in_prompt_enc: the official
            predictor's options, with ``build_tracker``'s values by default.
        use_memory_selection, mf_threshold: memory selection (module docstring), as ``build_sam3_video_model``
            builds the tracker (``apply_temporal_disambiguation=True``).
        frames_in_memory: how many of the most recently tracked frames' outputs stay in memory; older ones go to the
            session's temporary file (:mod:`vitdeploy.runtime.apps.sam2.past_outputs`). None: 16 for SAM 3's bank.
    """

    RECORDABLE = GRAPHS
    RUNS = "SAM 3's tracker"
    #: The official *batched* predictor's calls (relative coordinates, 5-tuples, a preflight): what the ``track``
    #: verb's library asks of a predictor before calling it.
    BATCHED = True

    def __init__(self, vision: Runner | str | os.PathLike, interactive: Runner | str | os.PathLike,
                 memory_encoder: Runner | str | os.PathLike, memory_attention: Runner | str | os.PathLike, *,
                 options: OpenOptions | None = None, device: str = "cpu", threads: int | None = None,
                 runtime: str = "auto", inference_precision: str | None = None, fill_hole_area: int = 0,
                 non_overlap_masks_for_output: bool = False, clear_non_cond_mem_around_input: bool = True,
                 clear_non_cond_mem_for_multi_obj: bool = False, always_start_from_first_ann_frame: bool = False,
                 max_point_num_in_prompt_enc: int = 16, use_memory_selection: bool = True, mf_threshold: float = 0.01,
                 frames_in_memory: int | None = None):
        o = OpenOptions.of(options, device=device, threads=threads, runtime=runtime,
                           inference_precision=inference_precision)
        files = {"vision": vision, "interactive": interactive, "memory_encoder": memory_encoder,
                 "memory_attention": memory_attention}
        self._open(TRACKER.open(files, o), fill_hole_area=fill_hole_area,
                   non_overlap_masks_for_output=non_overlap_masks_for_output,
                   clear_non_cond_mem_around_input=clear_non_cond_mem_around_input,
                   clear_non_cond_mem_for_multi_obj=clear_non_cond_mem_for_multi_obj,
                   always_start_from_first_ann_frame=always_start_from_first_ann_frame,
                   max_point_num_in_prompt_enc=max_point_num_in_prompt_enc,
                   use_memory_selection=use_memory_selection, mf_threshold=mf_threshold,
                   frames_in_memory=frames_in_memory)

    @classmethod
    def from_plan(cls, plan: ModelPlan, **settings: Any) -> Sam3TrackerPredictor:
        """The predictor of a plan made from checked files (a job's worker): each file opened as planned."""
        predictor = cls.__new__(cls)
        predictor._open(TRACKER.open(plan=plan), **settings)
        return predictor

    def _open(self, model: OpenModel, *, fill_hole_area: int = 0, non_overlap_masks_for_output: bool = False,
              clear_non_cond_mem_around_input: bool = True, clear_non_cond_mem_for_multi_obj: bool = False,
              always_start_from_first_ann_frame: bool = False, max_point_num_in_prompt_enc: int = 16,
              use_memory_selection: bool = True, mf_threshold: float = 0.01,
              frames_in_memory: int | None = None) -> None:
        self._take_graphs(model, ("vision", "interactive", "memory_encoder", "memory_attention"), frames_in_memory)
        self.fill_hole_area = int(fill_hole_area)
        self.non_overlap_masks_for_output = bool(non_overlap_masks_for_output)
        self.clear_non_cond_mem_around_input = bool(clear_non_cond_mem_around_input)
        self.clear_non_cond_mem_for_multi_obj = bool(clear_non_cond_mem_for_multi_obj)
        self.always_start_from_first_ann_frame = bool(always_start_from_first_ann_frame)
        if isinstance(max_point_num_in_prompt_enc, bool) or not isinstance(max_point_num_in_prompt_enc, int):
            raise InputError(f"max_point_num_in_prompt_enc must be a whole number (0 or less: every point), not "
                             f"{max_point_num_in_prompt_enc!r}")
        self.max_point_num_in_prompt_enc = max_point_num_in_prompt_enc
        self.use_memory_selection = bool(use_memory_selection)
        self.mf_threshold = float(mf_threshold)
        self.add_all_frames_to_correct_as_cond = True  # set in the official constructor
        self.low_res_mask_size = 4 * int(self.memory_encoder.metadata["image_embedding_size"][0])

    @property
    def device(self) -> str:
        return "cpu"

    def _run(self, graph: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return getattr(self, graph).run(self._recorded(graph, feeds))

    # --- the inference state -------------------------------------------------------------------------

    def init_state(self, video_height: int | None = None, video_width: int | None = None, num_frames: int | None = None,
                   video_path: str | os.PathLike | None = None, cached_features: Any = None,
                   offload_video_to_cpu: bool = False, offload_state_to_cpu: bool = False,
                   async_loading_frames: bool = False, progress: Any = None) -> dict[str, Any]:
        """Read the video (every frame decoded and checked, none held in memory) and return a new inference state.
        The offload and async options are accepted for the official calls' sake (the state is in host memory)."""
        if video_path is None or cached_features is not None:
            raise InputError("Sam3TrackerPredictor.init_state needs video_path= (a folder of JPEG frames or a video "
                             "file); features handed over from a detector (cached_features) are not taken here")
        images = VideoFrames(video_path, self.image_size, progress)
        state: dict[str, Any] = {
            "images": images, "num_frames": len(images), "video_height": images.height, "video_width": images.width,
            "offload_video_to_cpu": offload_video_to_cpu, "offload_state_to_cpu": offload_state_to_cpu,
            "device": "cpu", "storage_device": "cpu", "point_inputs_per_obj": {}, "mask_inputs_per_obj": {},
            "cached_features": {}, "constants": {}, "obj_id_to_idx": OrderedDict(), "obj_idx_to_id": OrderedDict(),
            "obj_ids": [], "output_dict": {COND: {}, NON_COND: {}}, "first_ann_frame_idx": None,
            "output_dict_per_obj": {}, "temp_output_dict_per_obj": {},
            "consolidated_frame_inds": {COND: set(), NON_COND: set()}, "tracking_has_started": False,
            "frames_already_tracked": {},
        }
        return state

    def _obj_id_to_idx(self, state: dict[str, Any], obj_id: Any) -> int:
        obj_idx = state["obj_id_to_idx"].get(obj_id)
        if obj_idx is not None:
            return obj_idx
        if state["tracking_has_started"]:
            raise InputError(f"cannot add new object id {obj_id!r} after tracking starts (the objects are "
                             f"{state['obj_ids']}): call clear_all_points_in_video first, or prompt an existing id")
        obj_idx = len(state["obj_id_to_idx"])
        state["obj_id_to_idx"][obj_id] = obj_idx
        state["obj_idx_to_id"][obj_idx] = obj_id
        state["obj_ids"] = list(state["obj_id_to_idx"])
        state["point_inputs_per_obj"][obj_idx] = {}
        state["mask_inputs_per_obj"][obj_idx] = {}
        state["output_dict_per_obj"][obj_idx] = {COND: {}, NON_COND: {}}
        state["temp_output_dict_per_obj"][obj_idx] = {COND: {}, NON_COND: {}}
        return obj_idx

    # --- prompts ------------------------------------------------------------------------------------

    def add_new_points_or_box(self, inference_state: dict[str, Any], frame_idx: int, obj_id: Any, points: Any = None,
                              labels: Any = None, clear_old_points: bool = True, rel_coordinates: bool = True,
                              use_prev_mem_frame: bool = False, normalize_coords: bool = True, box: Any = None):
        """Clicks (and/or a box first) for one object on one frame -> (frame_idx, obj_ids, None, every object's mask
        logits on this frame at the video's size)."""
        state = inference_state
        frame_idx = check_frame(state, frame_idx)
        coords, labels_ = prompt_arrays(points, labels, box)
        self._check_inside(points, box, rel_coordinates)
        if rel_coordinates:
            coords = coords * np.float32(self.image_size)
        if box is not None:
            if not clear_old_points:
                raise InputError("cannot add box without clearing old points, since box prompt must be provided before "
                                 "any point prompt (please use clear_old_points=True instead)")
            corners = as_float_array(box, "box").astype(np.float32).reshape(1, 2, 2)
            if rel_coordinates:
                corners = corners * np.float32(self.image_size)
            coords = np.concatenate([corners, coords], axis=1)
            labels_ = np.concatenate([np.array([[2, 3]], np.int32), labels_], axis=1)
        obj_idx = self._obj_id_to_idx(state, obj_id)
        point_inputs = store_points(state, obj_idx, frame_idx, coords, labels_, clear_old_points)
        state["mask_inputs_per_obj"][obj_idx].pop(frame_idx, None)
        tracked = state["frames_already_tracked"]
        is_init_cond_frame = frame_idx not in tracked
        reverse = False if is_init_cond_frame else tracked[frame_idx]["reverse"]
        output_dict = state["output_dict_per_obj"][obj_idx]
        temp = state["temp_output_dict_per_obj"][obj_idx]
        is_cond = is_init_cond_frame or self.add_all_frames_to_correct_as_cond
        key = COND if is_cond else NON_COND
        keep = self.max_point_num_in_prompt_enc
        if point_inputs["point_coords"].shape[1] > keep > 0:  # the stored prompt is trimmed too, as officially
            first, last = keep // 2, keep - keep // 2
            for name in ("point_coords", "point_labels"):
                point_inputs[name] = np.concatenate([point_inputs[name][:, :first], point_inputs[name][:, -last:]],
                                                    axis=1)
        prev = temp[key].get(frame_idx)
        if prev is None:
            prev = output_dict[COND].get(frame_idx)
        if prev is None:
            prev = output_dict[NON_COND].get(frame_idx)
        prev_logits = None
        if prev is not None and prev["pred_masks"] is not None:
            prev_logits = np.clip(prev["pred_masks"], -32.0, 32.0)
        bank = None
        if not is_init_cond_frame and use_prev_mem_frame:
            bank = self._bank(state, output_dict, frame_idx, reverse)
        out, iou = self._track_one(self._get_image_feature(state, frame_idx), bank, is_init_cond_frame, point_inputs,
                                   None, run_mem_encoder=False, prev_sam_mask_logits=prev_logits)
        out["iou_score"] = np.array([[iou]], np.float32)
        out["eff_iou_score"] = memory_score(out["object_score_logits"], out["iou_score"])
        temp[key][frame_idx] = out
        masks = self._consolidate_at_video_res(state, frame_idx, is_cond)
        return frame_idx, state["obj_ids"], None, self._video_res(state, masks)

    def _check_inside(self, points: Any, box: Any, rel_coordinates: bool) -> None:
        """Relative coordinates are fractions of the frame (0 to 1); absolute ones pixels of the model's square
        input (0 to image_size); a box is x0, y0, x1, y1 in order."""
        limit = 1.0 if rel_coordinates else float(self.image_size)
        unit = "fractions of the frame" if rel_coordinates else f"pixels of the model's {self.image_size}-pixel input"
        for what, value in (("point", points), ("box corner", box)):
            if value is None:
                continue
            xy = as_float_array(value, "points" if what == "point" else "box").reshape(-1, 2)
            outside = [(float(x), float(y)) for x, y in xy if not (0.0 <= x <= limit and 0.0 <= y <= limit)]
            if outside:
                x, y = outside[0]
                raise InputError(f"{what} ({x:g}, {y:g}) is outside the frame: with rel_coordinates={rel_coordinates} "
                                 f"coordinates are {unit}, x and y from 0 to {limit:g}")
        if box is not None and as_float_array(box, "box").size == 4:
            check_box_order(as_float_array(box, "box").reshape(-1))

    def add_new_points(self, *args: Any, **kwargs: Any):
        """Deprecated officially: :meth:`add_new_points_or_box`."""
        return self.add_new_points_or_box(*args, **kwargs)

    # --- consolidation across objects ---------------------------------------------------------------

    def _latest_output(self, state: dict[str, Any], obj_idx: int, frame_idx: int, key: str) -> dict[str, Any] | None:
        """An object's newest output on a frame: the temporary one, else its prompted, else its tracked one."""
        out = state["temp_output_dict_per_obj"][obj_idx][key].get(frame_idx)
        if out is None:
            out = state["output_dict_per_obj"][obj_idx][COND].get(frame_idx)
        if out is None:
            out = state["output_dict_per_obj"][obj_idx][NON_COND].get(frame_idx)
        return out

    def _consolidate_at_video_res(self, state: dict[str, Any], frame_idx: int, is_cond: bool) -> np.ndarray:
        """``_consolidate_temp_output_across_obj(consolidate_at_video_res=True)``'s masks: every object's newest logits
        at the video's size, NO_OBJ_SCORE where it has none."""
        key = COND if is_cond else NON_COND
        size = (state["video_height"], state["video_width"])
        masks = np.full((len(state["obj_ids"]), 1, *size), NO_OBJ_SCORE, np.float32)
        for obj_idx in range(len(state["obj_ids"])):
            out = self._latest_output(state, obj_idx, frame_idx, key)
            if out is not None:
                masks[obj_idx] = resize_bilinear(out["pred_masks"], size, antialias=False)[0]
        return masks

    def _consolidate_for_memory(self, state: dict[str, Any], frame_idx: int, is_cond: bool) -> dict[str, Any]:
        """``_consolidate_temp_output_across_obj(run_mem_encoder=True)``: one output for all objects on a prompted
        frame; an object without an output there is an empty mask (NO_OBJ_SCORE, score 10, the no-object pointer of
        an empty mask), and the memories are encoded again from the masks made non-overlapping at the image size."""
        key = COND if is_cond else NON_COND
        objects, low = len(state["obj_ids"]), self.low_res_mask_size
        masks = np.full((objects, 1, low, low), NO_OBJ_SCORE, np.float32)
        tokens = np.zeros((objects, len(self.settings.no_mem_embed)), np.float32)  # hidden_dim wide
        presence = np.zeros((objects,), np.float32)  # 0: the no-object pointer (an empty mask's)
        scores = np.full((objects, 1), MISSING_OBJECT_SCORE, np.float32)
        ious = np.zeros((objects, 1), np.float32)
        for obj_idx in range(objects):
            out = self._latest_output(state, obj_idx, frame_idx, key)
            if out is None:
                continue
            masks[obj_idx] = out["pred_masks"][0]  # a click's low-resolution logits: the consolidated size
            tokens[obj_idx], presence[obj_idx] = out["obj_token"], out["obj_presence"]
            scores[obj_idx] = out["object_score_logits"].reshape(1)
            ious[obj_idx] = np.asarray(out["iou_score"], np.float32).reshape(1)
        high = resize_bilinear(masks, (self.image_size, self.image_size), antialias=False)
        high = non_overlapping(high)
        feats = self._get_image_feature(state, frame_idx)
        maskmem = np.concatenate([self._encode_memory(feats, high[i:i + 1], scores[i:i + 1], is_mask_from_pts=True)
                                  for i in range(objects)])
        return {"maskmem_features": maskmem, "pred_masks": masks, "obj_token": tokens, "obj_presence": presence,
                "object_score_logits": scores, "iou_score": ious}

    def _add_output_per_object(self, state: dict[str, Any], frame_idx: int, out: dict[str, Any], key: str) -> None:
        for obj_idx, per_obj in state["output_dict_per_obj"].items():
            per_obj[key][frame_idx] = object_slice(out, obj_idx)

    # --- tracking ------------------------------------------------------------------------------------

    def _clears_around_input(self, state: dict[str, Any]) -> bool:
        return self.clear_non_cond_mem_around_input and (self.clear_non_cond_mem_for_multi_obj
                                                         or len(state["obj_ids"]) <= 1)

    def propagate_in_video_preflight(self, inference_state: dict[str, Any], run_mem_encoder: bool = True) -> None:
        """Consolidate the frames prompted since the last propagation into the outputs every object tracks from."""
        state = inference_state
        state["tracking_has_started"] = True
        output_dict, consolidated = state["output_dict"], state["consolidated_frame_inds"]
        temp_all = state["temp_output_dict_per_obj"]
        for is_cond in (False, True):
            key = COND if is_cond else NON_COND
            frames = sorted({t for temp in temp_all.values() for t in temp[key]})
            consolidated[key].update(frames)
            for frame_idx in frames:
                out = self._consolidate_for_memory(state, frame_idx, is_cond)
                if not run_mem_encoder:
                    out["maskmem_features"] = None
                output_dict[key][frame_idx] = out
                self._add_output_per_object(state, frame_idx, out, key)
                if self._clears_around_input(state):
                    self._clear_non_cond_mem_around_input(state, frame_idx)
            for temp in temp_all.values():
                temp[key].clear()
        for frame_idx in output_dict[COND]:
            output_dict[NON_COND].pop(frame_idx, None)
        for per_obj in state["output_dict_per_obj"].values():
            for frame_idx in per_obj[COND]:
                per_obj[NON_COND].pop(frame_idx, None)
        for frame_idx in consolidated[COND]:
            consolidated[NON_COND].discard(frame_idx)
        inputs = {t for d in state["point_inputs_per_obj"].values() for t in d}
        inputs |= {t for d in state["mask_inputs_per_obj"].values() for t in d}
        if state["first_ann_frame_idx"] is None:
            state["first_ann_frame_idx"] = min(inputs, default=None)
        if state["first_ann_frame_idx"] not in output_dict[COND]:
            state["first_ann_frame_idx"] = min(output_dict[COND], default=None)

    def _processing_order(self, state: dict[str, Any], start_frame_idx: int | None, max_frame_num_to_track: int | None,
                          reverse: bool) -> list[int]:
        """``_get_processing_order``."""
        if self.always_start_from_first_ann_frame:
            start_frame_idx = state["first_ann_frame_idx"]
        if start_frame_idx is None:
            start_frame_idx = min(state["output_dict"][COND])
        return processing_order(state, start_frame_idx, max_frame_num_to_track, reverse, zero_in_reverse=True)

    def propagate_in_video(self, inference_state: dict[str, Any], start_frame_idx: int | None = None,
                           max_frame_num_to_track: int | None = None, reverse: bool = False,
                           tqdm_disable: bool = False, obj_ids: Any = None, run_mem_encoder: bool = True,
                           propagate_preflight: bool = False) -> Iterator[tuple[int, list, Logits, Logits, np.ndarray]]:
        """Track every object through the video: yields (frame_idx, obj_ids, low-res logits, logits at the video's
        size, object score logits (objects, 1)) per frame, from the first prompted frame (or ``start_frame_idx``),
        forward or in ``reverse``, ``max_frame_num_to_track`` frames after the start at most."""
        state = inference_state
        if obj_ids is not None:
            raise InputError("obj_ids: SAM 3's tracker tracks every object together (as the official batched "
                             "predictor); leave obj_ids as None")
        if propagate_preflight:
            self.propagate_in_video_preflight(state)
        if not state["output_dict"][COND]:
            raise InputError("no prompted frame to track from: add points or a box with add_new_points_or_box, then "
                             "propagate with propagate_preflight=True (or call propagate_in_video_preflight first)")
        order = self._processing_order(state, start_frame_idx, max_frame_num_to_track, reverse)
        return self._propagate(state, order, reverse, run_mem_encoder)

    def _propagate(self, state: dict[str, Any], order: list[int], reverse: bool,
                   run_mem_encoder: bool) -> Iterator[tuple[int, list, Logits, Logits, np.ndarray]]:
        output_dict, consolidated = state["output_dict"], state["consolidated_frame_inds"]
        for frame_idx in order:
            if frame_idx in consolidated[COND]:
                key, out = COND, output_dict[COND][frame_idx]
                if self._clears_around_input(state):
                    self._clear_non_cond_mem_around_input(state, frame_idx)
            elif frame_idx in consolidated[NON_COND]:
                key, out = NON_COND, output_dict[NON_COND][frame_idx]
            else:
                key, out = NON_COND, self._track_all(state, frame_idx, reverse, run_mem_encoder)
                output_dict[NON_COND][frame_idx] = out
            self._add_output_per_object(state, frame_idx, out, key)
            state["frames_already_tracked"][frame_idx] = {"reverse": reverse}
            self._move_past_output(state, frame_idx + self.frames_in_memory if reverse else
                                   frame_idx - self.frames_in_memory)
            low_res = np.ascontiguousarray(out["pred_masks"], np.float32).view(Logits)
            yield frame_idx, state["obj_ids"], low_res, self._video_res(state, out["pred_masks"]), \
                out["object_score_logits"].copy()

    def _move_past_output(self, state: dict[str, Any], frame_idx: int) -> None:
        """A tracked frame's output for all objects, and each object's slice of it, to the session's temporary file
        (:mod:`vitdeploy.runtime.apps.sam2.past_outputs`): read back byte for byte when a later call needs it (memory
        selection reaching back, a reverse pass, a click on the frame). The slices are written apart: a view would
        keep the whole output in memory."""
        out = state["output_dict"][NON_COND].get(frame_idx)
        if out is None or isinstance(out, PastOutput):
            return
        move_past_output(state, state["output_dict"][NON_COND], frame_idx)
        for obj_idx, per_obj in state["output_dict_per_obj"].items():
            if frame_idx in per_obj[NON_COND]:
                per_obj[NON_COND][frame_idx] = object_slice(out, obj_idx, copy=True)
                move_past_output(state, per_obj[NON_COND], frame_idx)

    def _bank(self, state: dict[str, Any], output_dict: dict[str, dict[int, Any]], frame_idx: int,
              reverse: bool) -> MemoryBank:
        """The memories a frame attends to, chosen as ``_prepare_memory_conditioned_features`` chooses them."""
        selected = None
        if self.use_memory_selection:
            selected = frame_filter(output_dict, reverse, frame_idx, state["num_frames"], self.settings,
                                    self.mf_threshold)
        return select_memory(frame_idx, output_dict, self.settings, state["num_frames"], reverse, selected)

    def _track_all(self, state: dict[str, Any], frame_idx: int, reverse: bool, run_mem_encoder: bool) -> dict[str, Any]:
        """One tracked frame for every object, on one bank of frames (``_run_single_frame_inference`` batched): each
        object reads its own slice of the chosen frames' memories."""
        feats = self._get_image_feature(state, frame_idx)
        bank = self._bank(state, state["output_dict"], frame_idx, reverse)
        outs, ious = [], []
        for obj_idx in range(len(state["obj_ids"])):
            own = MemoryBank([(t, object_slice(o, obj_idx)) for t, o in bank.frames],
                             [(d, object_slice(o, obj_idx)) for d, o in bank.pointers], bank.t_diff_max)
            out, iou = self._track_one(feats, own, False, None, None, run_mem_encoder, None)
            outs.append(out)
            ious.append(iou)
        scores = np.concatenate([o["object_score_logits"] for o in outs]).astype(np.float32)
        iou_score = np.array(ious, np.float32).reshape(-1, 1)
        maskmem = np.concatenate([o["maskmem_features"] for o in outs]) if run_mem_encoder else None
        return {"maskmem_features": maskmem, "pred_masks": np.concatenate([o["pred_masks"] for o in outs]),
                "obj_token": np.stack([o["obj_token"] for o in outs]),
                "obj_presence": np.array([o["obj_presence"] for o in outs], np.float32),
                "object_score_logits": scores, "iou_score": iou_score,
                "eff_iou_score": memory_score(scores, iou_score)}

    # --- outputs ------------------------------------------------------------------------------------

    def _video_res(self, state: dict[str, Any], masks: np.ndarray) -> Logits:
        """``_get_orig_video_res_output``: (N, 1, H, W) logits at the video's size; without overlaps and with small
        holes filled where asked."""
        size = (state["video_height"], state["video_width"])
        if masks.shape[-2:] != size:
            masks = resize_bilinear(masks, size, antialias=False)
        if self.non_overlap_masks_for_output:
            masks = non_overlapping(masks)
        if self.fill_hole_area > 0:
            masks = fill_holes(masks, self.fill_hole_area)
        return np.ascontiguousarray(masks, np.float32).view(Logits)


__all__ = ["GRAPHS", "Sam3TrackerPredictor", "memory_score", "object_slice"]
