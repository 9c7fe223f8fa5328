"""The model's input size: one name, one check.

``input_size`` is the side, in pixels, of the square image a model takes: the ``input_size`` key of
a file's metadata (read by the Python and C++ runtimes), ``--input-size`` on the command line,
``ExportOptions.input_size`` and every ``input_size`` parameter in between.

The one place the official names stay is a recipe's ``[architecture]`` table and the dataclasses that
mirror it (``SamEncoderArch.img_size``, ``SamDecoderArch.input_image_size``, timm's ``img_size``):
they are the official constructors' keyword arguments, so a recipe reads like the official builder.
"""

from __future__ import annotations

from vitdeploy.errors import InputError


def require_patch_multiple(size: int, patch: int, what: str = "--input-size", unit: str = "patch size") -> None:
    """Refuse an input side that is not a positive whole number of patches, naming the two nearest that are."""
    if size <= 0 or size % patch:
        lower = max(patch, size // patch * patch)
        raise InputError(f"{what} {size} is not a multiple of the {unit} {patch}: use {lower} or {lower + patch}")
