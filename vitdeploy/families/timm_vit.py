"""timm's VisionTransformer (ViT, DeiT and kin): a class token, global attention, timm's own preprocessing."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from vitdeploy.errors import RecipeError
from vitdeploy.families.base import Echo, ExportOptions, ModelFamily, recipe_section, reference_seed

if TYPE_CHECKING:
    from torch import nn

    from vitdeploy.models.recipes import Recipe
    from vitdeploy.onnx_export.exporter import ExportResult


class TimmFamily(ModelFamily):
    """What the timm families share: the recipe's ``[timm] output`` and timm's own eval preprocessing."""

    required_metadata = ("architecture", "input_size", "data_config")
    runtime_metadata = ("input_size", "pixel_mean", "pixel_std")

    def load_eager(self, recipe: Recipe, checkpoint: str | None, random_seed: int | None) -> tuple[Any, nn.Module]:
        """By :attr:`eager_loader`, with the recipe's checkpoint prefix (timm's loaders take one)."""
        import importlib

        from vitdeploy.models.timm_vit import TimmVitArch

        module, _, function = self.eager_loader.partition(":")
        arch = TimmVitArch.from_recipe(recipe)
        load = getattr(importlib.import_module(module), function)
        return arch, load(arch, checkpoint, prefix=recipe.checkpoint_prefix, random_seed=random_seed,
                          what=f"recipe '{recipe.name}' ({recipe.variant})")

    def output_kind(self, recipe: Recipe) -> str:
        """``logits``, ``pre_logits`` or ``features``: which of timm's methods the graph computes."""
        from vitdeploy.rewrites.timm_vit import TIMM_OUTPUTS

        kind = str(recipe_section(recipe, "timm", {"output"}).get("output", "logits"))
        if kind not in TIMM_OUTPUTS:
            raise RecipeError(f"recipe '{recipe.name}': [timm] output '{kind}' is not one of {', '.join(TIMM_OUTPUTS)}")
        return kind

    def export_metadata(self, recipe: Recipe, arch: Any, model: nn.Module, size: int, options: ExportOptions, echo: Echo,
                        what: str = "") -> tuple[str, dict[str, Any], dict[str, Any]]:
        """(the output kind, timm's data config at ``size``, the file's metadata) of an export at ``size``, said by
        ``echo`` (``what``: more of the model's name)."""
        from vitdeploy.metadata import artifact_metadata
        from vitdeploy.models.timm_vit import timm_data_config

        kind = self.output_kind(recipe)
        config = timm_data_config(model)
        config["input_size"] = [config["input_size"][0], size, size]
        mean, std = timm_mean_std(recipe, config)
        echo(f"exporting {recipe.name} ({recipe.variant}{what}) at {size}x{size}, output '{kind}'"
             + (" with a dynamic batch" if options.dynamic_batch else ""))
        metadata = artifact_metadata(
            family=self.name, variant=recipe.variant, input_size=size, pixel_mean=mean, pixel_std=std,
            architecture=arch.to_dict(), **options.provenance(), output=kind, data_config=config,
            dynamic_batch=options.dynamic_batch, input_name=recipe.input_name, output_name=kind,
        )
        return kind, config, metadata

    def image_preprocessor(self, metadata: dict[str, Any]):
        """timm's own eval transform (resize, center crop, normalize), from the data config in the metadata."""
        from vitdeploy.runtime.processing.preprocess import TimmPreprocessor

        return TimmPreprocessor(metadata["data_config"])

    calibration_preprocessor = image_preprocessor


class TimmVit(TimmFamily):
    name = "timm_vit"
    title = 'ViTs'
    role = "timm Vision Transformer: an image -> class logits or features"
    eager_loader = "vitdeploy.models.timm_vit:load_timm_vit"

    def export(self, recipe: Recipe, arch: Any, model: nn.Module, output: str | Path, options: ExportOptions,
               echo: Echo) -> ExportResult:
        from vitdeploy.onnx_export.timm_vit import export_timm_vit

        size = options.input_size or int(model.patch_embed.img_size[0])
        kind, _, metadata = self.export_metadata(recipe, arch, model, size, options, echo)
        return export_timm_vit(model, output, metadata=metadata, input_size=size, output=kind,  # type: ignore[arg-type]
                               batch=options.batch, dynamic_batch=options.dynamic_batch,
                               opset=options.opset or recipe.opset, input_name=recipe.input_name, output_name=kind)

    def eager_reference(self, metadata: dict[str, Any], checkpoint: str | None) -> nn.Module:
        """The timm model at the export's size (timm's ``set_input_size``), through the exported output's method."""
        seed = reference_seed(metadata, checkpoint)  # refuses a wrong checkpoint before torch is imported

        from vitdeploy.models.timm_vit import TimmOutputReference, TimmVitArch, load_timm_vit
        from vitdeploy.rewrites.timm_vit import timm_reference_at_size

        model = load_timm_vit(TimmVitArch.from_dict(metadata["architecture"]), checkpoint, random_seed=seed)
        ref = timm_reference_at_size(model, int(metadata["input_size"][0]))
        return TimmOutputReference(ref, str(metadata.get("output", "logits"))).eval()


def timm_mean_std(recipe: Recipe, config: dict[str, Any]) -> tuple[list[float], list[float]]:
    """The recipe's [preprocessing] (0..255 scale) if it has one, else timm's data config scaled to 0..255."""
    import tomllib

    has_table = recipe.source is not None and "preprocessing" in tomllib.loads(recipe.source.read_text())
    if has_table:
        return list(recipe.pixel_mean), list(recipe.pixel_std)
    return [255.0 * m for m in config["mean"]], [255.0 * s for s in config["std"]]


FAMILY = TimmVit()
