"""Optimization profiles for dynamic inputs: ONNX dimensions + the user's ranges -> min/opt/max shapes per input.

vitdeploy exports static image sizes; the batch axis (and a decoder's prompt count) may be symbolic. A TensorRT
network with a dynamic input needs an optimization profile, so a dynamic batch without one is a user
error here (with the option to pass), not a silent batch of 1 as Polygraphy's defaults would give.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from vitdeploy.engine.onnx_facts import TensorFacts
from vitdeploy.errors import InputError


@dataclass(frozen=True)
class BatchProfile:
    """Batch sizes the engine accepts (``min``..``max``) and the one TensorRT tunes for (``opt``)."""

    min: int
    opt: int
    max: int

    def __post_init__(self) -> None:
        if not 1 <= self.min <= self.opt <= self.max:
            raise InputError(
                f"batch profile {self.min} {self.opt} {self.max} is not ordered: give MIN OPT MAX with 1 <= MIN <= OPT <= MAX"
            )


ShapeSet = dict[str, list[int]]  # {"min": [...], "opt": [...], "max": [...]}


def parse_input_profile(text: str) -> tuple[str, ShapeSet]:
    """``"point_coords=1x1x2:1x5x2:1x16x2"`` -> ``("point_coords", {"min": [1, 1, 2], ...})``."""
    name, sep, shapes = text.partition("=")
    parts = shapes.split(":")
    usage = f"--input-profile '{text}' is not NAME=MIN:OPT:MAX with shapes like 1x3x64x64"
    if not sep or not name or len(parts) != 3:
        raise InputError(usage)
    try:
        dims = [[int(d) for d in part.lower().split("x")] for part in parts]
    except ValueError as exc:
        raise InputError(usage) from exc
    if len({len(d) for d in dims}) != 1:
        raise InputError(f"--input-profile for '{name}': MIN, OPT and MAX have different ranks")
    if any(not lo <= mid <= hi or lo < 0 for lo, mid, hi in zip(*dims)):
        raise InputError(f"--input-profile for '{name}': need 0 <= MIN <= OPT <= MAX in every dimension")
    return name, {"min": dims[0], "opt": dims[1], "max": dims[2]}


def input_profiles(
    inputs: Sequence[TensorFacts],
    batch: BatchProfile | None,
    explicit: dict[str, ShapeSet] | None = None,
    model_name: str = "model",
    recorded: dict[str, ShapeSet] | None = None,
) -> dict[str, ShapeSet]:
    """Profile shapes for every dynamic input; ``{}`` for a fully static model.

    ``batch`` covers inputs whose only symbolic axis is the batch (axis 0); ``explicit`` gives full
    min/opt/max shapes per input (any axis, e.g. the number of prompt points of a mask decoder);
    ``recorded`` is the default the exporter wrote into the ONNX metadata (``shape_profile``), used
    for inputs that neither of the others covers. Precedence: explicit, batch, recorded.

    Raises:
        InputError: a dynamic input that neither covers, a profile for an unknown input, shapes that
            contradict the static dimensions, or profiles given for a static model.
    """
    explicit = dict(explicit or {})
    by_name = {t.name: t for t in inputs}
    unknown = sorted(set(explicit) - set(by_name))
    if unknown:
        raise InputError(f"--input-profile names {unknown}, which '{model_name}' does not have (inputs: {sorted(by_name)})")
    dynamic = [t for t in inputs if t.dynamic_axes]
    if not dynamic:
        if batch is not None or explicit:
            static = ", ".join(f"{t.name} {list(t.dims)}" for t in inputs)
            raise InputError(
                f"'{model_name}' has only static inputs ({static}): drop the profile options, or re-export with --dynamic-batch"
            )
        return {}
    recorded = {k: v for k, v in (recorded or {}).items() if k in by_name}
    out: dict[str, ShapeSet] = {}
    for t in inputs:
        if t.name in explicit:
            out[t.name] = _checked(t, explicit[t.name], "--input-profile")
        elif t.dynamic_axes == [0] and batch is not None:
            rest = [int(d) for d in t.dims[1:]]
            out[t.name] = {"min": [batch.min, *rest], "opt": [batch.opt, *rest], "max": [batch.max, *rest]}
        elif t.name in recorded and t.dynamic_axes:
            out[t.name] = _checked(t, recorded[t.name], "the model's recorded shape_profile")
        elif t.dynamic_axes == [0]:
            raise InputError(
                f"'{model_name}' has a dynamic batch axis on '{t.name}': give --batch-profile MIN OPT MAX (e.g. --batch-profile 1 1 4)"
            )
        elif t.dynamic_axes:
            raise InputError(
                f"input '{t.name}' of '{model_name}' has dynamic axes {t.dynamic_axes} ({list(t.dims)}): "
                f"give --input-profile {t.name}=MIN:OPT:MAX (shapes like 1x3x64x64)"
            )
    return out


def _checked(t: TensorFacts, shapes: ShapeSet, source: str) -> ShapeSet:
    """``shapes`` for input ``t`` after checking rank, order and the model's static dimensions."""
    try:
        lo, mid, hi = (list(map(int, shapes[k])) for k in ("min", "opt", "max"))
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{source} for '{t.name}' is not min/opt/max shapes: {shapes!r}") from exc
    if not len(lo) == len(mid) == len(hi) == len(t.dims):
        raise InputError(f"{source} for '{t.name}' has rank {len(lo)}, the input has rank {len(t.dims)}")
    if any(not 0 <= a <= b <= c for a, b, c in zip(lo, mid, hi)):
        raise InputError(f"{source} for '{t.name}': need 0 <= MIN <= OPT <= MAX in every dimension")
    for axis, dim in enumerate(t.dims):
        if axis not in t.dynamic_axes and (lo[axis], mid[axis], hi[axis]) != (dim, dim, dim):
            raise InputError(f"{source} for '{t.name}': axis {axis} is static ({dim}) in the model")
    return {"min": lo, "opt": mid, "max": hi}
