"""Every instance of a concept in an image: a prompt (a text and/or exemplar boxes, :class:`ConceptPrompt`) through
:class:`~vitdeploy.runtime.apps.sam3.processor.Sam3Processor`, and its instances as records (score, box, area, COCO
RLE) and as a label image. What every route that finds concepts shares: the verb
(:mod:`vitdeploy.runtime.apps.verbs.segment_concept`), the dataset job and the server."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vitdeploy.errors import InputError


@dataclass(frozen=True)
class ConceptPrompt:
    """A text and exemplar boxes in pixels (x0, y0, x1, y1), each positive or negative."""

    text: str | None = None
    boxes: tuple[tuple[float, float, float, float], ...] = ()
    labels: tuple[bool, ...] = ()

    def __post_init__(self) -> None:
        if self.text is None and not self.boxes:
            raise InputError("no prompt: give --text \"...\" and/or an exemplar --box X0,Y0,X1,Y1")

    def normalized_boxes(self, height: int, width: int, image: str = "the image") -> list[list[float]]:
        """The boxes as ``Sam3Processor.add_geometric_prompt`` takes them (cx, cy, w, h in [0, 1]); a box that is
        not inside ``height`` x ``width`` pixels, or has no area, is refused naming it."""
        out = []
        for x0, y0, x1, y1 in self.boxes:
            if not (0 <= x0 < x1 <= width and 0 <= y0 < y1 <= height):
                raise InputError(f"the box {x0:g},{y0:g},{x1:g},{y1:g} is not inside {image} ({width}x{height} pixels) "
                                 "with a positive width and height: give X0,Y0,X1,Y1 with X0 < X1 and Y0 < Y1")
            out.append([(x0 + x1) / 2 / width, (y0 + y1) / 2 / height, (x1 - x0) / width, (y1 - y0) / height])
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "boxes": [list(b) for b in self.boxes], "labels": list(self.labels)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConceptPrompt:
        """:meth:`to_dict`'s form back (what a dataset job's workers receive)."""
        return cls(data.get("text"), tuple(tuple(float(v) for v in b) for b in data.get("boxes", ())),
                   tuple(bool(v) for v in data.get("labels", ())))


def instances_label_image(masks: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """(N, H, W) bool masks and their scores -> an HxW label image: 0 background, k+1 where instance k is (the
    instance of the higher score wins a pixel two share); uint8 up to 255 instances, else uint16."""
    height, width = masks.shape[-2:]
    labels = np.zeros((height, width), np.uint8 if len(masks) < 256 else np.uint16)
    for k in np.argsort(scores, kind="stable"):  # lowest first: the highest score is painted last
        labels[masks[k]] = k + 1
    return labels


def concept_records(state: dict, output_mode: str = "coco_rle") -> list[dict[str, Any]]:
    """The instances of a ``Sam3Processor`` state as records: score, bbox (XYWH pixels, COCO's), bbox_xyxy, area and
    segmentation (COCO RLE: the compressed string, or ``uncompressed_rle``)."""
    from vitdeploy.runtime.apps.common.rle import area_from_rle, coco_encode_rle, mask_to_rle

    records = []
    for k in range(len(state["scores"])):
        rle = mask_to_rle(state["masks"][k, 0])
        x0, y0, x1, y1 = (float(v) for v in state["boxes"][k])
        records.append({"score": round(float(state["scores"][k]), 6), "bbox": [x0, y0, x1 - x0, y1 - y0],
                        "bbox_xyxy": [x0, y0, x1, y1], "area": int(area_from_rle(rle)),
                        "segmentation": coco_encode_rle(rle) if output_mode == "coco_rle" else rle})
    return records


def find_instances(processor, picture: np.ndarray, prompt: ConceptPrompt, image: str = "the image") -> dict:
    """``Sam3Processor``'s state after ``prompt`` on ``picture``: the text (if any) and every exemplar box, as
    ``set_text_prompt`` then ``add_geometric_prompt`` per box leave it (in one detector run)."""
    boxes = prompt.normalized_boxes(picture.shape[0], picture.shape[1], image)  # refused before the image is encoded
    return prompt_instances(processor, processor.set_image(picture), prompt, boxes)


def prompt_instances(processor, state: dict, prompt: ConceptPrompt, boxes: list[list[float]] | None = None) -> dict:
    """``prompt`` on an image ``state`` already holds (``Sam3Processor.set_image``'s, or a server's cached features);
    ``boxes``: the prompt's boxes already normalized (default: normalized here against the state's image)."""
    if boxes is None:
        boxes = prompt.normalized_boxes(state["original_height"], state["original_width"])
    return processor.set_concept_prompt(state, prompt.text, boxes, prompt.labels)


__all__ = ["ConceptPrompt", "concept_records", "find_instances", "instances_label_image", "prompt_instances"]
