"""Recipe -> eager model -> ONNX for the families beyond the SAM image encoder: ``sam_mask_decoder`` and
``timm_vit``. :mod:`vitdeploy.pipeline` dispatches here; the encoder path stays there.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch import nn

from vitdeploy.errors import InputError, RecipeError
from vitdeploy.models.recipes import Recipe
from vitdeploy.onnx_export.exporter import ExportResult

Echo = Callable[[str], None]
FAMILIES = ("sam_mask_decoder", "timm_vit")


def load_family_eager(recipe: Recipe, checkpoint: str | None, random_seed: int | None) -> tuple[Any, nn.Module]:
    """(architecture, eager official model) of a ``sam_mask_decoder`` or ``timm_vit`` recipe."""
    what = f"recipe '{recipe.name}' ({recipe.variant})"
    if recipe.family == "sam_mask_decoder":
        from vitdeploy.models.sam_decoder import SamDecoderArch, load_sam_prompt_decoder

        arch = SamDecoderArch.from_recipe(recipe)
        return arch, load_sam_prompt_decoder(arch, checkpoint, random_seed=random_seed, what=what)
    if recipe.family == "timm_vit":
        from vitdeploy.models.timm_vit import TimmVitArch, load_timm_vit

        arch = TimmVitArch.from_recipe(recipe)
        return arch, load_timm_vit(arch, checkpoint, prefix=recipe.checkpoint_prefix, random_seed=random_seed, what=what)
    raise RecipeError(f"recipe '{recipe.name}' is for family '{recipe.family}', which this command does not export yet")


def _section(recipe: Recipe, name: str, allowed: set[str]) -> dict[str, Any]:
    table = dict(recipe.extra.get(name, {}))
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise RecipeError(f"recipe '{recipe.name}' has unknown [{name}] keys {unknown}: allowed are {sorted(allowed)}")
    return table


def export_family(
    recipe: Recipe,
    arch: Any,
    model: nn.Module,
    output: str | Path,
    *,
    checkpoint: str | None,
    random_seed: int | None,
    image_size: int | None,
    batch: int,
    dynamic_batch: bool,
    opset: int | None,
    layernorm2d: str,
    echo: Echo,
) -> ExportResult:
    """Export the eager model of a ``sam_mask_decoder`` or ``timm_vit`` recipe to ``output``."""
    from vitdeploy.fileio import sha256_file

    ckpt_name = Path(checkpoint).name if checkpoint else None
    ckpt_sha = sha256_file(checkpoint) if checkpoint else None
    if recipe.family == "sam_mask_decoder":
        return _export_decoder(recipe, arch, model, output, ckpt_name, ckpt_sha, random_seed, image_size, batch,
                               dynamic_batch, opset, layernorm2d, echo)
    return _export_timm(recipe, arch, model, output, ckpt_name, ckpt_sha, random_seed, image_size, batch,
                        dynamic_batch, opset, echo)


def _export_decoder(recipe: Recipe, arch: Any, model: nn.Module, output: str | Path, ckpt_name: str | None,
                    ckpt_sha: str | None, random_seed: int | None, image_size: int | None, batch: int,
                    dynamic_batch: bool, opset: int | None, layernorm2d: str, echo: Echo) -> ExportResult:
    from vitdeploy.models.sam_decoder import build_sam_prompt_decoder
    from vitdeploy.onnx_export.sam_decoder import export_sam_mask_decoder, sam_decoder_metadata

    if batch != 1 or dynamic_batch:
        raise InputError("--batch/--dynamic-batch do not apply to the mask decoder: it takes one prompt set per call "
                         "(its dynamic axis is the number of points)")
    options = _section(recipe, "decoder", {"mask_output", "max_points", "opt_points"})
    mask_output = str(options.get("mask_output", "all"))
    max_points, opt_points = int(options.get("max_points", 32)), int(options.get("opt_points", 2))
    if not 1 <= opt_points <= max_points:
        raise RecipeError(f"recipe '{recipe.name}': need 1 <= opt_points <= max_points, got {opt_points} and {max_points}")
    if image_size and image_size != arch.input_image_size:
        # The decoder paired with an encoder exported at another size: official modules built for that size.
        sized = arch.at_input_size(image_size)
        resized = build_sam_prompt_decoder(sized)
        resized.load_state_dict(model.state_dict(), strict=True)
        arch, model = sized, resized.eval()
    echo(f"exporting {recipe.name} ({recipe.variant}) for a {arch.input_image_size}x{arch.input_image_size} encoder "
         f"({arch.image_embedding_size}x{arch.image_embedding_size} embeddings), mask output '{mask_output}', "
         f"1..{max_points} points")
    metadata = sam_decoder_metadata(
        variant=recipe.variant, architecture=arch.to_dict(), pixel_mean=recipe.pixel_mean, pixel_std=recipe.pixel_std,
        random_seed=random_seed, checkpoint_name=ckpt_name, checkpoint_sha256=ckpt_sha, mask_output=mask_output,
        num_mask_tokens=arch.num_multimask_outputs + 1, layernorm2d=layernorm2d, max_points=max_points,
        opt_points=opt_points,
    )
    return export_sam_mask_decoder(model.prompt_encoder, model.mask_decoder, output, metadata=metadata,
                                   opset=opset or recipe.opset, layernorm2d=layernorm2d,  # type: ignore[arg-type]
                                   mask_output=mask_output)  # type: ignore[arg-type]


def _export_timm(recipe: Recipe, arch: Any, model: nn.Module, output: str | Path, ckpt_name: str | None,
                 ckpt_sha: str | None, random_seed: int | None, image_size: int | None, batch: int,
                 dynamic_batch: bool, opset: int | None, echo: Echo) -> ExportResult:
    from vitdeploy.models.timm_vit import timm_data_config
    from vitdeploy.onnx_export.timm_vit import export_timm_vit, timm_vit_metadata
    from vitdeploy.rewrites.timm_vit import TIMM_OUTPUTS

    options = _section(recipe, "timm", {"output"})
    kind = str(options.get("output", "logits"))
    if kind not in TIMM_OUTPUTS:
        raise RecipeError(f"recipe '{recipe.name}': [timm] output '{kind}' is not one of {', '.join(TIMM_OUTPUTS)}")
    patch = model.patch_embed.patch_size[0]
    size = image_size or int(model.patch_embed.img_size[0])
    if size % patch:
        lower = max(patch, size // patch * patch)
        raise InputError(f"--image-size {size} is not a multiple of the patch size {patch}: use {lower} or {lower + patch}")
    config = timm_data_config(model)
    config["input_size"] = [config["input_size"][0], size, size]
    mean, std = _timm_mean_std(recipe, config)
    echo(f"exporting {recipe.name} ({recipe.variant}) at {size}x{size}, output '{kind}'"
         + (" with a dynamic batch" if dynamic_batch else ""))
    metadata = timm_vit_metadata(
        variant=recipe.variant, img_size=size, pixel_mean=mean, pixel_std=std, architecture=arch.to_dict(),
        random_seed=random_seed, output=kind, data_config=config, checkpoint_name=ckpt_name,
        checkpoint_sha256=ckpt_sha, dynamic_batch=dynamic_batch, input_name=recipe.input_name, output_name=kind,
    )
    return export_timm_vit(model, output, metadata=metadata, img_size=size, output=kind, batch=batch,  # type: ignore[arg-type]
                           dynamic_batch=dynamic_batch, opset=opset or recipe.opset, input_name=recipe.input_name,
                           output_name=kind)


def _timm_mean_std(recipe: Recipe, config: dict[str, Any]) -> tuple[list[float], list[float]]:
    """The recipe's [preprocessing] (0..255 scale) if it has one, else timm's data config scaled to 0..255."""
    import tomllib

    has_table = recipe.source is not None and "preprocessing" in tomllib.loads(recipe.source.read_text())
    if has_table:
        return list(recipe.pixel_mean), list(recipe.pixel_std)
    return [255.0 * m for m in config["mean"]], [255.0 * s for s in config["std"]]
