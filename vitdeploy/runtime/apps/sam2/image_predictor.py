"""SAM 2's image predictor on exported files, torch-free: ``sam2.sam2_image_predictor.SAM2ImagePredictor``'s calls.

``Sam2ImagePredictor(encoder, decoder)`` takes the files ``vitdeploy export`` writes for a SAM 2 model
(``-r sam2.1_hiera_tiny`` and ``-r sam2.1_hiera_tiny_decoder``, or a Runner each) and answers the official
calls with the official meanings: ``set_image``, ``set_image_batch``, ``predict`` (points, labels, box,
mask_input, multimask_output, return_logits, normalize_coords), ``predict_batch``, ``get_image_embedding``,
``reset_predictor``. Returns are NumPy, as the official ``predict`` returns them: masks (C, H, W) float32
0/1 (logits with ``return_logits``), scores (C,), low-resolution logits (C, 256, 256) clamped to +-32.

Where the official predictor runs a batch of prompts (``point_coords`` (B, N, 2), ``box`` (B, 4)) as one
decoder call, this one runs the exported decoder once per prompt set (its graph takes one); the outputs
gain the batch axis the same way. The single-mask choice (``multimask_output=False``) is the official
decoder's: the single-mask token unless its stability score falls under the threshold recorded in the
decoder file (``dynamic_multimask_via_stability``), then the best multimask output.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from vitdeploy.errors import InputError
from vitdeploy.runtime.apps.common.files import FileSet, OpenModel
from vitdeploy.runtime.apps.sam.predictor import decoder_max_points
from vitdeploy.runtime.apps.sam2.files import IMAGE_FEATURES, IMAGE_PAIR, check_sam2_pair
from vitdeploy.runtime.backends.base import Runner
from vitdeploy.runtime.deploy.loader import OpenOptions
from vitdeploy.runtime.deploy.plan import ModelPlan
from vitdeploy.runtime.processing.preprocess import check_rgb_uint8
from vitdeploy.runtime.processing.recorded_inputs import RecordsInputs
from vitdeploy.runtime.processing.sam2_transforms import Sam2Transforms

#: The official predictor clamps the low-resolution logits it returns to this range.
LOW_RES_CLAMP = 32.0


def encode_image(encoder: Runner, transforms: Sam2Transforms, image: np.ndarray) -> dict[str, np.ndarray]:
    """One RGB image's :data:`IMAGE_FEATURES` (each (1, C, h, w) float32), as ``set_image`` computes them."""
    out = encoder.run({encoder.input_names[0]: transforms(image)[None]})
    return {name: np.asarray(out[name], np.float32) for name in IMAGE_FEATURES}


class Sam2ImageEncoder:
    """The image encoder alone: an HxWx3 uint8 RGB picture -> its features by name (:data:`IMAGE_FEATURES`), as
    :meth:`Sam2ImagePredictor.set_image` computes them, without a decoder (a server's encoder side)."""

    def __init__(self, encoder: Runner):
        meta = encoder.metadata
        self.runner = encoder
        self.transforms = Sam2Transforms(int(meta["input_size"][0]), meta["pixel_mean"], meta["pixel_std"])

    def __call__(self, picture: np.ndarray) -> dict[str, np.ndarray]:
        return encode_image(self.runner, self.transforms, _as_rgb(picture))


@dataclass(frozen=True)
class MaskChoice:
    """``MaskDecoder.forward``'s choice among the outputs of every mask token (the graph returns them all), with the
    settings the decoder file records."""

    dynamic: bool = False  # dynamic_multimask_via_stability
    delta: float = 0.05
    thresh: float = 0.98

    @classmethod
    def from_metadata(cls, decoder: dict[str, Any]) -> MaskChoice:
        return cls(bool(decoder.get("dynamic_multimask_via_stability", False)),
                   float(decoder.get("dynamic_multimask_stability_delta", 0.05)),
                   float(decoder.get("dynamic_multimask_stability_thresh", 0.98)))

    def __call__(self, logits: np.ndarray, iou: np.ndarray, multimask: bool) -> tuple[np.ndarray, np.ndarray]:
        """(K, h, w) logits and (K,) scores -> the multimask outputs (tokens 1..), or the single mask (token 0), which
        ``dynamic_multimask_via_stability`` replaces by the best multimask one when it is unstable."""
        if multimask:
            return logits[1:], iou[1:]
        if not self.dynamic:
            return logits[:1], iou[:1]
        single = logits[0].reshape(-1)  # _dynamic_multimask_via_stability
        area_i = float(np.sum(single > self.delta))
        area_u = float(np.sum(single > -self.delta))
        stability = area_i / area_u if area_u > 0 else 1.0
        if stability >= self.thresh:
            return logits[:1], iou[:1]
        best = 1 + int(np.argmax(iou[1:]))
        return logits[best:best + 1], iou[best:best + 1]


class Sam2ImagePredictor(RecordsInputs):
    """``SAM2ImagePredictor`` on exported files (see the module docstring). ``record_inputs("mask_decoder")`` keeps
    the decoder's real inputs (to calibrate it: ``vitdeploy calibrate --feeds``).

    Args:
        encoder, decoder: the exported files (``.onnx``) or Runners.
        device, threads, runtime, inference_precision: as :class:`vitdeploy.runtime.SamPredictor`'s.
        mask_threshold: logits above it are the mask (official default 0.0).
        max_hole_area, max_sprinkle_area: background (foreground) regions of the low-resolution logits of at most this
            many pixels become foreground (background) before the upsampling (official default 0: off; needs SciPy).
    """

    #: The official defaults of the clean-up of the low-resolution masks.
    MAX_HOLE_AREA = MAX_SPRINKLE_AREA = 0.0
    #: The image's features by name, as the encoder gives them and the decoder takes them.
    FEATURES = IMAGE_FEATURES
    RECORDABLE = ("mask_decoder",)
    RUNS = "SAM 2's image predictor"

    #: The files it takes, in its (encoder, decoder) order: SAM 2's pair (SAM 3's click predictor takes its own).
    FILES: FileSet = IMAGE_PAIR

    def __init__(self, encoder: Runner | str | os.PathLike, decoder: Runner | str | os.PathLike, *,
                 options: OpenOptions | None = None, device: str = "cpu", threads: int | None = None,
                 runtime: str = "auto", inference_precision: str | None = None, mask_threshold: float = 0.0,
                 max_hole_area: float | None = None, max_sprinkle_area: float | None = None):
        o = OpenOptions.of(options, device=device, threads=threads, runtime=runtime, inference_precision=inference_precision)
        encoder_role, decoder_role = self.FILES.roles
        self._open(self.FILES.open({encoder_role: encoder, decoder_role: decoder}, o), mask_threshold, max_hole_area,
                   max_sprinkle_area)

    @classmethod
    def from_plan(cls, plan: ModelPlan, *, mask_threshold: float = 0.0, max_hole_area: float | None = None,
                  max_sprinkle_area: float | None = None) -> Sam2ImagePredictor:
        """The predictor of a plan made from checked files (a dataset worker's, a replica's): each file opened as
        planned, nothing checked or decided again."""
        return cls.of_open(cls.FILES.open(plan=plan), mask_threshold=mask_threshold, max_hole_area=max_hole_area,
                           max_sprinkle_area=max_sprinkle_area)

    @classmethod
    def of_open(cls, model: OpenModel, *, mask_threshold: float = 0.0, max_hole_area: float | None = None,
                max_sprinkle_area: float | None = None) -> Sam2ImagePredictor:
        """The predictor on runners already opened from checked files (SAM 3's image model shares its vision
        encoder's runner with its click predictor)."""
        predictor = cls.__new__(cls)
        predictor._open(model, mask_threshold, max_hole_area, max_sprinkle_area)
        return predictor

    def _open(self, model: OpenModel, mask_threshold: float, max_hole_area: float | None,
              max_sprinkle_area: float | None) -> None:
        encoder_role, decoder_role = self.FILES.roles
        #: How each file runs (what a route passes on: a worker, a replica).
        self.plan = model.plan
        self.encoder, self.decoder = model[encoder_role], model[decoder_role]
        self._setup(self.encoder.metadata, mask_threshold, max_hole_area, max_sprinkle_area)

    @classmethod
    def decoder_only(cls, decoder: Runner | str | os.PathLike | None, encoder_metadata: dict[str, Any], *,
                     options: OpenOptions | None = None, mask_threshold: float = 0.0, max_hole_area: float | None = None,
                     max_sprinkle_area: float | None = None, plan: ModelPlan | None = None) -> Sam2ImagePredictor:
        """A predictor without an encoder: it answers prompts on features given to :meth:`set_image_features` (a
        server's decoder side, which never encodes). ``encoder_metadata``: the encoder file's metadata, checked
        against the decoder's as the constructor checks the files; ``plan``: the decoder opened as a plan made from
        checked files says (nothing checked again)."""
        predictor = cls.__new__(cls)
        predictor.encoder = None
        encoder_role, decoder_role = cls.FILES.roles
        model = cls.FILES.open_beside(decoder_role, decoder, {encoder_role: encoder_metadata}, options, plan)
        predictor.plan, predictor.decoder = model.plan, model[decoder_role]
        predictor._setup(encoder_metadata, mask_threshold, max_hole_area, max_sprinkle_area)
        return predictor

    def _setup(self, enc: dict[str, Any], mask_threshold: float, max_hole_area: float | None,
               max_sprinkle_area: float | None) -> None:
        """The predictor's facts from the checked files' metadata."""
        dec = self.decoder.metadata
        #: The encoder file's metadata (a decoder-only predictor has no encoder, but its facts).
        self.encoder_metadata = enc
        self.resolution = int(enc["input_size"][0])
        self._transforms = Sam2Transforms(
            self.resolution, enc["pixel_mean"], enc["pixel_std"], mask_threshold,
            self.MAX_HOLE_AREA if max_hole_area is None else max_hole_area,
            self.MAX_SPRINKLE_AREA if max_sprinkle_area is None else max_sprinkle_area)
        self.mask_threshold = mask_threshold
        self.variant = str(enc.get("variant"))
        self._choose = MaskChoice.from_metadata(dec)
        #: The most points one decoder call takes (the decoder file's shape profile; None where it records none).
        self.max_prompt_points = decoder_max_points(dec)
        self.reset_predictor()

    def encoder_array(self, image: np.ndarray) -> np.ndarray:
        """The (1, 3, S, S) float32 array the encoder runs on for an HxWx3 uint8 RGB ``image`` (``set_image``'s)."""
        return self._transforms(_as_rgb(image))[None]

    def page_facts(self) -> dict[str, Any]:
        """What a page needs to compute this predictor's answers itself (``browser_sam2.js``, the static site of
        :mod:`vitdeploy.runtime.apps.serving.site`): the transforms' numbers and the decoder's choice of masks."""
        meta = self.encoder_metadata
        name = self.encoder.input_names[0] if self.encoder is not None else meta.get("input_name", "image")
        return {"encoder": {"input_size": self.resolution, "input_name": name,
                            "pixel_mean": [float(v) for v in meta["pixel_mean"]],
                            "pixel_std": [float(v) for v in meta["pixel_std"]]},
                "decoder": {"mask_threshold": float(self.mask_threshold),
                            "max_hole_area": float(self._transforms.max_hole_area),
                            "max_sprinkle_area": float(self._transforms.max_sprinkle_area),
                            "mask_choice": asdict(self._choose), "max_points": self.max_prompt_points}}

    # --- images --------------------------------------------------------------------------------------

    def max_clicks(self, box: bool = False) -> int | None:
        """The most clicks one prompt may have (with a ``box`` or not), as this decoder's shape profile allows: a box
        takes 2 of its points (SAM 2 pads no point); None: no limit recorded."""
        return None if self.max_prompt_points is None else max(0, self.max_prompt_points - (2 if box else 0))

    def reset_predictor(self) -> None:
        """Forget the image(s)."""
        self._is_image_set = False
        self._features: dict[str, Any] | None = None
        self._orig_hw: list[tuple[int, int]] | None = None
        self._is_batch = False

    def set_image(self, image: np.ndarray) -> None:
        """Compute the features of an HxWx3 uint8 RGB image (a PIL image is taken too, as officially)."""
        image = _as_rgb(image)
        self.reset_predictor()
        self.features_from([encode_image(self.encoder, self._transforms, image)], [image.shape[:2]], batch=False)

    def set_image_batch(self, image_list: list[np.ndarray]) -> None:
        """Compute the features of several images (for :meth:`predict_batch`)."""
        if not isinstance(image_list, list) or not image_list:
            raise InputError("set_image_batch takes a non-empty list of HxWx3 uint8 images")
        self.reset_predictor()
        images = [_as_rgb(image) for image in image_list]
        self.features_from([encode_image(self.encoder, self._transforms, image) for image in images],
                           [image.shape[:2] for image in images], batch=True)

    def features_from(self, encoded: list[dict[str, Any]], sizes: list[tuple[int, int]], batch: bool) -> None:
        """Take features computed elsewhere (the encoder's :data:`IMAGE_FEATURES` outputs, one dict per image) as
        this predictor's image(s) of original ``sizes`` (H, W); ``batch``: for :meth:`predict_batch`."""
        self.reset_predictor()
        self._features = {"image_embed": np.concatenate([e["image_embed"] for e in encoded]),
                          "high_res_feats": [np.concatenate([e[f"high_res_feats_{i}"] for e in encoded]) for i in (0, 1)]}
        self._orig_hw = [(int(h), int(w)) for h, w in sizes]
        self._is_image_set, self._is_batch = True, batch

    def set_image_features(self, features: dict[str, np.ndarray], original_size: tuple[int, int]) -> None:
        """Use one image's features computed elsewhere (cached, or by a server's encoder side): its
        :data:`IMAGE_FEATURES` arrays, for an image of ``original_size`` (H, W). Not in the official predictor."""
        missing = [name for name in IMAGE_FEATURES if name not in features]
        if missing:
            raise InputError(f"the image features lack {', '.join(missing)}: give the encoder's {', '.join(IMAGE_FEATURES)}")
        height, width = (int(v) for v in original_size)
        if height <= 0 or width <= 0:
            raise InputError(f"original_size must be a positive (H, W), got {original_size}")
        self.features_from([{name: np.asarray(features[name], np.float32) for name in IMAGE_FEATURES}],
                           [(height, width)], batch=False)

    def get_image_embedding(self) -> np.ndarray:
        """The (B, C, h, w) image embedding of the current image(s)."""
        self._require_image("get the image embedding")
        return self._features["image_embed"]

    # --- prompts -> masks ----------------------------------------------------------------------------

    def predict(self, point_coords: Any = None, point_labels: Any = None, box: Any = None, mask_input: Any = None,
                multimask_output: bool = True, return_logits: bool = False,
                normalize_coords: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Masks for the current image (see the module docstring and the official docstring)."""
        self._require_image("predict masks")
        if self._is_batch:
            raise InputError("an image batch is set (set_image_batch): use predict_batch, or set_image for one image")
        return self._predict_one(0, point_coords, point_labels, box, mask_input, multimask_output, return_logits,
                                 normalize_coords)

    def predict_batch(self, point_coords_batch: list | None = None, point_labels_batch: list | None = None,
                      box_batch: list | None = None, mask_input_batch: list | None = None, multimask_output: bool = True,
                      return_logits: bool = False, normalize_coords: bool = True):
        """One :meth:`predict` per image of the batch: lists of masks, scores and low-resolution logits."""
        self._require_image("predict masks")
        if not self._is_batch:
            raise InputError("predict_batch needs an image batch: call set_image_batch first")
        count = len(self._orig_hw)
        masks, scores, logits = [], [], []
        for index in range(count):
            pick = lambda batch: None if batch is None else batch[index]  # noqa: E731
            m, s, low = self._predict_one(index, pick(point_coords_batch), pick(point_labels_batch), pick(box_batch),
                                          pick(mask_input_batch), multimask_output, return_logits, normalize_coords)
            masks.append(m)
            scores.append(s)
            logits.append(low)
        return masks, scores, logits

    def _predict_one(self, index: int, point_coords: Any, point_labels: Any, box: Any, mask_input: Any,
                     multimask_output: bool, return_logits: bool, normalize_coords: bool):
        orig_hw = self._orig_hw[index]
        coords, labels, corners = self._prompts(point_coords, point_labels, box, normalize_coords, orig_hw)
        if coords is None and corners is None:
            raise InputError("give point_coords (with point_labels) or a box")
        masks_prompt = None if mask_input is None else np.asarray(mask_input, np.float32)
        if masks_prompt is not None and masks_prompt.ndim == 3:
            masks_prompt = masks_prompt[None]
        sets = max(len(coords) if coords is not None else 0, len(corners) if corners is not None else 0)
        results = []
        for k in range(sets):
            parts_c, parts_l = [], []
            if corners is not None:
                parts_c.append(corners[min(k, len(corners) - 1)])
                parts_l.append(np.array([2.0, 3.0], np.float32))
            if coords is not None:
                parts_c.append(coords[min(k, len(coords) - 1)])
                parts_l.append(labels[min(k, len(labels) - 1)].astype(np.float32))
            mask_k = None if masks_prompt is None else masks_prompt[min(k, len(masks_prompt) - 1)][None]
            results.append(self._decode(index, np.concatenate(parts_c), np.concatenate(parts_l), mask_k, multimask_output))
        low_res = np.stack([r[0] for r in results])  # B, C, 4h, 4w
        iou = np.stack([r[1] for r in results])  # B, C
        masks = self._transforms.postprocess_masks(low_res, orig_hw)
        low_res = np.clip(low_res, -LOW_RES_CLAMP, LOW_RES_CLAMP)
        if not return_logits:
            masks = (masks > self.mask_threshold).astype(np.float32)
        if sets == 1:  # the official squeeze(0) of a single prompt set
            return masks[0], iou[0], low_res[0]
        return masks, iou, low_res

    def _prompts(self, point_coords: Any, point_labels: Any, box: Any, normalize: bool, orig_hw: tuple[int, int]):
        coords = labels = corners = None
        if point_coords is not None:
            if point_labels is None:
                raise InputError("point_labels must be supplied if point_coords is supplied")
            coords = self._transforms.transform_coords(point_coords, normalize, orig_hw)
            labels = np.asarray(point_labels)
            if coords.ndim == 2:
                coords, labels = coords[None], labels[None]
            if coords.ndim != 3 or coords.shape[-1] != 2 or labels.shape != coords.shape[:2]:
                raise InputError(f"point_coords must be (N, 2) or (B, N, 2) with labels (N,) or (B, N), got "
                                 f"{np.shape(point_coords)} and {np.shape(point_labels)}")
        if box is not None:
            corners = self._transforms.transform_boxes(box, normalize, orig_hw)
        return coords, labels, corners

    def _decode(self, index: int, coords: np.ndarray, labels: np.ndarray, mask: np.ndarray | None, multimask: bool):
        if self.max_prompt_points is not None and len(coords) > self.max_prompt_points:
            # the decoder's token attention grows with the square of the points (a server's memory with it)
            raise InputError(f"the prompt makes {len(coords)} decoder points (clicks, plus a box's 2 corners) and this "
                             f"decoder takes at most {self.max_prompt_points} (its shape profile): give fewer clicks")
        grid = self._features["image_embed"].shape[-1]
        feeds = {
            "image_embed": self._features["image_embed"][index:index + 1],
            "high_res_feats_0": self._features["high_res_feats"][0][index:index + 1],
            "high_res_feats_1": self._features["high_res_feats"][1][index:index + 1],
            "point_coords": coords[None].astype(np.float32), "point_labels": labels[None].astype(np.float32),
            "mask_input": mask.astype(np.float32) if mask is not None else np.zeros((1, 1, 4 * grid, 4 * grid), np.float32),
            "has_mask_input": np.array([1.0 if mask is not None else 0.0], np.float32),
        }
        out = self.decoder.run(self._recorded(self.RECORDABLE[0], feeds))
        logits, iou = np.asarray(out["low_res_masks"])[0], np.asarray(out["iou_predictions"])[0]  # K, 4h, 4w; K
        return self._choose(logits, iou, multimask)

    def _require_image(self, action: str) -> None:
        if not self._is_image_set:
            raise InputError(f"an image must be set with set_image(...) before you {action}")

    @property
    def device(self) -> str:
        return "cpu"


def _as_rgb(image: Any) -> np.ndarray:
    if not isinstance(image, np.ndarray) and hasattr(image, "convert"):  # a PIL image, as the official one takes
        image = np.asarray(image.convert("RGB"))
    check_rgb_uint8(image)
    return image


__all__ = ["IMAGE_FEATURES", "MaskChoice", "Sam2ImageEncoder", "Sam2ImagePredictor", "check_sam2_pair", "encode_image"]
