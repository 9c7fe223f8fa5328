"""The rules every model's prompts follow, wherever they come from (a predictor's call, a verb's ``--point``, a
server's request): numbers that are finite, boxes whose corners are in order, and points and boxes inside the image
in pixels of the original image.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vitdeploy.errors import InputError


def as_float_array(value: Any, name: str) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name} must be numeric, got {type(value).__name__}") from exc
    if not np.all(np.isfinite(arr)):
        raise InputError(f"{name} holds NaN or infinite values")
    return arr


def check_box_order(box: np.ndarray) -> None:
    """InputError unless a (4,) box is x0, y0, x1, y1 with x0 <= x1 and y0 <= y1."""
    if box[0] > box[2] or box[1] > box[3]:
        flipped = [min(box[0], box[2]), min(box[1], box[3]), max(box[0], box[2]), max(box[1], box[3])]
        raise InputError(f"box {[float(v) for v in box]} is not x0, y0, x1, y1 with x0 <= x1 and y0 <= y1: "
                         f"did you mean {[float(v) for v in flipped]}?")


def check_prompts_inside(image_hw: tuple[int, int], point_coords: Any = None, box: Any = None) -> None:
    """Raise InputError if a point or box corner lies outside an image of ``image_hw``, or the box is reversed
    (checkable before encoding, so a folder run fails before its first encoder call)."""
    height, width = int(image_hw[0]), int(image_hw[1])
    if point_coords is not None:
        check_inside(as_float_array(point_coords, "point_coords").reshape(-1, 2), width, height, "point")
    if box is not None:
        b = as_float_array(box, "box").reshape(-1)
        if b.shape[0] == 4:
            check_box_order(b)
        check_inside(b.reshape(-1, 2), width, height, "box corner")


def check_inside(points: np.ndarray, width: int, height: int, what: str, where: str = "") -> None:
    """The rule: coordinates are pixels of the original image, x in [0, W], y in [0, H]; ``where`` starts the
    refusal (``prompt 2: `` in a server's batch)."""
    outside = [(float(x), float(y)) for x, y in points if not (0.0 <= x <= width and 0.0 <= y <= height)]
    if outside:
        x, y = outside[0]
        raise InputError(
            f"{where}{what} ({x:g}, {y:g}) is outside the {width}x{height} image: coordinates are pixels (x, y) "
            f"with 0 <= x <= {width} and 0 <= y <= {height}"
        )


__all__ = ["as_float_array", "check_box_order", "check_inside", "check_prompts_inside"]
