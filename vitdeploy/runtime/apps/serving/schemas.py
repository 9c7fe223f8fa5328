"""The service's requests and answers as Pydantic models: what FastAPI validates and what /openapi.json publishes.

The models check form (types, fields, counts); the service checks meaning against the model files and the image
(labels 0 or 1, one label per point, a box's corners in order, points inside the image, no more points than the
decoder's shape profile takes: :func:`~vitdeploy.runtime.apps.serving.service.parse_prompts`).
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from vitdeploy.runtime.apps.serving.service import MAX_CONCEPT_BOXES, MAX_PROMPTS


class Prompt(BaseModel):
    """One prompt in pixels of the original image: points (with labels) and/or a box."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"points": [[500, 375]], "labels": [1]}, {"box": [100, 80, 620, 400], "multimask_output": False}]})

    points: list[tuple[float, float]] | None = Field(None, description="[[x, y], ...] clicks")
    labels: list[int] | None = Field(None, description="1 (foreground) or 0 (background), one per point; "
                                                       "default: all 1")
    box: tuple[float, float, float, float] | None = Field(None, description="[x0, y0, x1, y1]")
    multimask_output: bool | None = Field(None, description="three candidate masks (default: true for one click "
                                                            "without a box)")


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

    def as_dicts(self) -> dict:
        """The request as plain JSON values (what the service parses), fields not sent left out."""
        return self.model_dump(exclude_unset=True)


class ConceptRequest(BaseModel):
    """The body of ``POST /v1/embeddings/{id}/concepts`` (SAM 3): a text and/or exemplar boxes, in pixels of the
    original image."""

    fields_hint: ClassVar[str] = "a concept prompt has text, boxes, negative_boxes, confidence_threshold"
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"text": "yellow school bus"}, {"text": "soda can", "boxes": [[40, 60, 90, 180]], "confidence_threshold": 0.4}]})

    text: str | None = Field(None, min_length=1, description="the concept, a noun phrase")
    boxes: list[tuple[float, float, float, float]] | None = Field(
        None, max_length=MAX_CONCEPT_BOXES, description="[[x0, y0, x1, y1], ...] positive exemplars")
    negative_boxes: list[tuple[float, float, float, float]] | None = Field(
        None, max_length=MAX_CONCEPT_BOXES, description="[[x0, y0, x1, y1], ...] negative exemplars")
    confidence_threshold: float = Field(0.5, ge=0, le=1, description="keep instances above this score "
                                                                     "(Sam3Processor's default)")

    def as_dicts(self) -> dict:
        """The request as plain JSON values (what the service parses), fields not sent left out but the threshold."""
        return {**self.model_dump(exclude_unset=True), "confidence_threshold": self.confidence_threshold}


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


__all__ = ["CocoRle", "ConceptAnswer", "ConceptInstance", "ConceptRequest", "EmbeddingCreated", "EmbeddingInfo",
           "ErrorBody", "Health", "ImageUpload", "MaskResult", "MasksAnswer", "MasksRequest", "Prompt"]
