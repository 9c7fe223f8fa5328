"""Every instance of a concept in images (the ``segment-concept`` verb's work): a text prompt and/or exemplar boxes
through :class:`~vitdeploy.runtime.apps.sam3.processor.Sam3Processor`, written as one JSON of instances (score, box,
COCO RLE), a label PNG (pixel value = instance number) and an overlay per image."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

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


@dataclass(frozen=True)
class ConceptJob:
    """One image and where its results go."""

    image: Path
    output: Path  # <stem>.json
    masks: Path = field(init=False)
    overlay: Path = field(init=False)

    def __post_init__(self) -> None:
        stem = self.output.with_suffix("")
        object.__setattr__(self, "masks", stem.with_name(stem.name + ".masks.png"))
        object.__setattr__(self, "overlay", stem.with_name(stem.name + ".overlay.png"))

    def outputs(self) -> list[Path]:
        return [self.output, self.masks, self.overlay]


def plan_concept_jobs(image: str | os.PathLike, output: str | os.PathLike) -> list[ConceptJob]:
    """``-i IMAGE -o OUT.json``, or ``-i FOLDER -o OUT_FOLDER`` (``<stem>.json`` and its PNGs per image)."""
    from vitdeploy.runtime.apps.verbs.predict_images import check_unique_stems
    from vitdeploy.runtime.processing.images import images_in_folder

    image, output = Path(image), Path(output)
    if image.is_dir():
        if output.suffix.lower() == ".json" or (output.exists() and not output.is_dir()):
            raise InputError(f"--output '{output}' is a file: with a folder of images, --output is a folder")
        images = images_in_folder(image, "point -i at a folder of photos")
        check_unique_stems(images, image, ".json")
        return [ConceptJob(path, output / f"{path.stem}.json") for path in images]
    if output.suffix.lower() != ".json":
        raise InputError(f"--output '{output}' must be a .json file (the instances) for one image")
    return [ConceptJob(image, output)]


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
    from vitdeploy.runtime.apps.sam.amg import area_from_rle, coco_encode_rle, mask_to_rle

    records = []
    for k in range(len(state["scores"])):
        rle = mask_to_rle(state["masks"][k, 0])
        x0, y0, x1, y1 = (float(v) for v in state["boxes"][k])
        records.append({"score": round(float(state["scores"][k]), 6), "bbox": [x0, y0, x1 - x0, y1 - y0],
                        "bbox_xyxy": [x0, y0, x1, y1], "area": int(area_from_rle(rle)),
                        "segmentation": coco_encode_rle(rle) if output_mode == "coco_rle" else rle})
    return records


def run_concept_job(processor, job: ConceptJob, prompt: ConceptPrompt, output_mode: str = "coco_rle") -> dict[str, Any]:
    """Find ``prompt``'s instances in ``job.image`` and write its three files (each atomically); returns the JSON."""
    from vitdeploy.fileio import atomic_write_bytes
    from vitdeploy.runtime.apps.verbs.overlay import overlay_masks, save_png
    from vitdeploy.runtime.processing.images import read_image_rgb

    picture = read_image_rgb(job.image)
    height, width = picture.shape[:2]
    boxes = prompt.normalized_boxes(height, width, f"'{job.image.name}'")
    state = processor.set_image(picture)
    if prompt.text is not None:
        state = processor.set_text_prompt(state=state, prompt=prompt.text)
    for box, label in zip(boxes, prompt.labels):
        state = processor.add_geometric_prompt(box, label, state)
    masks = state["masks"][:, 0]
    data = {"image": str(job.image), "size": [int(height), int(width)], "prompt": prompt.to_dict(),
            "confidence_threshold": processor.confidence_threshold, "instances": concept_records(state, output_mode)}
    atomic_write_bytes(job.output, json.dumps(data).encode())
    save_png(instances_label_image(masks, state["scores"]), job.masks)
    save_png(overlay_masks(picture, list(masks)), job.overlay)
    return data


def check_concept_jobs(jobs: Sequence[ConceptJob], prompt: ConceptPrompt) -> None:
    """Before any model runs: every image decodes and holds every box."""
    from vitdeploy.runtime.processing.images import read_image_rgb

    for job in jobs:
        picture = read_image_rgb(job.image)
        prompt.normalized_boxes(picture.shape[0], picture.shape[1], f"'{job.image.name}'")


__all__ = ["ConceptJob", "ConceptPrompt", "check_concept_jobs", "concept_records", "instances_label_image",
           "plan_concept_jobs", "run_concept_job"]
