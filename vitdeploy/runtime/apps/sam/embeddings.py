"""Saved SAM image embeddings: encode an image once, prompt it many times (``predict --save-embedding/--embedding``).

On 2 CPU cores the ViT-B encoder takes ~15-25 s and the decoder ~0.1 s, so re-encoding for every
click is what made ``predict`` take most of a minute. The file is a NumPy ``.npz`` with the
embedding and what it is only valid for: the image (SHA-256 of its file, its size after EXIF
orientation) and the encoder (variant, input size, weights' checkpoint SHA-256 or random seed, and
the encoder file's name). Loading checks them against the image and encoder given, so an embedding
is never applied to another image or a decoder of other weights without a clear error.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from vitdeploy.errors import InputError
from vitdeploy.metadata import identity_differences
from vitdeploy.precisions import Precision

FORMAT = "vitdeploy-sam-embedding-1"


class SamEmbedder:
    """The image encoder alone: an HxWx3 uint8 RGB picture -> its (1, C, h, w) embedding, as ``SamPredictor.set_image``
    computes it (the same preprocessing), without a decoder (dataset jobs, a server's encoder replicas). ``encoder``:
    the open Runner of a file checked to be SAM's encoder (:data:`vitdeploy.runtime.apps.sam.files.ENCODER`)."""

    def __init__(self, encoder: Any):
        from vitdeploy.runtime.processing.preprocess import SamPreprocessor

        meta = encoder.metadata
        self.runner = encoder
        self.input_name = meta.get("input_name") or encoder.input_names[0]
        self.output_name = meta.get("output_name") or encoder.output_names[0]
        self.preprocessor = SamPreprocessor(int(meta["input_size"][0]), meta["pixel_mean"], meta["pixel_std"])

    def embed(self, picture: np.ndarray) -> tuple[np.ndarray, tuple[int, int]]:
        """(embedding (1, C, h, w) float32, the resized image's (h, w))."""
        resized = self.preprocessor.resize(picture)
        x = self.preprocessor.normalize_and_pad(resized)
        embedding = np.asarray(self.runner.run({self.input_name: x})[self.output_name], np.float32)
        return embedding, (int(resized.shape[0]), int(resized.shape[1]))

    def __call__(self, picture: np.ndarray) -> dict[str, np.ndarray]:
        """The picture's features by name, as ``SamPredictor.set_image_features`` takes them."""
        from vitdeploy.runtime.apps.sam.predictor import IMAGE_FEATURES

        return {IMAGE_FEATURES[0]: self.embed(picture)[0]}


def _encoder_identity(metadata: dict[str, Any], encoder_path: str | os.PathLike | None) -> dict[str, Any]:
    return {"variant": metadata.get("variant"), "input_size": metadata.get("input_size"),
            "checkpoint_sha256": metadata.get("checkpoint_sha256"), "random_seed": metadata.get("random_seed"),
            "precision": Precision.of(metadata).value,
            "encoder_file": Path(encoder_path).name if encoder_path else None}


def save_embedding(path: str | os.PathLike, embedding: np.ndarray, original_size: tuple[int, int], *,
                   image_path: str | os.PathLike, encoder_metadata: dict[str, Any],
                   encoder_path: str | os.PathLike | None = None) -> Path:
    """Write ``embedding`` and what it is valid for to ``path`` (``.npz``), atomically; returns the path."""
    from vitdeploy.fileio import atomic_output, sha256_file

    info = {"format": FORMAT, "original_size": [int(v) for v in original_size],
            "image_file": Path(image_path).name, "image_sha256": sha256_file(image_path),
            "encoder": _encoder_identity(encoder_metadata, encoder_path)}
    with atomic_output(path, suffix=".npz") as tmp, open(tmp, "wb") as handle:
        np.savez(handle, embedding=np.asarray(embedding, np.float32), info=np.array(json.dumps(info)))
    return Path(path)


def load_embedding(path: str | os.PathLike, *, image_path: str | os.PathLike,
                   encoder_metadata: dict[str, Any]) -> tuple[np.ndarray, tuple[int, int]]:
    """(embedding, original (H, W)) from ``path``, after checking it was made from this image by this encoder's weights."""
    from vitdeploy.fileio import sha256_file

    path = Path(path)
    if not path.is_file():
        raise InputError(f"embedding file '{path}' not found: write one with 'vitdeploy predict ... --save-embedding {path.name}'")
    try:
        with np.load(path, allow_pickle=False) as data:
            embedding = np.array(data["embedding"], np.float32)
            info = json.loads(str(data["info"]))
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as exc:
        raise InputError(f"'{path}' is not an embedding written by 'vitdeploy predict --save-embedding' "
                         f"({type(exc).__name__}): write it again") from exc
    if info.get("format") != FORMAT:
        raise InputError(f"'{path}' has format {info.get('format')!r}, expected {FORMAT!r}: write it again with this vitdeploy")
    if info.get("image_sha256") != sha256_file(image_path):
        raise InputError(f"'{path.name}' was computed for another image ('{info.get('image_file')}'), not "
                         f"'{Path(image_path).name}': give that image, or encode this one (--save-embedding)")
    saved, given = info.get("encoder", {}), _encoder_identity(encoder_metadata, None)
    different = identity_differences(saved, given, ("variant", "input_size", "checkpoint_sha256", "random_seed"))
    if different:
        shown = ", ".join(different)
        raise InputError(f"'{path.name}' was computed by another encoder ('{saved.get('encoder_file')}': {shown}): "
                         "give the encoder it was made with, or encode the image again")
    return embedding, (int(info["original_size"][0]), int(info["original_size"][1]))


__all__ = ["FORMAT", "SamEmbedder", "load_embedding", "save_embedding"]
