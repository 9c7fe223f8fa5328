"""The public Python API behind the CLI verbs: recipe + weights -> artifacts, one call per verb."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from vitdeploy.errors import InputError, RecipeError
from vitdeploy.onnx_export.exporter import ExportResult

Echo = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


RANDOM_WEIGHTS_WARNING = (
    "WARNING: RANDOM WEIGHTS (seed {seed}): this model computes nothing useful; it exists for demos, tests "
    "and benchmarks. Pass --checkpoint for a real model."
)


def load_eager_from_recipe(recipe_name: str, checkpoint: str | None, random_weights: bool, seed: int):
    """(recipe, arch, eager official model) for a recipe and a weight source."""
    from vitdeploy.models.recipes import load_recipe
    from vitdeploy.models.sam_encoder import SamEncoderArch, load_sam_image_encoder

    if checkpoint and random_weights:
        raise InputError("give either --checkpoint or --random-weights, not both")
    if not checkpoint and not random_weights:
        raise InputError("no weights given: pass --checkpoint PATH, or --random-weights for a demo model")
    recipe = load_recipe(recipe_name)
    if recipe.family in ("sam_mask_decoder", "timm_vit"):
        from vitdeploy.family_export import load_family_eager

        arch, model = load_family_eager(recipe, checkpoint, seed if random_weights else None)
        return recipe, arch, model
    if recipe.family != "sam_image_encoder":
        raise RecipeError(f"recipe '{recipe.name}' is for family '{recipe.family}', which this command does not export yet")
    arch = SamEncoderArch.from_recipe(recipe)
    model = load_sam_image_encoder(
        arch, checkpoint, prefix=recipe.checkpoint_prefix, random_seed=seed if random_weights else None,
        what=f"recipe '{recipe.name}' ({recipe.variant})",
    )
    return recipe, arch, model


def export_from_recipe(
    recipe_name: str,
    output: str | Path,
    *,
    checkpoint: str | None = None,
    random_weights: bool = False,
    seed: int = 0,
    image_size: int | None = None,
    batch: int = 1,
    dynamic_batch: bool = False,
    opset: int | None = None,
    layernorm2d: str | None = None,
    echo: Echo = _quiet,
    target: str = "generic",
) -> ExportResult:
    """Build the eager model of a recipe, rewrite it and export it to ``output``.

    ``target`` (SAM image encoder recipes only) picks the attention form for a runtime; see
    :mod:`vitdeploy.onnx_export.targets` (default ``generic``: portable standard ONNX).
    ``layernorm2d`` (SAM recipes only: the encoder's neck, the decoder's upscaler) is ``matmul`` or
    ``native``; None means ``matmul``.
    """
    from vitdeploy.fileio import check_output_path, sha256_file
    from vitdeploy.onnx_export.sam_encoder import export_sam_image_encoder, sam_encoder_metadata
    from vitdeploy.onnx_export.targets import DEFAULT_TARGET, get_target

    check_output_path(output)  # fail before minutes of work, not after
    get_target(target)
    if target != DEFAULT_TARGET or layernorm2d is not None:
        from vitdeploy.models.recipes import load_recipe

        early = load_recipe(recipe_name)
        if target != DEFAULT_TARGET and early.family != "sam_image_encoder":
            raise InputError(f"--target {target} applies to SAM image encoder recipes; recipe '{early.name}' "
                             f"({early.family}) has one export form: drop --target")
        if layernorm2d is not None and not early.family.startswith("sam_"):
            raise InputError(f"--layernorm2d applies to SAM recipes (LayerNorm2d in the encoder's neck and the decoder's "
                             f"upscaler); recipe '{early.name}' ({early.family}) has none: drop --layernorm2d")
    layernorm2d = layernorm2d or "matmul"
    recipe, arch, model = load_eager_from_recipe(recipe_name, checkpoint, random_weights, seed)
    if recipe.family != "sam_image_encoder":
        from vitdeploy.family_export import export_family

        if random_weights:
            echo(RANDOM_WEIGHTS_WARNING.format(seed=seed))
        return export_family(recipe, arch, model, output, checkpoint=checkpoint, random_seed=seed if random_weights else None,
                             image_size=image_size, batch=batch, dynamic_batch=dynamic_batch, opset=opset,
                             layernorm2d=layernorm2d, echo=echo)
    size = image_size or arch.img_size
    if size % arch.patch_size:
        lower = max(arch.patch_size, size // arch.patch_size * arch.patch_size)
        raise InputError(
            f"--image-size {size} is not a multiple of the patch size {arch.patch_size}: use {lower} or {lower + arch.patch_size}"
        )
    if random_weights:
        echo(RANDOM_WEIGHTS_WARNING.format(seed=seed))
    echo(f"exporting {recipe.name} ({recipe.variant}) at {size}x{size}" + (" with a dynamic batch" if dynamic_batch else ""))
    metadata = sam_encoder_metadata(
        variant=recipe.variant,
        img_size=size,
        pixel_mean=recipe.pixel_mean,
        pixel_std=recipe.pixel_std,
        architecture=arch.to_dict(),
        random_seed=seed if random_weights else None,
        checkpoint_name=Path(checkpoint).name if checkpoint else None,
        checkpoint_sha256=sha256_file(checkpoint) if checkpoint else None,
        dynamic_batch=dynamic_batch,
        input_name=recipe.input_name,
        output_name=recipe.output_name,
        layernorm2d=layernorm2d,
        target=target,
    )
    return export_sam_image_encoder(
        model, output, metadata=metadata, img_size=size, batch=batch, dynamic_batch=dynamic_batch,
        opset=opset or recipe.opset, layernorm2d=layernorm2d,  # type: ignore[arg-type]
        input_name=recipe.input_name, output_name=recipe.output_name, target=target,
    )
