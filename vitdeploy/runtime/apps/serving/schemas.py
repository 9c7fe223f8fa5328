"""The service's requests and answers as Pydantic models: what FastAPI validates (the routes' typed bodies, parsed
once) and what /openapi.json publishes.

The models check form (types as the schema says them, strictly: a JSON string or boolean where a number is asked for
is refused, not converted; fields; counts); their conversion to the service's requests (:meth:`MasksRequest.
prompt_requests`, :meth:`ConceptRequest.concept`) checks what the values mean (labels 0 or 1, one label per point, a
box's corners in order, finite numbers), raising InputError; the service checks the rest against the model files
and the image (points inside the image, no more points than the decoder's shape profile takes).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, model_validator

from vitdeploy.errors import InputError
from vitdeploy.runtime.apps.serving.service import MAX_CONCEPT_BOXES, MAX_PROMPTS, PromptRequest


#: A box's four numbers: JSON numbers only (a string, or true, is refused, not converted: the schema's types).
Box = tuple[StrictFloat, StrictFloat, StrictFloat, StrictFloat]


class Prompt(BaseModel):
    """One prompt in pixels of the original image: points (with labels) and/or a box."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"points": [[500, 375]], "labels": [1]}, {"box": [100, 80, 620, 400], "multimask_output": False}]})

    points: list[tuple[StrictFloat, StrictFloat]] | None = Field(None, description="[[x, y], ...] clicks")
    labels: list[StrictInt] | None = Field(None, description="1 (foreground) or 0 (background), one per point; "
                                                             "default: all 1")
    box: Box | None = Field(None, description="[x0, y0, x1, y1]")
    multimask_output: StrictBool | None = Field(None, description="three candidate masks (default: true for one "
                                                                  "click without a box)")

    def prompt_request(self, where: str = "") -> PromptRequest:
        """The prompt as the service takes it; InputError (``where`` first: ``prompt 1: ``) naming what is wrong."""
        points = labels = box = None
        if self.points is not None:
            points = _finite(self.points, f"{where}'points'", (-1, 2))
            given = self.labels if self.labels is not None else [1] * len(points)
            if len(given) != len(points):
                raise InputError(f"{where}'labels' must be a {len(points)} list, got shape [{len(given)}]")
            labels = np.asarray(given, np.int64)
            if not np.isin(labels, (0, 1)).all():
                raise InputError(f"{where}'labels' must be 1 (foreground) or 0 (background), one per point")
        elif self.labels is not None:
            raise InputError(f"{where}'labels' without 'points': give the points they label")
        if self.box is not None:
            box = _finite([self.box], f"{where}'box'", (-1, 4))[0]
            if not (box[0] < box[2] and box[1] < box[3]):
                raise InputError(f"{where}'box' must be [x0, y0, x1, y1] with x0 < x1 and y0 < y1, got {box.tolist()}")
        if points is None and box is None:
            raise InputError(f"{where}give 'points' (with 'labels') and/or a 'box'")
        multimask = self.multimask_output
        if multimask is None:  # the official predictor's default: three masks for one click without a box
            multimask = points is not None and len(points) == 1 and box is None
        return PromptRequest(points, labels, box, multimask)


class MasksRequest(Prompt):
    """The body of ``POST /v1/embeddings/{id}/masks``: one prompt, or ``{"prompts": [prompt, ...]}``."""

    #: What the answer to an unknown field says a request has.
    fields_hint: ClassVar[str] = "a prompt has points, labels, box, multimask_output (or a batch: prompts)"

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"points": [[500, 375]], "labels": [1]}, {"prompts": [{"box": [10, 10, 200, 150]}, {"points": [[40, 60]]}]}]})

    prompts: list[Prompt] | None = Field(None, min_length=1, max_length=MAX_PROMPTS,
                                         description=f"a batch of at most {MAX_PROMPTS} prompts")

    @model_validator(mode="after")
    def _one_form(self) -> MasksRequest:
        if self.prompts is not None and self.model_fields_set - {"prompts"}:
            raise ValueError("give one prompt or 'prompts', not both")
        return self

    def prompt_requests(self) -> list[PromptRequest]:
        """The prompts as the service takes them (one, or the batch's), each checked for what it means."""
        if self.prompts is None:
            return [self.prompt_request()]
        return [prompt.prompt_request(f"prompt {k}: ") for k, prompt in enumerate(self.prompts)]


class ConceptRequest(BaseModel):
    """The body of ``POST /v1/embeddings/{id}/concepts`` (SAM 3): a text and/or exemplar boxes, in pixels of the
    original image."""

    fields_hint: ClassVar[str] = "a concept prompt has text, boxes, negative_boxes, confidence_threshold"
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"text": "yellow school bus"}, {"text": "soda can", "boxes": [[40, 60, 90, 180]], "confidence_threshold": 0.4}]})

    text: StrictStr | None = Field(None, min_length=1, description="the concept, a noun phrase")
    boxes: list[Box] | None = Field(None, max_length=MAX_CONCEPT_BOXES,
                                    description="[[x0, y0, x1, y1], ...] positive exemplars")
    negative_boxes: list[Box] | None = Field(None, max_length=MAX_CONCEPT_BOXES,
                                             description="[[x0, y0, x1, y1], ...] negative exemplars")
    confidence_threshold: StrictFloat = Field(0.5, ge=0, le=1, description="keep instances above this score "
                                                                           "(Sam3Processor's default)")

    def concept(self) -> tuple[Any, float]:
        """(the :class:`~vitdeploy.runtime.apps.sam3.concept.ConceptPrompt`, the confidence threshold); InputError for
        a box that is not four finite numbers, or neither a text nor a box. The text and the boxes are checked against
        the model and the image by the service (:meth:`~vitdeploy.runtime.apps.serving.service.ConceptSide.check`)."""
        from vitdeploy.runtime.apps.sam3.concept import ConceptPrompt

        boxes: list[tuple[float, ...]] = []
        labels: list[bool] = []
        for key, given, label in (("boxes", self.boxes, True), ("negative_boxes", self.negative_boxes, False)):
            if given is not None:
                array = _finite(given, f"'{key}'", (-1, 4))
                boxes += [tuple(float(v) for v in box) for box in array]
                labels += [label] * len(array)
        if self.text is None and not boxes:
            raise InputError("give a 'text' and/or exemplar 'boxes' (or 'negative_boxes')")
        return ConceptPrompt(self.text, tuple(boxes), tuple(labels)), float(self.confidence_threshold)


def _finite(values: Any, name: str, shape: tuple[int, int]) -> np.ndarray:
    """``values`` (numbers, by their type already) as an (N, k) float64 array: at least one row, every value finite."""
    array = np.asarray(values, dtype=np.float64).reshape(-1, shape[1])
    if array.size == 0:
        raise InputError(f"{name} must be a Nx{shape[1]} list, got shape [0]")
    if not np.isfinite(array).all():
        raise InputError(f"{name} holds a value that is not a finite number")
    return array


def parse_prompts(body: Any) -> list[PromptRequest]:
    """The prompts of a masks request's JSON (one prompt, or ``{"prompts": [...]}``) as the API takes them: the same
    model, the same conversion (a library caller's way to the service's ``masks``)."""
    return MasksRequest.model_validate(body).prompt_requests()


class ImageUpload(BaseModel):
    """A JSON upload of an image file (the other form is the file's bytes as the body)."""

    model_config = ConfigDict(extra="forbid")

    image: str = Field(description="base64 of the image file's bytes (PNG, JPEG, ...)")


class EmbeddingCreated(BaseModel):
    id: str = Field(description="the embedding's id: SHA-256 of the image's bytes and of the encoder file")
    height: int
    width: int
    cached: bool = Field(description="true: this image was cached already and was not encoded again")


class EmbeddingInfo(BaseModel):
    id: str
    height: int
    width: int


class CocoRle(BaseModel):
    size: tuple[int, int] = Field(description="[height, width]")
    counts: str = Field(description="COCO's compressed run-length string (column-major)")


class MaskResult(BaseModel):
    masks: list[CocoRle]
    scores: list[float] = Field(description="the decoder's predicted IoU of each mask")
    areas: list[int] = Field(description="pixels in each mask")


class MasksAnswer(BaseModel):
    id: str
    results: list[MaskResult] = Field(description="one per prompt, in order")


class ConceptInstance(BaseModel):
    score: float = Field(description="sigmoid(logit) x sigmoid(presence), as Sam3Processor's scores")
    bbox: tuple[float, float, float, float] = Field(description="[x, y, width, height] in pixels (COCO's)")
    bbox_xyxy: tuple[float, float, float, float] = Field(description="[x0, y0, x1, y1] in pixels")
    area: int = Field(description="pixels in the mask")
    segmentation: CocoRle


class ConceptAnswer(BaseModel):
    id: str
    prompt: dict = Field(description="the prompt as taken: text, boxes, labels (true: positive)")
    confidence_threshold: float
    instances: list[ConceptInstance] = Field(description="every instance above the threshold, in query order")


class Health(BaseModel):
    model_config = ConfigDict(extra="allow")

    status: str
    encoder: str
    decoder: str
    uptime_s: float


class ErrorBody(BaseModel):
    error: str = Field(description="one line: what is wrong and what to do")


__all__ = ["parse_prompts", "CocoRle", "ConceptAnswer", "ConceptInstance", "ConceptRequest", "EmbeddingCreated", "EmbeddingInfo",
           "ErrorBody", "Health", "ImageUpload", "MaskResult", "MasksAnswer", "MasksRequest", "Prompt"]
