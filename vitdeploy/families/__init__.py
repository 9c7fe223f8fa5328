"""Model families: one module each, registered by name (the ``[model] family`` of a recipe, the ``family`` of
an export's metadata). Adding a family is one module here plus recipes; nothing outside this package
compares family names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vitdeploy.errors import InputError, RecipeError
from vitdeploy.families import (sam2_image_encoder, sam2_mask_decoder, sam2_memory_attention, sam2_memory_encoder,
                                sam3_detector, sam3_interactive_decoder, sam3_memory_attention, sam3_memory_encoder,
                                sam3_text_encoder, sam3_vision_encoder, sam_image_encoder, sam_mask_decoder, timm_hiera,
                                timm_vit)
from vitdeploy.families.base import ExportOptions, ModelFamily

if TYPE_CHECKING:
    from torch import nn

    from vitdeploy.models.recipes import Recipe

FAMILIES: dict[str, ModelFamily] = {
    module.FAMILY.name: module.FAMILY for module in (sam_image_encoder, sam_mask_decoder, timm_vit, timm_hiera,
                                                  sam2_image_encoder, sam2_mask_decoder, sam2_memory_encoder,
                                                  sam2_memory_attention, sam3_vision_encoder,
                                                  sam3_text_encoder, sam3_detector, sam3_interactive_decoder,
                                                  sam3_memory_encoder, sam3_memory_attention)
}


def family_of_recipe(recipe: Recipe) -> ModelFamily:
    """The family a recipe names, or a RecipeError listing the known ones."""
    try:
        return FAMILIES[recipe.family]
    except KeyError:
        raise RecipeError(f"recipe '{recipe.name}' names family '{recipe.family}', which this vitdeploy does not know: "
                          f"use one of {', '.join(FAMILIES)}") from None


def family_of(metadata: dict[str, Any], what: str = "this model", for_reference: bool = False) -> ModelFamily:
    """The family an exported file's metadata records, or an InputError saying why there is none or why the
    metadata does not fit it (``for_reference``: everything the eager reference and its inputs are rebuilt from)."""
    name = metadata.get("family")
    if not name:
        raise InputError(f"{what} carries no vitdeploy metadata (no model family): use a model written by "
                         "'vitdeploy export'")
    try:
        family = FAMILIES[name]
    except (KeyError, TypeError):
        raise InputError(f"{what} is of model family '{name}', which this vitdeploy version does not know: "
                         f"it knows {', '.join(FAMILIES)}") from None
    problems = family.metadata_problems(metadata, for_reference)
    if problems:
        raise InputError(f"{what} says it is a {name} model, but {'; '.join(problems)}: its metadata was edited or damaged; "
                         "export it again with 'vitdeploy export'")
    return family


def model_part(metadata: dict[str, Any]) -> tuple[str, str]:
    """(model, part) of the family a file's metadata records (``("sam2", "mask_decoder")``); ``("", "")`` for a file
    without a family this vitdeploy knows (the caller's refusal says what it found)."""
    name = metadata.get("family")
    family = FAMILIES.get(name) if isinstance(name, str) else None
    return (family.model, family.part) if family is not None else ("", "")


def family_of_part(model: str, part: str) -> ModelFamily:
    """The family of ``part`` of ``model`` (``("sam2", "memory_encoder")``)."""
    return next(f for f in FAMILIES.values() if (f.model, f.part) == (model, part))


def recorded_family(metadata: dict[str, Any]) -> ModelFamily | None:
    """The family an exported file's metadata records, or None for a file without vitdeploy metadata."""
    return family_of(metadata) if metadata.get("family") else None


def eager_reference(metadata: dict[str, Any], checkpoint: str | None = None) -> nn.Module:
    """The official eager model an exported file was made from (its family's, with the same weights).

    Random-weight exports are rebuilt from the seed in their metadata; checkpoint exports need the
    same checkpoint (its SHA-256 is checked against the one recorded at export).
    """
    return family_of(metadata, for_reference=True).eager_reference(metadata, checkpoint)


def check_export_options(family: ModelFamily, recipe: Recipe, options: ExportOptions) -> None:
    """Refuse ``--target``/``--layernorm2d`` values the recipe's family does not have, before any work."""
    if options.target not in family.export_targets:
        takers = [f.name for f in FAMILIES.values() if options.target in f.export_targets]
        raise InputError(f"--target {options.target} applies to {' and '.join(takers)} recipes; recipe '{recipe.name}' "
                         f"({family.name}) has the export form{'s' if len(family.export_targets) > 1 else ''} "
                         f"{', '.join(family.export_targets)}: drop --target")
    if options.layernorm2d is not None and options.layernorm2d not in family.layernorm2d_forms:
        takers = [f.name for f in FAMILIES.values() if options.layernorm2d in f.layernorm2d_forms]
        raise InputError(f"--layernorm2d applies to {' and '.join(takers)} recipes (the form of their "
                         f"LayerNorm2d); recipe '{recipe.name}' ({family.name}) has none: drop --layernorm2d")


__all__ = ["FAMILIES", "ExportOptions", "ModelFamily", "check_export_options", "eager_reference", "family_of",
           "family_of_part", "family_of_recipe", "model_part", "recorded_family"]
