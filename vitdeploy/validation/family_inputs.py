"""Seeded random inputs for ``validate``, per model family (the decoder takes five inputs, not an image)."""

from __future__ import annotations

from typing import Any

import numpy as np

from vitdeploy.errors import InputError
from vitdeploy.validation.validate import InputSet, random_image_inputs


def random_input_sets(metadata: dict[str, Any], input_names: list[str], input_shapes: dict[str, list[Any]],
                      count: int, seed: int = 0) -> list[InputSet]:
    """``count`` different seeded input sets for a model of ``metadata['family']``.

    Image models get standard-normal images (the scale of normalized pixels); the SAM mask decoder
    gets embeddings plus prompts laid out as ``SamPredictor`` does, alternating between two clicks and
    a padding point without a mask prompt, and a click plus a box with a mask prompt.
    """
    if metadata.get("family") == "sam_mask_decoder":
        return decoder_input_sets(metadata, count, seed)
    name = input_names[0]
    shape = [d if isinstance(d, int) else 1 for d in input_shapes[name]]
    return random_image_inputs(name, shape, count, seed)


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


def template_feeds(metadata: dict[str, Any], template: dict[str, list[Any]], seed: int = 0) -> dict[str, np.ndarray] | None:
    """Inputs of the template's shapes for a family whose inputs are not plain tensors (the SAM decoder's prompts,
    with the template's point count), or None: standard-normal arrays then do (``benchmark``)."""
    if metadata.get("family") != "sam_mask_decoder" or "point_coords" not in template:
        return None
    points = template["point_coords"][1]
    if not isinstance(points, int):
        raise InputError("the decoder's point count is dynamic: give it with --shapes point_coords:1xNx2,point_labels:1xN")
    return decoder_prompt_feeds(metadata, points, seed)


def check_image_inputs_apply(metadata: dict[str, Any], images: tuple[str, ...] | list[str]) -> None:
    """Refuse ``--images`` for a model that does not take images."""
    if images and metadata.get("family") == "sam_mask_decoder":
        raise InputError("the mask decoder takes image embeddings and prompts, not images: drop --images "
                         "(validate the encoder with --images instead)")
