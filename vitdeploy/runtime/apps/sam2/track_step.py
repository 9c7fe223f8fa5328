"""One frame of one object, as the official ``SAM2Base.track_step`` computes it, on the video predictor's graphs:
the frame's features (the image encoder, the latest frame's kept), the memory attention over the object's bank, the
SAM heads (the decoder: the official choice of mask, pointer and presence), a mask given as output, and the memory
encoding of the result. A mixin of :class:`~vitdeploy.runtime.apps.sam2.video_predictor.Sam2VideoPredictor`, which
holds the graphs (``_run``), the tracker's settings and the bank's slots; the sessions, prompts and propagation are
the predictor's."""

from __future__ import annotations

from typing import Any

import numpy as np

from vitdeploy.runtime.apps.sam2.image_predictor import MaskChoice
from vitdeploy.runtime.apps.sam2.memory_bank import MemoryBank, TrackerSettings, select_memory
from vitdeploy.runtime.apps.sam2.video_calls import bank_slots, frames_kept
from vitdeploy.runtime.processing.sam2_masks import (MASK_OUT_BIAS, MASK_OUT_SCALE, NO_OBJ_SCORE, downsample_mask_prompt,
                                                     fill_holes, mask_as_output, to_bfloat16)
from vitdeploy.runtime.processing.sam2_transforms import resize_bilinear


class TrackStep:
    """The per-frame computation (module docstring)."""

    def _take_graphs(self, model: Any, names: tuple[str, str, str, str], frames_in_memory: int | None) -> None:
        """An opened model's four graphs (its image encoder, decoder, memory encoder and memory attention, by the
        file names ``names``) and what their metadata says: the tracker's settings, the model's input size and
        variant, the decoder's mask choice, the bank's slots, how many tracked frames' outputs stay in memory."""
        #: How each file runs (what a route passes on).
        self.plan = model.plan
        image_encoder, decoder, memory_encoder, memory_attention = (model[name] for name in names)
        self.image_encoder, self.decoder = image_encoder, decoder
        self.memory_encoder, self.memory_attention = memory_encoder, memory_attention
        self.settings = TrackerSettings.from_metadata(memory_attention.metadata["tracker"])
        self.image_size = int(image_encoder.metadata["input_size"][0])  # the official attribute's name
        self.variant = str(image_encoder.metadata.get("variant"))
        self._choose = MaskChoice.from_metadata(decoder.metadata)
        self._no_mem_embed = np.asarray(self.settings.no_mem_embed, np.float32).reshape(1, -1, 1, 1)
        self._bank_slots = bank_slots(memory_attention)
        self.frames_in_memory = frames_kept(frames_in_memory, self.settings)

    def _run_single_frame_inference(self, state: dict[str, Any], output_dict: dict[str, dict[int, Any]], frame_idx: int,
                                    is_init_cond_frame: bool, point_inputs: dict[str, np.ndarray] | None,
                                    mask_inputs: np.ndarray | None, reverse: bool, run_mem_encoder: bool,
                                    prev_sam_mask_logits: np.ndarray | None = None) -> tuple[dict[str, Any], np.ndarray]:
        """``track_step`` on one object: (the compact output the state keeps, the mask logits to show)."""
        bank = None
        if not is_init_cond_frame and not self._mask_is_output(mask_inputs):
            bank = select_memory(frame_idx, output_dict, self.settings, state["num_frames"], reverse)
        out, _ = self._track_one(self._get_image_feature(state, frame_idx), bank, is_init_cond_frame, point_inputs,
                                 mask_inputs, run_mem_encoder, prev_sam_mask_logits)
        if self.fill_hole_area > 0:
            out["pred_masks"] = fill_holes(out["pred_masks"], self.fill_hole_area)
        return out, out["pred_masks"]

    def _mask_is_output(self, mask_inputs: np.ndarray | None) -> bool:
        """Whether a mask prompt is the output itself (``_use_mask_as_output``), with no memory read."""
        return mask_inputs is not None and self.settings.use_mask_input_as_output_without_sam

    def _track_one(self, feats: dict[str, np.ndarray], bank: MemoryBank | None, is_init_cond_frame: bool,
                   point_inputs: dict[str, np.ndarray] | None, mask_inputs: np.ndarray | None, run_mem_encoder: bool,
                   prev_sam_mask_logits: np.ndarray | None) -> tuple[dict[str, Any], float]:
        """One object on a frame's features, conditioned on ``bank`` (None: the frame's own features with
        ``no_mem_embed``, as a prompted frame is): (its output, the IoU estimate of its mask, ``ious.max(-1)``)."""
        if self._mask_is_output(mask_inputs):
            low_res, token, presence, score = self._mask_as_output(feats, mask_inputs)
            iou = 1.0  # _use_mask_as_output's dummy IoU
        else:
            if bank is None:  # directly_add_no_mem_embed: the encoder's output already carries it
                pix_feat = feats["image_embed"]
            else:
                feeds = bank.feeds(*self._bank_slots) | {"image_embed": feats["image_embed"]}
                pix_feat = np.asarray(self._run("memory_attention", feeds)["pix_feat_with_mem"], np.float32)
            prompt = prev_sam_mask_logits if prev_sam_mask_logits is not None else mask_inputs
            low_res, token, presence, score, iou = self._sam_heads(pix_feat, feats, point_inputs, prompt,
                                                                   self._use_multimask(is_init_cond_frame, point_inputs))
        maskmem = None
        if run_mem_encoder:
            maskmem = self._encode_memory(feats, low_res, score, is_mask_from_pts=point_inputs is not None)
        out = {"maskmem_features": maskmem, "pred_masks": low_res, "obj_token": token, "obj_presence": presence,
               "object_score_logits": score}
        return out, iou

    def _use_multimask(self, is_init_cond_frame: bool, point_inputs: dict[str, np.ndarray] | None) -> bool:
        s = self.settings
        num_pts = 0 if point_inputs is None else point_inputs["point_labels"].shape[1]
        return (s.multimask_output_in_sam and (is_init_cond_frame or s.multimask_output_for_tracking)
                and s.multimask_min_pt_num <= num_pts <= s.multimask_max_pt_num)

    def _sam_heads(self, pix_feat: np.ndarray, feats: dict[str, np.ndarray], point_inputs: dict[str, np.ndarray] | None,
                   mask_prompt: np.ndarray | None, multimask: bool):
        """``_forward_sam_heads``: (low-res logits (1, 1, 4h, 4w) of the chosen mask, its SAM output token (C,), the
        object's presence lambda, the object score logits (1, 1), the best IoU estimate of the masks it chose from)."""
        if point_inputs is None:  # no clicks: one padding point, as the official heads add
            coords, labels = np.zeros((1, 1, 2), np.float32), -np.ones((1, 1), np.float32)
        else:
            coords, labels = point_inputs["point_coords"], point_inputs["point_labels"].astype(np.float32)
        grid = 4 * pix_feat.shape[-1]
        if mask_prompt is not None:
            mask = resize_bilinear(mask_prompt, (grid, grid), antialias=True)
        else:
            mask = np.zeros((1, 1, grid, grid), np.float32)
        out = self._run("decoder", {"image_embed": pix_feat, "high_res_feats_0": feats["high_res_feats_0"],
                                "high_res_feats_1": feats["high_res_feats_1"], "point_coords": coords,
                                "point_labels": labels, "mask_input": mask,
                                "has_mask_input": np.array([0.0 if mask_prompt is None else 1.0], np.float32)})
        all_logits = np.asarray(out["low_res_masks"], np.float32)[0]  # K, 4h, 4w
        all_iou = np.asarray(out["iou_predictions"], np.float32)[0]
        tokens = np.asarray(out["mask_tokens"], np.float32)[0]  # K, C
        score = np.asarray(out["object_score_logits"], np.float32).reshape(1, 1)
        logits, iou = self._choose(all_logits, all_iou, multimask)
        sam_tokens = tokens[1:] if multimask and self.settings.use_multimask_token_for_obj_ptr else tokens[:1]
        presence = 1.0
        if self.settings.pred_obj_scores:
            appearing = bool(score[0, 0] > 0)
            logits = logits if appearing else np.full_like(logits, NO_OBJ_SCORE)
            presence = float(1.0 / (1.0 + np.exp(-score[0, 0]))) if self.settings.soft_no_obj_ptr else float(appearing)
        best = int(np.argmax(iou)) if multimask else 0
        token = sam_tokens[best] if multimask and len(sam_tokens) > 1 else sam_tokens[0]
        # copies: a view would keep the runtime's whole output (every candidate mask) alive in the state
        return logits[best][None, None].copy(), token.copy(), presence, score.copy(), float(np.max(iou))

    def _mask_as_output(self, feats: dict[str, np.ndarray], mask_inputs: np.ndarray):
        """``_use_mask_as_output``: the mask itself as logits; the pointer from the decoder on the frame's own features
        with the downsampled mask as prompt, no object when the mask is empty."""
        low_res = mask_as_output(mask_inputs)
        own = (feats["image_embed"] - self._no_mem_embed).astype(np.float32)
        prompt = downsample_mask_prompt(mask_inputs, self.settings.mask_downsample)
        _, token, presence, _, _ = self._sam_heads(own, feats, None, prompt, multimask=False)
        appearing = float(np.any(mask_inputs > 0))
        score = np.array([[MASK_OUT_SCALE * appearing + MASK_OUT_BIAS]], np.float32)
        return low_res, token, presence * appearing if self.settings.pred_obj_scores else presence, score

    def _encode_memory(self, feats: dict[str, np.ndarray], low_res: np.ndarray, score: np.ndarray,
                       is_mask_from_pts: bool) -> np.ndarray:
        binarize = self.settings.binarize_mask_from_pts_for_mem_enc and is_mask_from_pts
        out = self._run("memory_encoder", {"image_embed": feats["image_embed"], "pred_masks": low_res.astype(np.float32),
                                       "object_score_logits": score.astype(np.float32),
                                       "binarize": np.array([1.0 if binarize else 0.0], np.float32)})
        return to_bfloat16(out["maskmem_features"])  # stored as the official predictor stores it

    def _get_image_feature(self, state: dict[str, Any], frame_idx: int) -> dict[str, np.ndarray]:
        """The frame's encoder outputs; the most recent frame's are cached (the official cache)."""
        cached = state["cached_features"].get(frame_idx)
        if cached is None:
            out = self._run("image_encoder", {self.image_encoder.input_names[0]: state["images"].model_input(frame_idx)})
            cached = {name: np.asarray(out[name], np.float32) for name in ("image_embed", "high_res_feats_0",
                                                                           "high_res_feats_1")}
            state["cached_features"] = {frame_idx: cached}
        return cached


__all__ = ["TrackStep"]
