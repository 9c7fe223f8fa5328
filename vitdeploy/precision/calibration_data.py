"""Calibration data: a folder of images -> model inputs, through exactly the model's own preprocessing.

The preprocessing is read from the ONNX file's vitdeploy metadata (for SAM: resize the longest side
to the input size, normalize with the pixel mean/std, pad bottom/right), so calibration sees what the
deployed model sees. Unreadable images and images with the wrong channel count are reported and
skipped; a set with too few usable images is refused. Decoded, resized images are cached (keyed by
file names, sizes, modification times and the preprocessing), so a second run does not decode again.
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
from vitdeploy.runtime.processing.images import expand_image_paths

Feeds = dict[str, np.ndarray]
ImageProgress = Callable[[int, int, str], None]

#: Bump when the cached content changes meaning.
CACHE_VERSION = 1
DEFAULT_MIN_IMAGES = 8

BUNDLED_WARNING = (
    "WARNING: no --images given: calibrating on vitdeploy's bundled procedural image set ({path}). "
    "It is fine for demos and tests; a real deployment should calibrate on its own images."
)


def bundled_calibration_dir() -> Path:
    """The bundled image set: ``$VITDEPLOY_CALIBRATION_DIR``, else ``calibration/images`` of the source tree,
    installed as the data package ``vitdeploy._calibration_images`` (setup.py; a wheel carries it)."""
    from importlib import resources

    env = os.environ.get("VITDEPLOY_CALIBRATION_DIR")
    path = Path(env) if env else Path(str(resources.files("vitdeploy._calibration_images")))
    if not path.is_dir():
        raise InputError(
            f"the bundled calibration set '{path}' is missing (vitdeploy installed without its source tree): "
            "pass --images DIR or set VITDEPLOY_CALIBRATION_DIR"
        )
    return path


def default_cache_dir() -> Path:
    """``$VITDEPLOY_CACHE_DIR``, else ``$XDG_CACHE_HOME/vitdeploy``, else ``~/.cache/vitdeploy``."""
    if os.environ.get("VITDEPLOY_CACHE_DIR"):
        return Path(os.environ["VITDEPLOY_CACHE_DIR"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "vitdeploy"


@dataclass(frozen=True)
class SkippedImage:
    path: str
    reason: str


@dataclass
class CalibrationSet:
    """Preprocessed calibration inputs for one model input (N, C, H, W float32), with provenance."""

    input_name: str
    names: list[str]
    inputs: np.ndarray
    source: str
    skipped: list[SkippedImage] = field(default_factory=list)
    bundled: bool = False
    cache_hit: bool = False

    def __len__(self) -> int:
        return len(self.names)

    def feeds(self) -> list[Feeds]:
        """One feed dict per image (batch 1)."""
        return [{self.input_name: self.inputs[i : i + 1]} for i in range(len(self))]

    def batches(self, batch_size: int) -> list[Feeds]:
        """Feed dicts of ``batch_size`` images each; a final partial batch is dropped (static batch axes)."""
        if batch_size < 1:
            raise InputError(f"batch size must be >= 1, got {batch_size}")
        full = len(self) // batch_size * batch_size
        return [{self.input_name: self.inputs[i : i + batch_size]} for i in range(0, full, batch_size)]

    def split(self, holdout: int) -> tuple[CalibrationSet, CalibrationSet]:
        """(calibration, held-out): ``holdout`` evenly spaced images are held out for evaluation."""
        if holdout <= 0:
            return self, self._subset([])
        if holdout >= len(self):
            raise InputError(f"cannot hold out {holdout} of {len(self)} images: use a smaller --holdout or more images")
        held = sorted({int(round(i)) for i in np.linspace(len(self) - 1, 0, holdout)})
        rest = [i for i in range(len(self)) if i not in held]
        return self._subset(rest), self._subset(held)

    def _subset(self, idx: Sequence[int]) -> CalibrationSet:
        shape = (0, *self.inputs.shape[1:])
        inputs = self.inputs[list(idx)] if idx else np.zeros(shape, np.float32)
        return CalibrationSet(self.input_name, [self.names[i] for i in idx], inputs, self.source, [], self.bundled, self.cache_hit)

    def describe(self) -> dict[str, Any]:
        return {
            "source": self.source, "bundled": self.bundled, "count": len(self), "images": list(self.names),
            "skipped": [s.__dict__ for s in self.skipped], "cache_hit": self.cache_hit,
        }


@dataclass
class RecordedInputSet:
    """A graph's input sets recorded in a real run (:mod:`vitdeploy.runtime.processing.recorded_inputs`): the
    calibration data of a graph that takes other graphs' outputs, not images. The interface of
    :class:`CalibrationSet` that calibrate uses."""

    names: list[str]
    samples: list[Feeds]
    source: str
    skipped: list[SkippedImage] = field(default_factory=list)
    cache_hit: bool = False

    def __len__(self) -> int:
        return len(self.names)

    def feeds(self) -> list[Feeds]:
        return list(self.samples)

    def split(self, holdout: int) -> tuple[RecordedInputSet, RecordedInputSet]:
        """(calibration, held-out): ``holdout`` evenly spaced input sets are held out for evaluation."""
        if holdout <= 0:
            return self, RecordedInputSet([], [], self.source)
        if holdout >= len(self):
            raise InputError(f"cannot hold out {holdout} of {len(self)} recorded input sets: use a smaller --holdout or "
                             "record more (--record-inputs keeps 16 by default)")
        held = sorted({int(round(i)) for i in np.linspace(len(self) - 1, 0, holdout)})
        rest = [i for i in range(len(self)) if i not in held]
        pick = lambda idx: RecordedInputSet([self.names[i] for i in idx], [self.samples[i] for i in idx], self.source)  # noqa: E731
        return pick(rest), pick(held)

    def describe(self) -> dict[str, Any]:
        return {"source": self.source, "bundled": False, "count": len(self), "images": list(self.names),
                "skipped": [s.__dict__ for s in self.skipped], "cache_hit": self.cache_hit, "kind": "recorded inputs"}


def load_recorded_input_set(path: str | Path, model) -> RecordedInputSet:
    """The input sets of ``path`` for ``model`` (an onnx.ModelProto): every sample must give exactly the model's inputs,
    each with the model's element type (cast) and rank."""
    from onnx.helper import tensor_dtype_to_np_dtype

    from vitdeploy.runtime.processing.recorded_inputs import load_recorded_inputs

    samples, meta = load_recorded_inputs(path)
    inits = {t.name for t in model.graph.initializer}
    wanted = {v.name: v.type.tensor_type for v in model.graph.input if v.name not in inits}
    for k, sample in enumerate(samples):
        if set(sample) != set(wanted):
            raise InputError(f"'{path}' was recorded for inputs {sorted(sample)}, but the model takes {sorted(wanted)}: "
                             f"record the inputs of this graph ({meta.get('graph', 'another graph')} was recorded)")
        for name, tensor in wanted.items():
            if sample[name].ndim != len(tensor.shape.dim):
                raise InputError(f"recorded input '{name}' of sample {k} has shape {list(sample[name].shape)}, the "
                                 f"model's has {len(tensor.shape.dim)} axes: record the inputs of this graph")
            sample[name] = sample[name].astype(tensor_dtype_to_np_dtype(tensor.elem_type), copy=False)
    graph = meta.get("graph", "a graph")
    return RecordedInputSet([f"recorded:{k}" for k in range(len(samples))], samples,
                            f"{path} ({graph}'s inputs recorded over {meta.get('calls_seen', '?')} call(s))")


def preprocessor_for(metadata: dict[str, Any]):
    """The model's own preprocessing, from its vitdeploy metadata (an object with ``resize`` and ``normalize_and_pad``)."""
    from vitdeploy.families import family_of

    return family_of(metadata, "the model").calibration_preprocessor(metadata)


def read_calibration_image(path: Path, channels: int) -> np.ndarray | str:
    """HxWx3 uint8 RGB, or the reason this file cannot be used (undecodable, wrong channel count)."""
    from PIL import Image, UnidentifiedImageError

    try:
        from vitdeploy.runtime.processing.images import upright

        with Image.open(path) as img:
            img.load()
            img = upright(img)
            if img.mode == "P":
                img = img.convert("RGBA" if "transparency" in img.info else "RGB")
            bands = len(img.getbands())
            if bands != channels:
                return f"has {bands} channel(s) ({img.mode}), the model takes {channels}: convert it to RGB"
            return np.asarray(img.convert("RGB"), dtype=np.uint8).copy()
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        return f"cannot be decoded ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'no detail'})"


def _cache_key(files: Sequence[Path], prep: Any) -> str:
    import hashlib

    stamp = [[str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns] for f in files]
    blob = json.dumps({"v": CACHE_VERSION, "prep": repr(prep), "files": stamp}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def _load_cache(path: Path) -> tuple[list[str], list[np.ndarray], list[SkippedImage]] | None:
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            images = [data[f"img_{i}"] for i in range(len(meta["names"]))]
    except (OSError, ValueError, KeyError):
        return None  # a damaged cache is rebuilt, never trusted
    return meta["names"], images, [SkippedImage(**s) for s in meta["skipped"]]


def _save_cache(path: Path, names: list[str], images: list[np.ndarray], skipped: list[SkippedImage]) -> None:
    from vitdeploy.fileio import atomic_output

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = json.dumps({"names": names, "skipped": [s.__dict__ for s in skipped]})
        with atomic_output(path, suffix=".npz") as tmp:
            with open(tmp, "wb") as handle:
                np.savez(handle, meta=np.asarray(meta), **{f"img_{i}": a for i, a in enumerate(images)})
    except (OSError, InputError):
        pass  # the cache is an optimisation: an unwritable cache directory must not fail calibration


def load_calibration_set(
    images: Sequence[str | Path] | None,
    metadata: dict[str, Any],
    input_name: str,
    input_shape: Sequence[int | str | None],
    *,
    min_images: int = DEFAULT_MIN_IMAGES,
    max_images: int | None = None,
    cache_dir: str | Path | None = None,
    use_cache: bool = True,
    progress: ImageProgress | None = None,
    warn: Callable[[str], None] | None = None,
) -> CalibrationSet:
    """Read, check and preprocess calibration images for one image input of a model.

    Args:
        images: files and/or folders; None or empty uses the bundled set (``warn`` is told so).
        metadata: the model's vitdeploy metadata (preprocessing constants, input size).
        input_shape: the ONNX input's shape (N, C, H, W); C and H, W are checked against the images
            and the preprocessing.
        min_images: fewer usable images than this is refused.
        max_images: use at most this many (the first ones, sorted by name).
        cache_dir: where decoded, resized images are cached (default :func:`default_cache_dir`).
        progress: called as ``progress(done, total, file name)`` while decoding.
    """
    if len(input_shape) != 4:
        raise InputError(f"model input '{input_name}' has shape {list(input_shape)}: calibration images need an NCHW image input")
    channels = input_shape[1]
    if channels != 3:
        raise InputError(f"model input '{input_name}' takes {channels} channel(s) but images are preprocessed to 3 (RGB): "
                         "this model cannot be calibrated on RGB images")
    prep = preprocessor_for(metadata)
    if any(isinstance(d, int) and d != prep.input_size for d in input_shape[2:]):
        raise InputError(f"model input '{input_name}' is {list(input_shape[2:])} but its metadata says input size "
                         f"{prep.input_size}: the file's metadata does not match its graph")
    bundled = not images
    if bundled:
        folder = bundled_calibration_dir()
        if warn:
            warn(BUNDLED_WARNING.format(path=folder))
        images = [folder]
    files = expand_image_paths(images, what="calibration image path")
    if max_images is not None:
        files = files[:max_images]
    source = ", ".join(str(p) for p in images)

    cache_path = Path(cache_dir or default_cache_dir()) / "calibration" / f"{_cache_key(files, prep)}.npz"
    cached = _load_cache(cache_path) if use_cache else None
    if cached is not None:
        names, resized, skipped = cached
        if progress:
            progress(len(files), len(files), "(cache)")
    else:
        names, resized, skipped = [], [], []
        for k, path in enumerate(files):
            image = read_calibration_image(path, 3)
            if isinstance(image, str):
                skipped.append(SkippedImage(str(path), image))
            else:
                names.append(path.name)
                resized.append(prep.resize(image))
            if progress:
                progress(k + 1, len(files), path.name)
        if use_cache:
            _save_cache(cache_path, names, resized, skipped)
    if len(names) < min_images:
        reasons = "; ".join(f"{Path(s.path).name} {s.reason}" for s in skipped[:4])
        detail = f" (skipped: {reasons})" if reasons else ""
        raise InputError(f"only {len(names)} usable calibration image(s) in {source}, at least {min_images} needed"
                         f"{detail}: add images or lower --min-images")
    inputs = np.concatenate([prep.normalize_and_pad(r) for r in resized], axis=0).astype(np.float32)
    return CalibrationSet(input_name, names, inputs, source, skipped, bundled, cached is not None)
