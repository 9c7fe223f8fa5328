"""``vitdeploy segment-concept``'s work: every instance of a concept in an image or a folder of them, written as one
JSON of instances (score, box, COCO RLE), a label PNG (pixel value = instance number) and an overlay per image; the
prompts per image of a ``--prompts`` file; the text prompts checked against the model's files before any runs."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vitdeploy.errors import InputError
from vitdeploy.runtime.apps.sam3.concept import ConceptPrompt, concept_records, find_instances, instances_label_image


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


def check_text_prompts(detector: str | os.PathLike, texts: Sequence[str | None]) -> None:
    """Empty or over-long text prompts refused before any model runs (not once per image in a job's workers), by the
    context the detector file reads (its ``context_length``), as :meth:`Sam3ImageModel.check_prompt` refuses them."""
    from vitdeploy.metadata import read_onnx_metadata
    from vitdeploy.runtime.apps.sam3.processor import check_text_prompt
    from vitdeploy.runtime.processing.clip_tokenizer import ClipTokenizer

    length = int(read_onnx_metadata(detector)["context_length"])
    tokenizer = ClipTokenizer(context_length=length)
    for text in sorted({t for t in texts if t is not None}):
        check_text_prompt(text, tokenizer, length)


__all__ = ["PROMPTS_EXAMPLE", "ConceptJob", "check_concept_jobs", "check_text_prompts", "plan_concept_jobs",
           "prompts_per_image", "read_concept_prompts", "run_concept_job"]
