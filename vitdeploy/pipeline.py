"""The public Python API behind the CLI verbs that build artifacts: recipe + weights -> eager model -> ONNX.

The family a recipe names (:mod:`vitdeploy.families`) does the family-specific work; this module
checks what any export needs (weights, output path, options) and hands over.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from vitdeploy.echo import Echo, quiet
from vitdeploy.errors import InputError
from vitdeploy.families import ExportOptions, ModelFamily, check_export_options, family_of_recipe

if TYPE_CHECKING:
    from torch import nn

    from vitdeploy.models.recipes import Recipe
    from vitdeploy.onnx_export.exporter import ExportResult


RANDOM_WEIGHTS_WARNING = (
    "WARNING: RANDOM WEIGHTS (seed {seed}): this model computes nothing useful; it exists for demos, tests "
    "and benchmarks. Pass --checkpoint for a real model."
)


def _weights(checkpoint: str | None, random_weights: bool, seed: int) -> int | None:
    """The random seed of a --random-weights model (None for a checkpoint), refusing neither or both."""
    if checkpoint and random_weights:
        raise InputError("give either --checkpoint or --random-weights, not both")
    if not checkpoint and not random_weights:
        raise InputError("no weights given: pass --checkpoint PATH, or --random-weights for a demo model")
    return seed if random_weights else None


def load_eager_from_recipe(recipe_name: str, checkpoint: str | None, random_weights: bool,
                           seed: int) -> tuple[Recipe, Any, nn.Module]:
    """(recipe, arch, eager official model) for a recipe and a weight source."""
    from vitdeploy.models.recipes import load_recipe

    random_seed = _weights(checkpoint, random_weights, seed)
    recipe = load_recipe(recipe_name)
    arch, model = family_of_recipe(recipe).load_eager(recipe, checkpoint, random_seed)
    return recipe, arch, model


def check_export_request(recipe_name: str, output: str | Path, options: ExportOptions) -> tuple[Recipe, ModelFamily]:
    """Everything about an export a user can get wrong, checked without torch: the output path, the weights,
    the recipe (its architecture's keys and types where its family parses them without torch), the
    options its family takes and the input size. Returns the recipe and its family."""
    from vitdeploy.fileio import check_output_path, require_checkpoint_file
    from vitdeploy.models.recipes import load_recipe
    from vitdeploy.targets import get_target

    check_output_path(output)  # fail before minutes of work, not after
    get_target(options.target)
    _weights(options.checkpoint, options.random_seed is not None, options.random_seed or 0)
    if options.checkpoint:
        require_checkpoint_file(options.checkpoint)
    recipe = load_recipe(recipe_name)
    family = family_of_recipe(recipe)
    check_export_options(family, recipe, options)
    family.check_export(recipe, options)
    return recipe, family


def export_recipe(recipe_name: str, output: str | Path, options: ExportOptions, echo: Echo = quiet) -> ExportResult:
    """Build the eager model of a recipe from ``options``' weights, rewrite it and export it to ``output``.

    Everything a user can get wrong (output path, weights, recipe, options the recipe's family does not
    have) is refused before the model is built (:func:`check_export_request`).
    """
    recipe, family = check_export_request(recipe_name, output, options)
    return export_checked(recipe, family, output, options, echo)


def export_checked(recipe: Recipe, family: ModelFamily, output: str | Path, options: ExportOptions,
                   echo: Echo = quiet) -> ExportResult:
    """:func:`export_recipe` after :func:`check_export_request` has returned ``recipe`` and ``family`` (the CLI
    checks first, then makes sure the torch side is installed, then exports)."""
    arch, model = family.load_eager(recipe, options.checkpoint, options.random_seed)
    if options.random_seed is not None:
        echo(RANDOM_WEIGHTS_WARNING.format(seed=options.random_seed))
    return family.export(recipe, arch, model, output, options, echo)


def export_checked_all(requests: list[tuple[Recipe, ModelFamily, str | Path]], options: ExportOptions,
                       echo: Echo = quiet) -> list[ExportResult]:
    """:func:`export_checked` for each (recipe, family, output) in order, in one process, the checkpoint read once
    (:func:`~vitdeploy.models.checkpoints.reading_each_checkpoint_once`). All or nothing: when one fails, the files
    the earlier ones wrote are removed before the error goes on, so the same command can run again."""
    from vitdeploy.models.checkpoints import reading_each_checkpoint_once

    results: list[ExportResult] = []
    try:
        with reading_each_checkpoint_once():
            for recipe, family, output in requests:
                results.append(export_checked(recipe, family, output, options, echo))
    except BaseException:
        for result in results:
            for path in (result.path, result.external_data):
                if path is not None:
                    Path(path).unlink(missing_ok=True)
        raise
    return results


def export_from_recipe(
    recipe_name: str,
    output: str | Path,
    *,
    checkpoint: str | None = None,
    random_weights: bool = False,
    seed: int = 0,
    echo: Echo = quiet,
    **options: Any,
) -> ExportResult:
    """:func:`export_recipe` with the weights as ``vitdeploy export`` takes them (``checkpoint`` or
    ``random_weights`` + ``seed``) and the other :class:`~vitdeploy.families.ExportOptions` as keywords:
    ``input_size``, ``batch``, ``dynamic_batch``, ``opset``, ``layernorm2d``, ``target``."""
    try:
        chosen = ExportOptions(checkpoint=checkpoint, random_seed=_weights(checkpoint, random_weights, seed), **options)
    except TypeError as exc:
        raise InputError(f"export_from_recipe: {exc}") from None
    return export_recipe(recipe_name, output, chosen, echo)
