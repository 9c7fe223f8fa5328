"""Named sets of model inputs (what ``validate``, ``benchmark`` and calibration feed a runner), and seeded makers
of them: standard-normal images, and SAM decoder prompts laid out as ``SamPredictor`` lays them out. NumPy only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vitdeploy.errors import InputError


@dataclass
class InputSet:
    """One named set of model inputs, with a description of where it came from."""

    label: str
    feeds: dict[str, np.ndarray]
    source: str


def random_image_inputs(input_name: str, shape: list[int], count: int, seed: int = 0) -> list[InputSet]:
    """``count`` different seeded standard-normal inputs (the scale of normalized images)."""
    sets = []
    for i in range(count):
        rng = np.random.default_rng(seed + i)
        sets.append(InputSet(f"random{i}", {input_name: rng.standard_normal(shape).astype(np.float32)}, f"normal(0,1), seed {seed + i}"))
    return sets


def decoder_input_sets(metadata: dict[str, Any], count: int, seed: int = 0) -> list[InputSet]:
    """Prompt sets for a decoder artifact, in the graph's input names."""
    size = int(metadata["input_size"][0])
    grid = int(metadata["image_embedding_size"][0])
    channels = int(metadata["embed_dim"])
    mask_hw = [int(d) for d in metadata["mask_input_size"]]
    sets = []
    for i in range(count):
        rng = np.random.default_rng(seed + i)
        embeddings = rng.standard_normal((1, channels, grid, grid)).astype(np.float32)
        mask = (4.0 * rng.standard_normal((1, 1, *mask_hw))).astype(np.float32)
        if i % 2 == 0:  # two clicks + padding, no mask prompt
            coords = np.concatenate([rng.uniform(0, size, (2, 2)), np.zeros((1, 2))])
            labels = np.array([1.0, 0.0, -1.0])
            has_mask, what = 0.0, "2 points + padding, no mask"
        else:  # one click + a box, mask prompt
            x0, y0 = rng.uniform(0, size / 2, 2)
            x1, y1 = x0 + rng.uniform(1, size / 2), y0 + rng.uniform(1, size / 2)
            coords = np.concatenate([rng.uniform(0, size, (1, 2)), [[x0, y0], [x1, y1]]])
            labels = np.array([1.0, 2.0, 3.0])
            has_mask, what = 1.0, "1 point + box, mask prompt"
        sets.append(InputSet(f"prompt{i}", _decoder_feeds(embeddings, coords, labels, mask, has_mask),
                             f"seed {seed + i}: {what}"))
    return sets


def _decoder_feeds(embeddings: np.ndarray, coords: np.ndarray, labels: np.ndarray, mask: np.ndarray,
                   has_mask: float) -> dict[str, np.ndarray]:
    """The decoder graph's five inputs, in its names and types, from (N, 2) coords and (N,) labels."""
    return {
        "image_embeddings": embeddings,
        "point_coords": coords[None].astype(np.float32),
        "point_labels": labels[None].astype(np.float32),
        "mask_input": mask,
        "has_mask_input": np.array([has_mask], dtype=np.float32),
    }


def decoder_prompt_feeds(metadata: dict[str, Any], num_points: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Decoder inputs with ``num_points`` prompt points as ``SamPredictor`` lays them out (clicks with labels 1/0,
    then the padding point, label -1; no mask prompt): what ``benchmark --shapes`` times."""
    if num_points < 2:
        raise InputError(f"the decoder needs at least 2 points (a click and the padding point), got {num_points}")
    size = int(metadata["input_size"][0])
    grid = int(metadata["image_embedding_size"][0])
    rng = np.random.default_rng(seed)
    clicks = num_points - 1
    embeddings = rng.standard_normal((1, int(metadata["embed_dim"]), grid, grid)).astype(np.float32)
    coords = np.concatenate([rng.uniform(0, size, (clicks, 2)), np.zeros((1, 2))])
    labels = np.concatenate([rng.integers(0, 2, clicks).astype(np.float64), [-1.0]])
    mask = np.zeros((1, 1, *[int(d) for d in metadata["mask_input_size"]]), np.float32)
    return _decoder_feeds(embeddings, coords, labels, mask, 0.0)
