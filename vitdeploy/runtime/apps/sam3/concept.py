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

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConceptPrompt:
        """:meth:`to_dict`'s form back (what a dataset job's workers receive)."""
        return cls(data.get("text"), tuple(tuple(float(v) for v in b) for b in data.get("boxes", ())),
                   tuple(bool(v) for v in data.get("labels", ())))


PROMPTS_EXAMPLE = '{"shelf.jpg": {"text": "soda can", "boxes": [[x0, y0, x1, y1]], "negative_boxes": [[x0, y0, x1, y1]]}}'


def read_concept_prompts(path: str | os.PathLike, default_text: str | None) -> dict[str, ConceptPrompt]:
    """A JSON object of prompts per image: ``{"name": {"text": ..., "boxes": [[x0, y0, x1, y1], ...],
    "negative_boxes": [...]}}``, boxes in pixels of that image; an entry without ``text`` takes ``default_text``
    (``--text``). Keys name images as :func:`prompts_per_image` matches them."""
    from vitdeploy.runtime.apps.verbs.predict_images import read_prompts_json

    path = Path(path)
    data = read_prompts_json(path, PROMPTS_EXAMPLE)
    prompts = {}
    for name, entry in data.items():
        where = f"'{path.name}' entry '{name}'"
        if not isinstance(entry, dict) or not entry or not set(entry) <= {"text", "boxes", "negative_boxes"}:
            raise InputError(f"{where} must be an object with 'text', 'boxes' and/or 'negative_boxes', e.g. "
                             f"{PROMPTS_EXAMPLE}")
        text = entry.get("text", default_text)
        if text is not None and not isinstance(text, str):
            raise InputError(f"{where}: text {text!r} is not a string")
        boxes: dict[str, list] = {}
        for key in ("boxes", "negative_boxes"):
            raw = entry.get(key) or []
            if not isinstance(raw, list) or not all(isinstance(b, list) and len(b) == 4 and all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) for v in b) for b in raw):
                raise InputError(f"{where}: '{key}' must be a list of [x0, y0, x1, y1] in pixels")
            boxes[key] = [tuple(float(v) for v in b) for b in raw]
        try:
            prompts[str(name)] = ConceptPrompt(text, tuple(boxes["boxes"] + boxes["negative_boxes"]),
                                               (True,) * len(boxes["boxes"]) + (False,) * len(boxes["negative_boxes"]))
        except InputError:  # ConceptPrompt's own refusal names the command line's flags
            raise InputError(f"{where} has no text and no box (and there is no --text for it)") from None
    return prompts


def prompts_per_image(images: Sequence[str | os.PathLike], root: str | os.PathLike | None,
                      prompts: dict[str, ConceptPrompt]) -> tuple[dict[str, ConceptPrompt], list[str]]:
    """Each image's prompt (keyed by the image as listed) and the images without one (left out). An entry names an
    image by its path relative to ``root`` (a folder of images) or by its file name where that is unique; an entry
    that names no image, or a name two images share, is refused in one line."""
    images = [str(i) for i in images]
    by_key: dict[str, list[str]] = {}
    for image in images:
        keys = {Path(image).name}
        if root is not None:
            try:
                keys.add(Path(image).relative_to(root).as_posix())
            except ValueError:
                pass
        keys.add(Path(image).as_posix())
        for key in keys:
            by_key.setdefault(key, []).append(image)
    chosen: dict[str, ConceptPrompt] = {}
    for key, prompt in prompts.items():
        matches = by_key.get(Path(key).as_posix(), [])
        if not matches:
            raise InputError(f"the prompts file names '{key}', which is not one of the images: name each image by its "
                             "file name, or by its path inside the folder")
        if len(matches) > 1:
            raise InputError(f"the prompts file names '{key}', the name of {len(matches)} images ({matches[0]}, "
                             f"{matches[1]}): name it by its path inside the folder")
        chosen[matches[0]] = prompt
    return chosen, [image for image in images if image not in chosen]


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
    from vitdeploy.runtime.apps.common.rle import area_from_rle, coco_encode_rle, mask_to_rle

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
    state = find_instances(processor, picture, prompt, f"'{job.image.name}'")
    masks = state["masks"][:, 0]
    data = {"image": str(job.image), "size": [int(height), int(width)], "prompt": prompt.to_dict(),
            "confidence_threshold": processor.confidence_threshold, "instances": concept_records(state, output_mode)}
    atomic_write_bytes(job.output, json.dumps(data).encode())
    save_png(instances_label_image(masks, state["scores"]), job.masks)
    save_png(overlay_masks(picture, list(masks)), job.overlay)
    return data


def check_concept_jobs(jobs: Sequence[ConceptJob], prompts: Sequence[ConceptPrompt]) -> None:
    """Before any model runs: every image decodes and holds every box of its prompt."""
    from vitdeploy.runtime.processing.images import read_image_rgb

    for job, prompt in zip(jobs, prompts, strict=True):
        picture = read_image_rgb(job.image)
        prompt.normalized_boxes(picture.shape[0], picture.shape[1], f"'{job.image.name}'")


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


__all__ = ["ConceptJob", "ConceptPrompt", "check_concept_jobs", "concept_records", "find_instances",
           "instances_label_image", "plan_concept_jobs", "prompt_instances", "prompts_per_image", "read_concept_prompts",
           "run_concept_job"]
