"""SAM 3 on images from exported files, torch-free: ``sam3.model.sam3_image_processor.Sam3Processor``'s calls.

The official example runs unchanged but for the line that builds the model::

    model = Sam3ImageModel("sam3.onnx", "sam3_text.onnx", "sam3_detector.onnx")   # build_sam3_image_model()
    processor = Sam3Processor(model)
    state = processor.set_image(image)
    output = processor.set_text_prompt(state=state, prompt="yellow school bus")
    masks, boxes, scores = output["masks"], output["boxes"], output["scores"]

:class:`Sam3ImageModel` opens the three files ``vitdeploy export`` writes for one SAM 3 model (``-r sam3``,
``-r sam3_text``, ``-r sam3_detector``; or a Runner each) through the one seam every file is opened by, checks
they belong together, tokenizes text with CLIP's tokenizer in NumPy and keeps each prompt's text features (a prompt
is encoded once per model). :class:`Sam3Processor` answers ``set_image``, ``set_image_batch``,
``set_text_prompt``, ``add_geometric_prompt``, ``reset_all_prompts`` and ``set_confidence_threshold`` with the
official meanings and the official state keys (and ``set_concept_prompt``, vitdeploy's: a text and boxes in one
detector run); arrays are NumPy where the official returns tensors:

- ``state["masks"]`` (N, 1, H, W) bool, ``state["masks_logits"]`` (N, 1, H, W) float32 (the official name; they
  are probabilities: the sigmoid of the upsampled logits), ``state["boxes"]`` (N, 4) float32 x0, y0, x1, y1 in
  pixels, ``state["scores"]`` (N,) float32: the queries whose ``sigmoid(logit) * sigmoid(presence)`` exceeds the
  confidence threshold, in query order.

Where this one is stricter, in one line (the official truncates or lets them through): an empty text, a text
of more tokens than the context (32 with start and end), a box that is not inside the image (cx, cy, w, h
normalized to [0, 1]) and more exemplar boxes than the detector file takes (its ``max_boxes``).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from typing import Any

import numpy as np

from vitdeploy.errors import InputError
from vitdeploy.runtime.apps.common.files import OpenModel
from vitdeploy.runtime.apps.sam3.files import CLICKS, CONCEPT, CONCEPT_AND_CLICKS, check_sam3_files
from vitdeploy.runtime.apps.sam3.scores import instance_scores, sigmoid_in_place
from vitdeploy.runtime.backends.base import Runner
from vitdeploy.runtime.deploy.loader import OpenOptions
from vitdeploy.runtime.deploy.plan import ModelPlan
from vitdeploy.runtime.processing.preprocess import check_rgb_uint8
from vitdeploy.runtime.processing.recorded_inputs import RecordsInputs
from vitdeploy.runtime.processing.sam2_transforms import resize_bilinear

#: The text ``Sam3Processor.add_geometric_prompt`` encodes when boxes come before any text.
VISUAL_PROMPT = "visual"
#: Text prompts whose features a model keeps (the official encodes each call anew).
TEXT_CACHE_SIZE = 64
#: The graphs of the model, as ``record_inputs`` names them, and the attribute that runs each.
GRAPHS = {"vision_encoder": "vision", "text_encoder": "text", "detector": "detector"}


def check_text_prompt(prompt: Any, tokenizer: Any, context_length: int) -> None:
    """Raise InputError for an empty text or one of more tokens than the text encoder reads (the official cuts it)."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise InputError(f"the text prompt is empty ({prompt!r}): name the concept, e.g. 'yellow school bus'")
    count = tokenizer.count(prompt)
    if count > context_length:
        raise InputError(f"the text prompt takes {count} tokens but SAM 3's text encoder reads {context_length} (with "
                         "its start and end): shorten it")


def _check_box_slots(detector: Any, max_boxes: int) -> None:
    """InputError where the detector file's graph takes another number of boxes than its metadata's ``max_boxes``
    (a hand-edited file: ONNX Runtime would fail on the first prompt with its own shape error)."""
    shape = detector.input_shapes().get("box_padding") if hasattr(detector, "input_shapes") else None
    slots = shape[1] if isinstance(shape, (list, tuple)) and len(shape) == 2 else None
    if isinstance(slots, int) and slots != max_boxes:
        raise InputError(f"detector '{getattr(detector, 'path', detector)}' says max_boxes {max_boxes} in its metadata "
                         f"but its graph takes {slots} boxes: the file was edited; export it again")


class Sam3ImageModel(RecordsInputs):
    """SAM 3's image model as three exported files (what ``build_sam3_image_model`` returns for ``Sam3Processor``).

    Args:
        vision, text, detector: the files (``.onnx``) or Runners, in that order; text and detector may be left out
            by a model for clicks only (``interactive`` given).
        options, device, threads, runtime, inference_precision: how to open them, as for every predictor
            (``runtime="auto"``: the deployment decided on this machine, per file).
        tokenizer: CLIP's tokenizer (default: :class:`~vitdeploy.runtime.processing.clip_tokenizer.ClipTokenizer`
            with the vocabulary found on this machine).
        interactive: the interactive decoder's file or Runner, for clicks and boxes (:meth:`predict_inst`; what
            ``build_sam3_image_model(enable_inst_interactivity=True)`` adds).
    """

    RECORDABLE = tuple(GRAPHS)
    RUNS = "SAM 3's image model"

    def __init__(self, vision: Runner | str | os.PathLike, text: Runner | str | os.PathLike | None = None,
                 detector: Runner | str | os.PathLike | None = None, *, options: OpenOptions | None = None,
                 device: str = "cpu", threads: int | None = None, runtime: str = "auto",
                 inference_precision: str | None = None, tokenizer: Any = None,
                 interactive: Runner | str | os.PathLike | None = None):
        if (text is None) != (detector is None) or (text is None and interactive is None):
            raise InputError("SAM 3's image model is its vision encoder with the text encoder and detector (text and "
                             "boxes), and/or with the interactive decoder (clicks): give text and detector together, "
                             "or interactive=")
        o = OpenOptions.of(options, device=device, threads=threads, runtime=runtime, inference_precision=inference_precision)
        given = {"vision": vision, "text": text, "detector": detector, "interactive": interactive}
        fileset = (CONCEPT_AND_CLICKS if interactive is not None else CONCEPT) if text is not None else CLICKS
        self._open(fileset.open({role: given[role] for role in fileset.roles}, o), tokenizer)

    @classmethod
    def from_plan(cls, plan: ModelPlan, *, tokenizer: Any = None) -> Sam3ImageModel:
        """The model of a plan made from checked files (a dataset worker's): each file opened as planned, nothing
        checked or decided again."""
        fileset = next(f for f in (CONCEPT_AND_CLICKS, CONCEPT, CLICKS) if all(role in plan for role in f.roles))
        return cls.of_open(fileset.open(plan=plan), tokenizer=tokenizer)

    @classmethod
    def of_open(cls, model: OpenModel, *, tokenizer: Any = None) -> Sam3ImageModel:
        """The model on runners already opened from checked files (a server's concept side shares the vision
        encoder's runner with its click side)."""
        image_model = cls.__new__(cls)
        image_model._open(model, tokenizer)
        return image_model

    def _open(self, model: OpenModel, tokenizer: Any) -> None:
        #: How each file runs (what a route passes on).
        self.plan = model.plan
        self.vision = model["vision"]
        self.text = self.detector = self.inst_interactive_predictor = None
        if "text" in model.runners:
            self.text, self.detector = model["text"], model["detector"]
            meta = self.detector.metadata
            self.max_boxes = int(meta["max_boxes"])
            self.context_length = int(meta["context_length"])
            _check_box_slots(self.detector, self.max_boxes)
        if "interactive" in model.runners:
            from vitdeploy.runtime.apps.sam3.interactive import Sam3InteractivePredictor

            #: The official attribute's name: the click predictor, on this model's vision encoder.
            self.inst_interactive_predictor = Sam3InteractivePredictor.of_open(model)
        vision_meta = self.vision.metadata
        self.resolution = int(vision_meta["input_size"][0])
        self.variant = str(vision_meta.get("variant"))
        self._tokenizer = tokenizer
        from vitdeploy.runtime.processing.sam3_transforms import Sam3Preprocessor

        #: ``Sam3Processor``'s image transform: the uint8 square resize, /255, normalized (the vision file's values).
        self.preprocess = Sam3Preprocessor(self.resolution, tuple(vision_meta["pixel_mean"]),
                                           tuple(vision_meta["pixel_std"]))
        self._text_cache: OrderedDict[str, tuple[np.ndarray, np.ndarray]] = OrderedDict()

    def record_inputs(self, graph: str, limit: int = 16):
        """:meth:`RecordsInputs.record_inputs`, and ``"interactive_decoder"`` where the model has one (its inputs
        as :meth:`predict_inst` runs it)."""
        if graph == "interactive_decoder" and self.inst_interactive_predictor is not None:
            return self.inst_interactive_predictor.record_inputs(graph, limit)
        return super().record_inputs(graph, limit)

    def _run(self, graph: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return getattr(self, GRAPHS[graph]).run(self._recorded(graph, feeds))

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            from vitdeploy.runtime.processing.clip_tokenizer import ClipTokenizer

            self._tokenizer = ClipTokenizer(context_length=self.context_length)
        return self._tokenizer

    def encode_image(self, image: np.ndarray) -> dict[str, np.ndarray]:
        """An HxWx3 uint8 image -> the vision encoder's outputs (``backbone_fpn_*``; ``image_embed``,
        ``high_res_feats_*`` for clicks)."""
        pixels = self.preprocess(image)
        return {name: np.asarray(value, np.float32)
                for name, value in self._run("vision_encoder", {self.vision.input_names[0]: pixels}).items()}

    def encode_text(self, prompt: str) -> tuple[np.ndarray, np.ndarray]:
        """A text prompt -> (text_memory (1, L, d), text_padding (1, L) bool), kept per prompt."""
        self._require_detector("a text prompt")
        if isinstance(prompt, str) and prompt in self._text_cache:
            self._text_cache.move_to_end(prompt)
            return self._text_cache[prompt]
        self.check_prompt(prompt, 0)
        tokens = self.tokenizer([prompt])
        memory = np.asarray(self._run("text_encoder", {self.text.input_names[0]: tokens})["text_memory"], np.float32)
        features = (memory, tokens == 0)
        self._text_cache[prompt] = features
        if len(self._text_cache) > TEXT_CACHE_SIZE:
            self._text_cache.popitem(last=False)
        return features

    def check_prompt(self, text: str | None, box_count: int, fewer: str = "reset_all_prompts") -> None:
        """Raise InputError for a text the text encoder cannot take, or more exemplar boxes than the detector file's
        slots (``fewer``: how else to send fewer, said after exporting with more slots)."""
        if text is not None:
            check_text_prompt(text, self.tokenizer, self.context_length)
        if box_count > self.max_boxes:
            raise InputError(f"{box_count} exemplar boxes, but the detector file takes at most {self.max_boxes} exemplar "
                             f"boxes: export it with a larger [detector] max_boxes, or {fewer}")

    def detect(self, features: dict[str, np.ndarray], text: tuple[np.ndarray, np.ndarray],
               boxes: list[list[float]], labels: list[bool]) -> dict[str, np.ndarray]:
        """One ``forward_grounding``: the image's features, the text's, and the exemplar boxes (cx, cy, w, h in
        [0, 1]) with their labels, padded to the file's box slots -> the detector's outputs for the image."""
        self._require_detector("exemplar boxes")
        self.check_prompt(None, len(boxes))
        slots = self.max_boxes  # the file's fixed box slots
        padded = np.tile(np.array([0.5, 0.5, 1.0, 1.0], np.float32), (1, slots, 1))  # a finite box in unused slots
        padded[0, :len(boxes)] = np.asarray(boxes, np.float32).reshape(-1, 4)
        label_ids = np.zeros((1, slots), np.int64)
        label_ids[0, :len(labels)] = np.asarray(labels, bool)
        feeds = {f"backbone_fpn_{i}": features[f"backbone_fpn_{i}"] for i in range(3)}
        feeds.update(text_memory=text[0], text_padding=text[1], boxes=padded, box_labels=label_ids,
                     box_padding=(np.arange(slots) >= len(boxes))[None])
        return {name: np.asarray(value) for name, value in self._run("detector", feeds).items()}

    # --- clicks and boxes (the interactive predictor) -----------------------------------------------------

    def predict_inst(self, inference_state: dict, **kwargs: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``Sam3Image.predict_inst``: masks, scores and low-resolution logits for clicks and/or a box on the image of
        ``inference_state`` (from ``Sam3Processor.set_image``); ``kwargs`` are ``SAM3InteractiveImagePredictor.predict``'s
        (point_coords, point_labels, box, mask_input, multimask_output, return_logits, normalize_coords)."""
        predictor = self._clicks(inference_state, "backbone_out", "set_image", "predict_inst")
        predictor.features_from([inference_state["backbone_out"]],
                                [(inference_state["original_height"], inference_state["original_width"])], batch=False)
        try:
            return predictor.predict(**kwargs)
        finally:
            predictor.reset_predictor()

    def predict_inst_batch(self, inference_state: dict, *args: Any, **kwargs: Any):
        """``Sam3Image.predict_inst_batch``: :meth:`predict_inst` per image of a ``Sam3Processor.set_image_batch``
        state (lists of prompts, one per image, as ``SAM3InteractiveImagePredictor.predict_batch`` takes them)."""
        predictor = self._clicks(inference_state, "backbone_out_batch", "set_image_batch", "predict_inst_batch")
        predictor.features_from(inference_state["backbone_out_batch"],
                                list(zip(inference_state["original_heights"], inference_state["original_widths"])),
                                batch=True)
        try:
            return predictor.predict_batch(*args, **kwargs)
        finally:
            predictor.reset_predictor()

    def _require_detector(self, what: str) -> None:
        if self.detector is None:
            raise InputError(f"{what} need SAM 3's text encoder and detector: this model was opened with the vision "
                             "encoder and interactive decoder only (clicks); open Sam3ImageModel(vision, text, detector)")

    def _clicks(self, state: Any, key: str, setter: str, call: str):
        if self.inst_interactive_predictor is None:
            raise InputError(f"{call} needs SAM 3's interactive decoder: open the model with "
                             "Sam3ImageModel(..., interactive='sam3_interactive.onnx') (vitdeploy export -r sam3_interactive)")
        if not isinstance(state, dict) or key not in state:
            raise InputError(f"You must call {setter} before {call}")
        return self.inst_interactive_predictor


def _check_box(box: Any) -> list[float]:
    values = np.asarray(box, np.float64).reshape(-1)
    if values.size != 4 or not np.all(np.isfinite(values)):
        raise InputError(f"a box is [center_x, center_y, width, height] normalized to [0, 1], got {box!r}")
    cx, cy, w, h = values
    eps = 1e-6
    if w <= 0 or h <= 0 or cx - w / 2 < -eps or cy - h / 2 < -eps or cx + w / 2 > 1 + eps or cy + h / 2 > 1 + eps:
        raise InputError(f"the box {[round(float(v), 4) for v in values]} (cx, cy, w, h normalized to [0, 1]) is not "
                         "inside the image: give a box of positive size within it")
    return [float(v) for v in values]


class Sam3Processor:
    """``Sam3Processor`` on :class:`Sam3ImageModel` (see the module docstring).

    Args:
        model: the files, as :class:`Sam3ImageModel`.
        resolution: the image size (default: the files'); another size than theirs is refused.
        device: taken for the official signature; the model's files were opened on theirs.
        confidence_threshold: a query is kept above this score (official default 0.5).
    """

    def __init__(self, model: Sam3ImageModel, resolution: int | None = None, device: str = "cpu",
                 confidence_threshold: float = 0.5):
        if not isinstance(model, Sam3ImageModel):
            raise InputError(f"Sam3Processor takes a Sam3ImageModel (the three exported files), got {type(model).__name__}")
        if resolution is not None and int(resolution) != model.resolution:
            raise InputError(f"resolution {resolution}: these files were exported for {model.resolution} px images")
        self.model = model
        self.resolution = model.resolution
        self.device = device
        self.confidence_threshold = float(confidence_threshold)

    # --- images ---------------------------------------------------------------------------------------

    @staticmethod
    def _as_rgb(image: Any) -> np.ndarray:
        if not isinstance(image, np.ndarray) and hasattr(image, "convert"):  # a PIL image, as the official takes
            image = np.asarray(image.convert("RGB"))
        check_rgb_uint8(image)
        return image

    def set_image(self, image: Any, state: dict | None = None) -> dict:
        """Encode an image (HxWx3 uint8 RGB, or a PIL image) into ``state`` (a new dict by default)."""
        state = {} if state is None else state
        image = self._as_rgb(image)
        state["original_height"], state["original_width"] = int(image.shape[0]), int(image.shape[1])
        state["backbone_out"] = self.model.encode_image(image)
        return state

    def set_image_batch(self, images: list, state: dict | None = None) -> dict:
        """Encode several images (``state["original_heights"]``/``["original_widths"]``, one feature set each)."""
        if not isinstance(images, list) or not images:
            raise InputError("set_image_batch takes a non-empty list of images")
        state = {} if state is None else state
        arrays = [self._as_rgb(image) for image in images]
        state["original_heights"] = [int(a.shape[0]) for a in arrays]
        state["original_widths"] = [int(a.shape[1]) for a in arrays]
        state["backbone_out_batch"] = [self.model.encode_image(a) for a in arrays]
        return state

    # --- prompts --------------------------------------------------------------------------------------

    def set_text_prompt(self, prompt: str, state: dict) -> dict:
        """Find every instance of ``prompt`` in the image (exemplar boxes already added still apply)."""
        self._require_image(state)
        return self._forward_grounding(state, self.model.encode_text(prompt),
                                       state.get("geometric_prompt", {"boxes": [], "labels": []}))

    def add_geometric_prompt(self, box: list, label: bool, state: dict) -> dict:
        """Add an exemplar box (``[center_x, center_y, width, height]`` normalized to [0, 1]; ``label`` True for a
        positive, False for a negative) and find the instances again; without a text prompt, the text is "visual"."""
        self._require_image(state)
        checked = _check_box(box)
        text = state.get("text_prompt") or self.model.encode_text(VISUAL_PROMPT)
        prompt = state.get("geometric_prompt", {"boxes": [], "labels": []})
        grown = {"boxes": [*prompt["boxes"], checked], "labels": [*prompt["labels"], bool(label)]}
        return self._forward_grounding(state, text, grown)  # a refused prompt (too many boxes) leaves the state as was

    def set_concept_prompt(self, state: dict, prompt: str | None = None, boxes: list | tuple = (),
                           labels: list | tuple = ()) -> dict:
        """vitdeploy's, not the official's: a text and/or exemplar boxes (as :meth:`add_geometric_prompt` takes them)
        at once, in one detector run. The state is the one ``set_text_prompt(prompt)`` and then
        ``add_geometric_prompt`` for each box leave (each of those runs the detector; only the last run's inputs, the
        text and every box, decide the result); without a text, the text is "visual", as there."""
        self._require_image(state)
        if prompt is None and not boxes:
            raise InputError("no prompt: give a text and/or exemplar boxes")
        if len(boxes) != len(labels):
            raise InputError(f"{len(boxes)} exemplar boxes and {len(labels)} labels: give one label per box")
        checked = [_check_box(box) for box in boxes]
        text = self.model.encode_text(VISUAL_PROMPT if prompt is None else prompt)
        return self._forward_grounding(state, text, {"boxes": checked, "labels": [bool(v) for v in labels]})

    def reset_all_prompts(self, state: dict) -> None:
        """Remove the prompts and the results (the image stays)."""
        for key in ("text_prompt", "geometric_prompt", "boxes", "masks", "masks_logits", "scores"):
            state.pop(key, None)

    def set_confidence_threshold(self, threshold: float, state: dict | None = None) -> dict | None:
        """Change the threshold; a state with results is filtered again."""
        self.confidence_threshold = float(threshold)
        if state is not None and "boxes" in state:
            return self._forward_grounding(state)
        return state

    # --- internals ------------------------------------------------------------------------------------

    @staticmethod
    def _require_image(state: dict) -> None:
        if not isinstance(state, dict) or "backbone_out" not in state:
            if isinstance(state, dict) and "backbone_out_batch" in state:
                raise InputError("this state holds a batch of images: prompt one image at a time (set_image)")
            raise InputError("You must call set_image before set_text_prompt")

    def _forward_grounding(self, state: dict, text: tuple | None = None, prompt: dict | None = None) -> dict:
        """Run the detector on the state's image with ``text`` and ``prompt`` (default: the state's own), then keep
        them in the state with the results."""
        text = state["text_prompt"] if text is None else text
        prompt = state["geometric_prompt"] if prompt is None else prompt
        out = self.model.detect(state["backbone_out"], text, prompt["boxes"], prompt["labels"])
        state["text_prompt"], state["geometric_prompt"] = text, prompt
        scores = instance_scores(out["pred_logits"][0], out["presence_logit"][0])  # Q
        keep = scores > self.confidence_threshold
        height, width = state["original_height"], state["original_width"]
        cx, cy, w, h = np.moveaxis(out["pred_boxes"][0][keep].astype(np.float32), -1, 0)
        boxes = np.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], axis=-1)
        boxes = boxes * np.array([width, height, width, height], np.float32)
        logits = out["pred_masks"][0][keep][:, None]  # N, 1, 4g, 4g
        # the official's interpolate then sigmoid; the sigmoid on each block of the resize, in place
        probabilities = resize_bilinear(logits, (height, width), antialias=False, finish=sigmoid_in_place)
        state["masks_logits"] = probabilities
        state["masks"] = probabilities > 0.5
        state["boxes"] = boxes.astype(np.float32).reshape(-1, 4)
        state["scores"] = scores[keep].astype(np.float32)
        return state


__all__ = ["GRAPHS", "Sam3ImageModel", "Sam3Processor", "check_sam3_files",
           "check_text_prompt"]
