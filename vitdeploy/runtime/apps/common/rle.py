"""Masks as COCO writes them, for every model's answers (SAM's generator, SAM 2's tracks, SAM 3's instances, the
server): COCO's uncompressed RLE (column-major runs, zeros first), its compressed string form (``coco_encode_rle``:
the 5-bit, delta-coded string of pycocotools' ``rleToString``), and a mask's box. NumPy only; the official
``segment_anything/utils/amg.py`` names (tests/runtime/apps/test_mask_generator.py compares them).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def mask_to_box(masks: np.ndarray) -> np.ndarray:
    """(C, H, W) bool -> (C, 4) XYXY boxes of their pixels (inclusive maxima); an empty mask gives [0, 0, 0, 0]."""
    boxes = np.zeros((len(masks), 4), np.float32)
    for i, mask in enumerate(masks):
        rows, cols = np.any(mask, axis=1), np.any(mask, axis=0)
        if rows.any():
            y = np.flatnonzero(rows)
            x = np.flatnonzero(cols)
            boxes[i] = (x[0], y[0], x[-1], y[-1])
    return boxes


def mask_to_rle(mask: np.ndarray) -> dict[str, Any]:
    """COCO's uncompressed RLE of an (H, W) bool mask: run lengths in column-major order, starting with zeros."""
    h, w = mask.shape
    flat = mask.T.reshape(-1)
    change = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    edges = np.concatenate([[0], change, [flat.size]])
    counts = np.diff(edges).tolist()
    if flat.size and flat[0]:
        counts = [0, *counts]
    return {"size": [h, w], "counts": [int(c) for c in counts]}


def rle_to_mask(rle: dict[str, Any]) -> np.ndarray:
    """The (H, W) bool mask of an uncompressed RLE."""
    h, w = rle["size"]
    values = np.zeros(h * w, dtype=bool)
    position, value = 0, False
    for count in rle["counts"]:
        values[position:position + count] = value
        position += count
        value = not value
    return values.reshape(w, h).T


def area_from_rle(rle: dict[str, Any]) -> int:
    return int(sum(rle["counts"][1::2]))


def coco_encode_rle(rle: dict[str, Any]) -> dict[str, Any]:
    """COCO's compressed RLE (``{"size", "counts": str}``, what pycocotools' ``frPyObjects`` then decoding to UTF-8 gives).

    Each count from the third on is stored as the difference to the count two before; every value is
    written in 5-bit groups, least significant first, as characters ``48 + group`` with bit 5 set while
    more groups follow (pycocotools ``maskApi.c``, ``rleToString``).
    """
    counts = np.asarray(rle["counts"], dtype=np.int64).reshape(-1)
    x = counts.copy()
    x[3:] -= counts[1:-2]
    # Vectorized over the counts, one 5-bit group at a time (a noisy 256x256 mask has ~10^4 runs: a Python loop
    # over them took 7 ms of a 20 ms prompt answer). Each value's characters are written until its last group.
    groups = np.zeros((x.size, 13), dtype=np.uint8)  # 13 groups of 5 bits hold any int64
    written = np.zeros(x.size, dtype=np.int64)
    active = np.ones(x.size, dtype=bool)
    for g in range(13):
        if not active.any():
            break
        c = x & 0x1F
        x >>= 5  # arithmetic shift, as C's on a signed long
        more = np.where(c & 0x10, x != -1, x != 0)
        groups[active, g] = (c + 48 + 0x20 * more)[active]
        written += active
        active &= more
    text = groups[np.arange(13) < written[:, None]].tobytes().decode("ascii")
    return {"size": list(rle["size"]), "counts": text}


__all__ = ["area_from_rle", "coco_encode_rle", "mask_to_box", "mask_to_rle", "rle_to_mask"]
