"""``vitdeploy track``'s library: objects followed through a video from clicks, boxes or masks on chosen frames, and
what the verb writes (torch-free, on :class:`vitdeploy.runtime.apps.sam2.video_predictor.Sam2VideoPredictor` or
SAM 3's :class:`vitdeploy.runtime.apps.sam3.tracker_predictor.Sam3TrackerPredictor`, each called as its official
predictor is: pixels or fractions of the frame, masks or none, the scores read from the state or yielded).

* :func:`prompts_from_lists` groups the verb's ``--point``/``--box``/``--mask`` per (frame, object): one official call
  each (``add_new_points_or_box`` or ``add_new_mask``).
* :func:`track` applies them and propagates: ``forward`` from the first prompted frame (or ``start_frame``) to the end,
  ``reverse`` from it to frame 0, or ``both`` (forward, then reverse), each frame yielded once, within ``max_frames``
  per direction.
* :class:`TrackWriter` writes, into a staging folder renamed onto the output folder only when everything is written
  (an interrupted run leaves nothing under the final name): ``masks/NNNNN.png`` per frame (one palette PNG, pixel value
  = object id, 0 background; where objects overlap, the one with the higher logit), ``masks.json`` (COCO-style: one
  annotation per frame and object, compressed RLE, area, box, object score), and an overlay animation (GIF, or MP4 with
  OpenCV) of the masks over the frames.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vitdeploy.errors import InputError, MissingDependencyError
from vitdeploy.fileio import remove_stale_folders
from vitdeploy.runtime.apps.common.rle import coco_encode_rle, mask_to_box, mask_to_rle

DIRECTIONS = ("both", "forward", "reverse")
#: The overlay animation's longest side (pixels); frames are scaled down to it, never up.
OVERLAY_MAX_SIDE = 640
#: Object colors of the overlay and the palette PNGs, by object id (repeating after 10).
COLORS = ((30, 144, 255), (255, 99, 71), (50, 205, 50), (255, 215, 0), (186, 85, 211), (0, 206, 209),
          (255, 140, 0), (199, 21, 133), (154, 205, 50), (70, 130, 180))


@dataclass
class FramePrompt:
    """The prompts of one object on one frame: clicks (x, y, label) and/or a box, or a mask file."""

    frame: int
    obj_id: int
    points: list[tuple[float, float, int]] = field(default_factory=list)
    box: tuple[float, float, float, float] | None = None
    mask: str | None = None

    def describe(self) -> str:
        what = [f"{len(self.points)} click(s)"] if self.points else []
        what += ["a box"] if self.box else []
        what += [f"mask {Path(self.mask).name}"] if self.mask else []
        return f"object {self.obj_id} on frame {self.frame}: {' + '.join(what)}"


def prompts_from_lists(points: Sequence[tuple[int, int, float, float, int]] = (),
                       boxes: Sequence[tuple[int, int, tuple[float, float, float, float]]] = (),
                       masks: Sequence[tuple[int, int, str]] = ()) -> list[FramePrompt]:
    """(frame, obj, x, y, label) clicks, (frame, obj, box) boxes and (frame, obj, path) masks -> one prompt per
    (frame, object), in frame order; an object gets one box and no mask beside clicks or a box on a frame."""
    grouped: dict[tuple[int, int], FramePrompt] = {}

    def entry(frame: int, obj: int) -> FramePrompt:
        return grouped.setdefault((frame, obj), FramePrompt(frame, obj))

    for frame, obj, x, y, label in points:
        entry(frame, obj).points.append((x, y, label))
    for frame, obj, box in boxes:
        prompt = entry(frame, obj)
        if prompt.box is not None:
            raise InputError(f"two boxes for object {obj} on frame {frame}: SAM 2 takes one box per object and frame")
        prompt.box = tuple(box)
    for frame, obj, path in masks:
        prompt = entry(frame, obj)
        if prompt.points or prompt.box or prompt.mask:
            raise InputError(f"object {obj} on frame {frame} has a mask and other prompts: give a mask alone, or "
                             "clicks/a box")
        prompt.mask = path
    for prompt in grouped.values():
        if not 1 <= prompt.obj_id <= 255:
            raise InputError(f"object id {prompt.obj_id} is not in 1..255: the mask PNGs store object ids as pixel values")
    return [grouped[key] for key in sorted(grouped)]


def read_mask_file(path: str | os.PathLike, size: tuple[int, int]) -> np.ndarray:
    """A mask prompt from an image file: nonzero pixels are the object; it must be the video's size (H, W)."""
    from vitdeploy.runtime.processing.images import read_image_rgb

    mask = read_image_rgb(path).max(axis=2) > 0
    if mask.shape != tuple(size):
        raise InputError(f"mask '{path}' is {mask.shape[1]}x{mask.shape[0]}, the video {size[1]}x{size[0]}: give a "
                         "mask of the video's size")
    return mask


def check_prompts(prompts: Sequence[FramePrompt], num_frames: int, size: tuple[int, int]) -> list[np.ndarray | None]:
    """Refuse a prompt on a frame the video lacks or outside the frame, and read the mask files, before any tracking;
    returns each prompt's mask (None for clicks/box)."""
    from vitdeploy.runtime.apps.common.prompts import check_prompts_inside

    if not prompts:
        raise InputError("no prompt: give at least one --point FRAME:OBJ:X,Y, --box FRAME:OBJ:X0,Y0,X1,Y1 or "
                         "--mask FRAME:OBJ:FILE")
    masks = []
    for prompt in prompts:
        if not 0 <= prompt.frame < num_frames:
            raise InputError(f"{prompt.describe()}: the video has {num_frames} frames, 0 to {num_frames - 1}")
        coords = np.array([p[:2] for p in prompt.points], np.float64).reshape(-1, 2) if prompt.points else None
        try:
            check_prompts_inside(size, point_coords=coords, box=None if prompt.box is None else np.asarray(prompt.box))
        except InputError as exc:
            raise InputError(f"{prompt.describe()}: {exc}") from None
        masks.append(read_mask_file(prompt.mask, size) if prompt.mask else None)
    return masks


def track(predictor: Any, state: dict[str, Any], prompts: Sequence[FramePrompt], *, direction: str = "both",
          start_frame: int | None = None, max_frames: int | None = None,
          progress: Callable[[str, int, int], None] | None = None) -> Iterator[tuple[int, list, np.ndarray, list]]:
    """Apply the prompts, then yield (frame_idx, obj_ids, mask logits (N, 1, H, W), each object's score logit) for
    every frame tracked, each once (see the module docstring). ``progress(stage, done, total)`` is called per frame."""
    if direction not in DIRECTIONS:
        raise InputError(f"direction '{direction}' is not one of {', '.join(DIRECTIONS)}")
    size = (state["video_height"], state["video_width"])
    masks = check_prompts(prompts, state["num_frames"], size)
    batched = bool(getattr(predictor, "BATCHED", False))
    if batched and any(m is not None for m in masks):
        raise InputError("--mask prompts are for SAM 2 files: SAM 3's tracker takes clicks and boxes (--point, --box)")
    scale = np.array([size[1], size[0]], np.float32)  # SAM 3's tracker takes fractions of the frame
    for prompt, mask in zip(prompts, masks):
        if mask is not None:
            predictor.add_new_mask(state, prompt.frame, prompt.obj_id, mask)
            continue
        points = np.array([p[:2] for p in prompt.points], np.float32) if prompt.points else None
        labels = np.array([p[2] for p in prompt.points], np.int32) if prompt.points else None
        box = None if prompt.box is None else np.asarray(prompt.box, np.float32)
        if batched:
            points = None if points is None else points / scale
            box = None if box is None else (box.reshape(2, 2) / scale).reshape(4)
        predictor.add_new_points_or_box(state, prompt.frame, prompt.obj_id, points=points, labels=labels, box=box)
    count = state["num_frames"]
    start = min(p.frame for p in prompts) if start_frame is None else start_frame
    if not 0 <= start < count:
        raise InputError(f"--start-frame {start} is not a frame of this video: it has {count} frames, 0 to {count - 1}")
    budget = count if max_frames is None else max_frames
    passes = [("forward", False), ("reverse", True)] if direction == "both" else [(direction, direction == "reverse")]
    planned = sum(min(budget, count - start - 1) + 1 if not rev else min(budget, start) + 1 for _, rev in passes)
    planned -= 1 if direction == "both" else 0  # the start frame once
    done, seen = 0, set()
    for _, reverse in passes:
        for frame_idx, obj_ids, logits, scores in _propagate(predictor, state, start, budget, reverse, batched):
            if frame_idx in seen:
                continue
            seen.add(frame_idx)
            done += 1
            if progress is not None:
                progress("tracking", done, planned)
            yield frame_idx, list(obj_ids), np.asarray(logits), scores


def _propagate(predictor: Any, state: dict[str, Any], start: int, budget: int, reverse: bool,
               batched: bool) -> Iterator[tuple[int, list, Any, list]]:
    """Either predictor's ``propagate_in_video`` as its official one is called: (frame, ids, logits, scores)."""
    if batched:  # the official batched predictor: consolidate first, 5-tuples with the objects' scores
        for frame_idx, obj_ids, _, logits, scores in predictor.propagate_in_video(
                state, start_frame_idx=start, max_frame_num_to_track=budget, reverse=reverse, propagate_preflight=True):
            yield frame_idx, obj_ids, logits, [float(v) for v in np.asarray(scores).reshape(-1)]
        return
    for frame_idx, obj_ids, logits in predictor.propagate_in_video(state, start_frame_idx=start,
                                                                   max_frame_num_to_track=budget, reverse=reverse):
        yield frame_idx, obj_ids, logits, object_scores(state, frame_idx)


def check_out_dir(out_dir: str | os.PathLike, force: bool) -> Path:
    """The output folder, refused when it exists (unless ``force``), is a file, or its parent is missing."""
    path = Path(out_dir)
    if path.exists() and not path.is_dir():
        raise InputError(f"'{path}' is a file: --out-dir names a folder")
    if path.exists() and not force:
        raise InputError(f"'{path}' already exists: pass --force to replace it, or choose another --out-dir")
    if not path.parent.is_dir():
        raise InputError(f"the folder '{path.parent}' for --out-dir does not exist: create it or choose another --out-dir")
    return path


def object_scores(state: dict[str, Any], frame_idx: int) -> list[float]:
    """Each object's object-score logit on a tracked frame (> 0: the object is there), from the inference state."""
    scores = []
    for obj_idx in range(len(state["obj_ids"])):
        outputs = state["output_dict_per_obj"][obj_idx]
        out = outputs["cond_frame_outputs"].get(frame_idx)
        if out is None:
            out = outputs["non_cond_frame_outputs"].get(frame_idx)
        scores.append(float("nan") if out is None else float(np.asarray(out["object_score_logits"]).reshape(-1)[0]))
    return scores


#: The staging folders' prefix; the process id that made one follows (``.vitdeploy-track-4242-abc123``).
STAGING_PREFIX = ".vitdeploy-track-"


class TrackWriter:
    """Writes what ``track`` yields (see the module docstring) into a staging folder beside ``out_dir``; :meth:`commit`
    renames it onto ``out_dir`` (replacing an old one only with ``force``); leaving the ``with`` block without a commit
    removes it."""

    def __init__(self, out_dir: str | os.PathLike, frames: Any, *, overlay: str | os.PathLike | None = "overlay.gif",
                 fps: float = 10.0, force: bool = False, source: str = "", model: str = "") -> None:
        self.out_dir = check_out_dir(out_dir, force)
        parent = self.out_dir.parent
        self.frames = frames
        self.force = force
        self.fps = float(fps)
        self.source, self.model = source, model
        self.overlay = None if overlay is None else Path(overlay)
        if self.overlay is not None and self.overlay.suffix.lower() not in (".gif", ".mp4"):
            raise InputError(f"--overlay '{self.overlay}' must end in .gif or .mp4")
        if self.overlay is not None and self.overlay.suffix.lower() == ".mp4":
            _require_cv2("writing an MP4 overlay")
        remove_stale_folders(parent, STAGING_PREFIX)  # what a killed track left here
        self._staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-", dir=parent))
        (self._staging / "masks").mkdir()
        self._annotations: list[dict[str, Any]] = []
        #: Each overlay frame is written here as it comes (not kept in memory: a long video's would not fit) and the
        #: animation is assembled from them by :meth:`commit`.
        self._overlay_frames = self._staging / "overlay_frames"
        self._overlay_frames.mkdir()
        self._objects: list = []

    def __enter__(self) -> TrackWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        shutil.rmtree(self._staging, ignore_errors=True)

    def frame_name(self, frame_idx: int) -> str:
        files = getattr(self.frames, "files", None)
        return files[frame_idx].name if files else f"{frame_idx:05d}"

    def _number(self, frame_idx: int) -> int:
        """The frame's number as the user sees it (the number in its file name); its position where frames have none."""
        numbers = getattr(self.frames, "numbers", None)
        return int(numbers[frame_idx]) if numbers else int(frame_idx)

    def _stem(self, frame_idx: int) -> str:
        names = getattr(self.frames, "names", None)
        return str(names[frame_idx]) if names else f"{frame_idx:05d}"

    def add(self, frame_idx: int, obj_ids: Sequence[int], logits: np.ndarray, scores: Sequence[float]) -> None:
        """One frame's masks: its palette PNG now, its annotations and overlay frame kept for :meth:`commit`."""
        from PIL import Image

        self._objects = list(obj_ids)
        masks = logits[:, 0] > 0  # N, H, W
        winner = np.argmax(logits[:, 0], axis=0)  # its logit is > 0 wherever any object's is
        label = np.where(masks.any(axis=0), np.asarray(obj_ids, np.uint8)[winner], 0).astype(np.uint8)
        png = Image.fromarray(label, mode="P")
        png.putpalette(_palette())
        png.save(self._staging / "masks" / f"{self._stem(frame_idx)}.png")  # named after its frame, gaps and all
        for k, obj in enumerate(obj_ids):
            rle = mask_to_rle(masks[k])
            x0, y0, x1, y1 = (int(v) for v in mask_to_box(masks[k][None])[0]) if masks[k].any() else (0, 0, -1, -1)
            self._annotations.append({"frame": self._number(frame_idx), "file_name": self.frame_name(frame_idx),
                                      "object_id": int(obj),
                                      "segmentation": coco_encode_rle(rle), "area": int(masks[k].sum()),
                                      "bbox": [x0, y0, x1 - x0 + 1, y1 - y0 + 1], "object_score": float(scores[k])})
        if self.overlay is not None:
            number = self._number(frame_idx)
            picture = Image.fromarray(_overlay(self.frames.original(frame_idx), masks, obj_ids))
            picture.save(self._overlay_frames / f"{number}.png", compress_level=1)

    def commit(self) -> dict[str, Any]:
        """Write masks.json and the overlay, then rename the staging folder onto ``out_dir``; returns a summary."""
        annotations = sorted(self._annotations, key=lambda a: (a["frame"], a["object_id"]))
        frames = sorted({a["frame"] for a in annotations})
        summary = {"video": self.source, "model": self.model, "num_frames": len(self.frames), "frames_tracked": len(frames),
                   "height": int(self.frames.height), "width": int(self.frames.width), "object_ids": self._objects,
                   "annotations": annotations}
        (self._staging / "masks.json").write_text(json.dumps(summary))
        overlay_out = None
        if self.overlay is not None:
            inside = not self.overlay.is_absolute() and len(self.overlay.parts) == 1
            target = self._staging / self.overlay if inside else self.overlay
            _write_animation([self._overlay_frames / f"{f}.png" for f in frames], target, self.fps)
            overlay_out = self.out_dir / self.overlay if inside else self.overlay
        shutil.rmtree(self._overlay_frames)
        if self.out_dir.exists():
            shutil.rmtree(self.out_dir)
        os.replace(self._staging, self.out_dir)
        return {"out_dir": str(self.out_dir), "frames": len(frames), "objects": self._objects,
                "overlay": None if overlay_out is None else str(overlay_out)}


def _palette() -> list[int]:
    palette = [0, 0, 0]
    for i in range(1, 256):
        palette += list(COLORS[(i - 1) % len(COLORS)])
    return palette


def _overlay(image: np.ndarray, masks: np.ndarray, obj_ids: Sequence[int]) -> np.ndarray:
    """The frame with each object's mask blended in its color, scaled to at most OVERLAY_MAX_SIDE pixels."""
    from PIL import Image

    out = image.astype(np.float32)
    for mask, obj in zip(masks, obj_ids):
        out[mask] = 0.45 * out[mask] + 0.55 * np.asarray(COLORS[(int(obj) - 1) % len(COLORS)], np.float32)
    picture = Image.fromarray(np.clip(out + 0.5, 0, 255).astype(np.uint8))
    scale = OVERLAY_MAX_SIDE / max(picture.size)
    if scale < 1:
        picture = picture.resize((max(1, round(picture.width * scale)), max(1, round(picture.height * scale))))
    return np.asarray(picture)


def _write_animation(frames: list[Path], path: Path, fps: float) -> None:
    """The overlay frames (PNG files, in order) as one GIF or MP4 at ``path``, each frame read when it is written."""
    from PIL import Image

    from vitdeploy.fileio import atomic_output

    def picture(frame: Path) -> Image.Image:
        with Image.open(frame) as opened:
            return opened.convert("RGB")

    with atomic_output(path, suffix=path.suffix) as tmp:
        first = picture(frames[0])
        if path.suffix.lower() == ".gif":
            first.save(tmp, format="GIF", save_all=True, append_images=(picture(f) for f in frames[1:]),
                       duration=round(1000 / fps), loop=0)
        else:
            cv2 = _require_cv2("writing an MP4 overlay")
            writer = cv2.VideoWriter(str(tmp), cv2.VideoWriter_fourcc(*"mp4v"), fps, first.size)
            try:
                for rgb in (first, *(picture(f) for f in frames[1:])):
                    writer.write(np.ascontiguousarray(np.asarray(rgb)[:, :, ::-1]))
            finally:
                writer.release()


def _require_cv2(purpose: str):
    try:
        import cv2
    except ImportError as exc:
        raise MissingDependencyError("opencv-python-headless", purpose,
                                     "pip install opencv-python-headless, or write a GIF (--overlay overlay.gif)") from exc
    return cv2


__all__ = ["DIRECTIONS", "FramePrompt", "TrackWriter", "check_out_dir", "check_prompts", "object_scores",
           "prompts_from_lists", "read_mask_file", "track"]
