"""The official tracker's editing calls, on :class:`~vitdeploy.runtime.apps.sam3.tracker_predictor.
Sam3TrackerPredictor`'s state: ``clear_all_points_in_frame``, ``clear_all_points_in_video``, ``remove_object`` and
the clearing of tracked-frame memories around a prompted frame, with the official meanings. Torch-free.

:class:`TrackerEdits` is a mixin: the predictor it is mixed into provides ``settings`` (a
:class:`~vitdeploy.runtime.apps.sam2.memory_bank.TrackerSettings`), ``_obj_id_to_idx``, ``_consolidate_at_video_res``,
``_video_res``, ``_add_output_per_object`` and ``_move_past_output``."""

from __future__ import annotations

from typing import Any

from vitdeploy.runtime.apps.sam2.past_outputs import PastOutput
from vitdeploy.runtime.apps.sam2.video_calls import clear_frame_prompts, drop_object, object_to_remove
from vitdeploy.runtime.apps.sam2.video_predictor import Logits
from vitdeploy.runtime.apps.sam3.tracker_outputs import COND, NON_COND, memory_score


class TrackerEdits:
    """Removing prompts and objects from a tracking session (see the module docstring)."""

    def clear_all_points_in_frame(self, inference_state: dict[str, Any], frame_idx: int, obj_id: Any,
                                  need_output: bool = True):
        """Remove one object's points on a frame; a frame left without any prompt stops being a prompted one."""
        state = inference_state
        frame_idx, obj_idx = clear_frame_prompts(state, frame_idx, obj_id, self._obj_id_to_idx)
        temp_all = state["temp_output_dict_per_obj"]
        objects = len(state["obj_ids"])
        has_input = any(frame_idx in state["point_inputs_per_obj"][i] or frame_idx in state["mask_inputs_per_obj"][i]
                        for i in range(objects))
        if not has_input:
            output_dict, consolidated = state["output_dict"], state["consolidated_frame_inds"]
            consolidated[COND].discard(frame_idx)
            consolidated[NON_COND].discard(frame_idx)
            out = output_dict[COND].pop(frame_idx, None)
            if out is not None:  # downgraded to a tracked frame's output
                output_dict[NON_COND][frame_idx] = out
                state["frames_already_tracked"].pop(frame_idx, None)
            for i in range(objects):
                per_obj = state["output_dict_per_obj"][i]
                obj_out = per_obj[COND].pop(frame_idx, None)
                if obj_out is not None:
                    per_obj[NON_COND][frame_idx] = obj_out
            if not output_dict[COND]:
                self._reset_tracking_results(state)
        if not need_output:
            return None
        is_cond = any(frame_idx in t[COND] for t in temp_all.values())
        masks = self._consolidate_at_video_res(state, frame_idx, is_cond)
        return frame_idx, state["obj_ids"], None, self._video_res(state, masks)

    def clear_all_points_in_video(self, inference_state: dict[str, Any]) -> None:
        """Forget every object, prompt and result (the frames stay)."""
        state = inference_state
        self._reset_tracking_results(state)
        state["obj_id_to_idx"].clear()
        state["obj_idx_to_id"].clear()
        state["obj_ids"] = []
        for name in ("point_inputs_per_obj", "mask_inputs_per_obj", "output_dict_per_obj", "temp_output_dict_per_obj"):
            state[name].clear()
        state.pop("past_outputs", None)  # the moved outputs' file, deleted with its last reference

    def _reset_tracking_results(self, state: dict[str, Any]) -> None:
        for name in ("point_inputs_per_obj", "mask_inputs_per_obj"):
            for v in state[name].values():
                v.clear()
        for name in ("output_dict_per_obj", "temp_output_dict_per_obj"):
            for v in state[name].values():
                v[COND].clear()
                v[NON_COND].clear()
        for name in ("output_dict", "consolidated_frame_inds"):
            state[name][COND].clear()
            state[name][NON_COND].clear()
        state["tracking_has_started"] = False
        state["frames_already_tracked"].clear()
        state["first_ann_frame_idx"] = None

    def remove_object(self, inference_state: dict[str, Any], obj_id: Any, strict: bool = False,
                      need_output: bool = True):
        """Remove an object -> (remaining obj_ids, [(frame_idx, masks)] of the frames it had prompts on); the frames'
        outputs keep the other objects' slices, and each frame's memory score is computed again without it."""
        state = inference_state
        old_idx, prompted = object_to_remove(state, obj_id, strict, "it does not exist")
        updated: list[tuple[int, Logits]] = []
        if old_idx is None:
            return state["obj_ids"], updated
        if len(state["obj_id_to_idx"]) == 1:
            self.clear_all_points_in_video(state)
            return state["obj_ids"], updated
        for frame_idx in sorted(prompted):
            self.clear_all_points_in_frame(state, frame_idx, obj_id, need_output=False)
        kept = drop_object(state, old_idx, ("point_inputs_per_obj", "mask_inputs_per_obj", "output_dict_per_obj",
                                            "temp_output_dict_per_obj"))
        for key in (COND, NON_COND):
            for frame_idx, old in list(state["output_dict"][key].items()):
                out = {name: old[name] for name in old}  # read back if it was moved to the session's file
                for name in ("pred_masks", "obj_token", "obj_presence", "object_score_logits", "iou_score"):
                    out[name] = out[name][kept]
                if out["maskmem_features"] is not None:
                    out["maskmem_features"] = out["maskmem_features"][kept]
                # set on every frame, the consolidated ones too, as the official does: they may now be selected
                out["eff_iou_score"] = memory_score(out["object_score_logits"], out["iou_score"])
                state["output_dict"][key][frame_idx] = out
                self._add_output_per_object(state, frame_idx, out, key)
                if isinstance(old, PastOutput):
                    self._move_past_output(state, frame_idx)  # back to the file: memory stays flat
        if need_output:
            temp_all = state["temp_output_dict_per_obj"]
            for frame_idx in sorted(prompted):
                is_cond = any(frame_idx in t[COND] for t in temp_all.values())
                updated.append((frame_idx, self._video_res(state, self._consolidate_at_video_res(state, frame_idx,
                                                                                                   is_cond))))
        return state["obj_ids"], updated

    def _clear_non_cond_mem_around_input(self, state: dict[str, Any], frame_idx: int) -> None:
        """Drop every object's own tracked-frame slices within ``stride * num_maskmem`` frames of a prompted frame
        (the frames' outputs for all objects stay: tracking reads those)."""
        reach = self.settings.memory_temporal_stride_for_eval * self.settings.num_maskmem
        for per_obj in state["output_dict_per_obj"].values():
            for t in range(frame_idx - reach, frame_idx + reach + 1):
                per_obj[NON_COND].pop(t, None)


__all__ = ["TrackerEdits"]
