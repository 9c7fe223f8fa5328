"""Prompted masks for one image or a folder of images: the library call behind ``vitdeploy predict``.

A run is a list of :class:`ImageJob` (an image, its prompt, where its mask, overlay and embedding go),
planned and checked before anything is encoded (:func:`plan_single`, :func:`plan_folder`,
:func:`check_jobs`: every image decodes, every prompt lies inside its image, every saved embedding
exists, no two outputs collide), then run with one :class:`SamPredictor`, so the sessions are
created once for the whole folder (:func:`predict_images`). A job without a prompt only encodes the
image (to save its embedding). Torch-free.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vitdeploy.errors import InputError
from vitdeploy.runtime.processing.images import images_in_folder, read_image_rgb


@dataclass(frozen=True)
class Prompt:
    """Clicks ``(x, y, label)`` in pixels of the original image (label 1 foreground, 0 background) and one box."""

    points: tuple[tuple[float, float, int], ...] = ()
    box: tuple[float, float, float, float] | None = None

    def __bool__(self) -> bool:
        return bool(self.points) or self.box is not None

    def coords(self) -> np.ndarray | None:
        return np.array([[x, y] for x, y, _ in self.points], dtype=np.float64) if self.points else None

    def labels(self) -> np.ndarray | None:
        return np.array([label for _, _, label in self.points], dtype=np.int64) if self.points else None

    def box_array(self) -> np.ndarray | None:
        return np.array(self.box, dtype=np.float64) if self.box is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {"points": [list(p) for p in self.points], "box": list(self.box) if self.box is not None else None}


@dataclass(frozen=True)
class ImageJob:
    image: Path
    prompt: Prompt
    mask: Path | None = None  # None: encode only
    overlay: Path | None = None
    save_embedding: Path | None = None
    embedding: Path | None = None  # reuse this saved embedding instead of running the encoder

    def outputs(self) -> list[Path]:
        return [p for p in (self.mask, self.overlay, self.save_embedding) if p is not None]


@dataclass
class ImageResult:
    image: str
    encoded: bool  # False: a saved embedding was used
    scores: list[float] = field(default_factory=list)
    chosen: int | None = None
    mask_area_fraction: float | None = None
    mask: str | None = None
    overlay: str | None = None
    embedding: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def read_prompts_json(path: str | os.PathLike, example: str) -> dict[str, Any]:
    """A prompts file's JSON object (image name -> entry), or an InputError showing ``example``."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"prompts file '{path}' not found: check the path")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"prompts file '{path}' is not JSON ({type(exc).__name__}): write {example}") from exc
    if not isinstance(data, dict) or not data:
        raise InputError(f"prompts file '{path}' must be a non-empty JSON object mapping image names to prompts, e.g. "
                         f"{example}")
    return data


def read_prompts_file(path: str | os.PathLike) -> dict[str, Prompt]:
    """``{"photo.jpg": {"points": [[x, y], [x, y, 0]], "box": [x0, y0, x1, y1]}, ...}`` (names relative to the folder)."""
    data = read_prompts_json(path, '{"photo.jpg": {"points": [[x, y]], "box": [x0, y0, x1, y1]}}')
    return {str(name): _prompt_from_json(entry, f"'{Path(path).name}' entry '{name}'") for name, entry in data.items()}


def _prompt_from_json(entry: Any, where: str) -> Prompt:
    if not isinstance(entry, dict) or not set(entry) <= {"points", "box"}:
        raise InputError(f"{where} must be an object with 'points' and/or 'box'")
    points = []
    for raw in entry.get("points") or []:
        if not (isinstance(raw, list) and len(raw) in (2, 3) and all(isinstance(v, (int, float)) for v in raw)):
            raise InputError(f"{where}: point {raw!r} is not [x, y] or [x, y, label]")
        label = int(raw[2]) if len(raw) == 3 else 1
        if label not in (0, 1):
            raise InputError(f"{where}: point {raw!r} has label {label}; labels are 1 (foreground) or 0 (background)")
        points.append((float(raw[0]), float(raw[1]), label))
    box = entry.get("box")
    if box is not None and not (isinstance(box, list) and len(box) == 4 and all(isinstance(v, (int, float)) for v in box)):
        raise InputError(f"{where}: box {box!r} is not [x0, y0, x1, y1]")
    prompt = Prompt(tuple(points), tuple(float(v) for v in box) if box is not None else None)
    if not prompt:
        raise InputError(f"{where} has no point and no box")
    return prompt


def plan_single(image: str | os.PathLike, prompt: Prompt, mask: str | os.PathLike | None,
                overlay: str | os.PathLike | None = None, save_embedding: str | os.PathLike | None = None,
                embedding: str | os.PathLike | None = None) -> ImageJob:
    """One image; the overlay defaults to ``<mask stem>.overlay.png`` beside the mask."""
    mask_path = Path(mask) if mask is not None else None
    if mask_path is not None and mask_path.suffix.lower() != ".png":
        raise InputError(f"--output '{mask}' must be a .png file (the mask is written as PNG)")
    overlay_path = Path(overlay) if overlay else (mask_path.with_name(mask_path.stem + ".overlay.png") if mask_path else None)
    if mask_path is not None and overlay_path is not None and overlay_path.resolve() == mask_path.resolve():
        raise InputError("--overlay and --output are the same file: give two different paths")
    if save_embedding and Path(save_embedding).suffix.lower() != ".npz":
        raise InputError(f"--save-embedding '{save_embedding}' must be a .npz file")
    return ImageJob(Path(image), prompt, mask_path, overlay_path if mask_path else None,
                    Path(save_embedding) if save_embedding else None, Path(embedding) if embedding else None)


def check_unique_stems(images: Sequence[Path], folder: str | os.PathLike, suffix: str) -> None:
    """Refuse two images of ``folder`` whose outputs ``<stem><suffix>`` would be one file (``a.jpg`` and ``a.png``)."""
    stems: dict[str, str] = {}
    for path in images:
        if path.stem in stems:
            raise InputError(f"'{stems[path.stem]}' and '{path.name}' in '{folder}' would write the same outputs "
                             f"('{path.stem}{suffix}'): rename one of them")
        stems[path.stem] = path.name


def plan_folder(folder: str | os.PathLike, prompt: Prompt, out_dir: str | os.PathLike | None, *,
                prompts: dict[str, Prompt] | None = None, save_embedding_dir: str | os.PathLike | None = None,
                embedding_dir: str | os.PathLike | None = None) -> tuple[list[ImageJob], list[str]]:
    """One job per image of ``folder`` (not recursive; sorted by name) and the names left out.

    Every image gets ``prompt``, or its entry in ``prompts`` (images without one are left out). Masks
    go to ``out_dir/<stem>.png`` with overlays ``<stem>.overlay.png``; embeddings are
    ``<stem>.npz`` in ``save_embedding_dir`` (written) or ``embedding_dir`` (read).
    """
    folder = Path(folder)
    images = images_in_folder(folder, "point -i at a folder of photos")
    skipped: list[str] = []
    if prompts is not None:
        unknown = sorted(set(prompts) - {p.name for p in images})
        if unknown:
            raise InputError(f"the prompts file names {len(unknown)} image(s) not in '{folder}' "
                             f"(e.g. '{unknown[0]}'): names are file names inside that folder")
        skipped = [p.name for p in images if p.name not in prompts]
        images = [p for p in images if p.name in prompts]
    check_unique_stems(images, folder, ".png")
    for name, value in (("--output", out_dir), ("--save-embedding", save_embedding_dir), ("--embedding", embedding_dir)):
        if value is not None and Path(value).exists() and not Path(value).is_dir():
            raise InputError(f"{name} '{value}' is a file: with a folder of images, {name} is a folder")

    def beside(directory: str | os.PathLike | None, name: str) -> Path | None:
        return Path(directory) / name if directory is not None else None

    jobs = [ImageJob(path, prompts[path.name] if prompts is not None else prompt,
                     beside(out_dir, f"{path.stem}.png"), beside(out_dir, f"{path.stem}.overlay.png"),
                     beside(save_embedding_dir, f"{path.stem}.npz"), beside(embedding_dir, f"{path.stem}.npz"))
            for path in images]
    return jobs, skipped


def claim_job_outputs(jobs: Sequence[ImageJob], force: bool, extra: Sequence[str | os.PathLike | None] = (),
                      new_folders: bool = False) -> list[Path]:
    """:func:`~vitdeploy.fileio.claim_outputs` for every job's files and ``extra``. With ``new_folders``
    (a folder of images: -o names a folder) output folders that do not exist yet are checked (their
    parent takes new entries) and returned, to create once everything is checked."""
    from vitdeploy.fileio import check_output_path, claim_outputs

    new_dirs = sorted({p.parent for job in jobs for p in job.outputs() if not p.parent.exists()}) if new_folders else []
    for directory in new_dirs:
        check_output_path(directory)
    claim_outputs([p for job in jobs for p in job.outputs() if p.parent not in new_dirs] + list(extra), force)
    return new_dirs


def check_jobs(jobs: Sequence[ImageJob], notes: list[str] | None = None) -> None:
    """Before any encoding: each image decodes, its prompt lies inside it, its saved embedding exists.

    ``notes`` gets the conversions a user should know of, each with its image's name (bit depth).
    """
    from vitdeploy.runtime.apps.common.prompts import check_prompts_inside

    for job in jobs:
        if job.mask is not None and not job.prompt:
            raise InputError(f"no prompt for '{job.image.name}': give --point X,Y[,LABEL] or --box X0,Y0,X1,Y1")
        if job.embedding is not None and not job.embedding.is_file():
            raise InputError(f"embedding '{job.embedding}' for '{job.image.name}' not found: "
                             "write it with --save-embedding, or leave out --embedding to encode the image")
        image_notes: list[str] = []
        picture = read_image_rgb(job.image, image_notes)
        if notes is not None:
            notes += [f"{job.image.name}: {n}" if len(jobs) > 1 else n for n in image_notes]
        if job.prompt:
            box = job.prompt.box_array()
            try:
                check_prompts_inside(picture.shape[:2], job.prompt.coords(), box)
            except InputError as exc:
                raise InputError(f"{job.image.name}: {exc}" if len(jobs) > 1 else str(exc)) from None


def run_job(predictor, job: ImageJob, multimask: str = "auto",
            on_encode: Callable[[ImageJob, tuple[int, int]], None] | None = None) -> ImageResult:
    """Encode (or load the embedding of) ``job.image``, decode its prompt, write its files.

    ``multimask``: "on" (three candidates, the best-scoring one written), "off", or "auto" (three for
    a single click without a box, as SAM advises for ambiguous clicks).
    """
    from vitdeploy.runtime.apps.sam.embeddings import load_embedding, save_embedding
    from vitdeploy.runtime.apps.verbs.overlay import overlay_mask, save_png

    # Decoded a second time (check_jobs decoded it to prove it readable): holding a folder's pixels between the
    # check and the run would cost gigabytes; a second decode costs a fraction of the encoder's seconds.
    picture = read_image_rgb(job.image)
    result = ImageResult(str(job.image), encoded=job.embedding is None)
    if (job.embedding is not None or job.save_embedding is not None) and not hasattr(predictor, "set_image_embedding"):
        raise InputError("--save-embedding/--embedding hold SAM 1 embeddings; this predictor (SAM 2) has none to save: "
                         "leave them out (or keep embeddings with 'vitdeploy embed' on SAM 1 files)")
    if job.embedding is not None:
        features, size = load_embedding(job.embedding, image_path=job.image, encoder_metadata=predictor.encoder.metadata)
        predictor.set_image_embedding(features, size)
    else:
        if on_encode is not None:
            on_encode(job, (picture.shape[1], picture.shape[0]))
        predictor.set_image(picture)
    if job.save_embedding is not None:
        save_embedding(job.save_embedding, predictor.get_image_embedding(), predictor.original_size,
                       image_path=job.image, encoder_metadata=predictor.encoder.metadata,
                       encoder_path=getattr(predictor.encoder, "path", None))
        result.embedding = str(job.save_embedding)
    if job.mask is None:
        return result
    prompt = job.prompt
    use_multi = {"on": True, "off": False, "auto": len(prompt.points) == 1 and prompt.box is None}[multimask]
    masks, scores, _ = predictor.predict(prompt.coords(), prompt.labels(), prompt.box_array(), multimask_output=use_multi)
    best = int(np.argmax(scores))
    mask = np.asarray(masks[best]) > 0.5  # SamPredictor's masks are bool, Sam2ImagePredictor's float 0/1 (as officially)
    save_png(mask, job.mask)
    if job.overlay is not None:
        save_png(overlay_mask(picture, mask, points=prompt.coords(), labels=prompt.labels(), box=prompt.box_array()),
                 job.overlay)
    result.scores, result.chosen = [float(s) for s in scores], best
    result.mask_area_fraction = float(mask.mean())
    result.mask, result.overlay = str(job.mask), str(job.overlay) if job.overlay else None
    return result


def predict_images(predictor, jobs: Sequence[ImageJob], multimask: str = "auto",
                   progress: Callable[[str, int, int], None] | None = None,
                   on_encode: Callable[[ImageJob, tuple[int, int]], None] | None = None,
                   on_result: Callable[[ImageResult], None] | None = None) -> list[ImageResult]:
    """Run :func:`run_job` for every job with one predictor; ``progress(stage, done, total)`` per image,
    ``on_encode(job, (width, height))`` before an image is encoded, ``on_result`` after each."""
    results = []
    for done, job in enumerate(jobs):
        if progress is not None:
            progress("images", done, len(jobs))
        results.append(run_job(predictor, job, multimask, on_encode))
        if on_result is not None:
            on_result(results[-1])
    if progress is not None:
        progress("images", len(jobs), len(jobs))
    return results


__all__ = ["ImageJob", "ImageResult", "Prompt", "check_jobs", "claim_job_outputs", "plan_folder", "plan_single", "predict_images",
           "read_prompts_file", "read_prompts_json", "run_job"]
