"""timm's Hiera (``hiera_*``: mask-unit attention, Unroll/Reroll) and SAM 2's Hiera image trunk (``sam2_hiera_*``:
timm's ``HieraDet``, windowed and global attention, q-pooling): hierarchical ViTs with timm's preprocessing."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from vitdeploy.errors import InputError
from vitdeploy.families.base import Echo, ExportOptions, reference_seed
from vitdeploy.families.timm_vit import TimmFamily
from vitdeploy.sizes import require_patch_multiple

if TYPE_CHECKING:
    from torch import nn

    from vitdeploy.models.recipes import Recipe
    from vitdeploy.onnx_export.exporter import ExportResult


class TimmHiera(TimmFamily):
    name = "timm_hiera"
    title = 'Hiera models'
    role = "timm Hiera: an image -> class logits or multi-scale features"
    eager_loader = "vitdeploy.models.timm_hiera:load_timm_hiera"

    def export(self, recipe: Recipe, arch: Any, model: nn.Module, output: str | Path, options: ExportOptions,
               echo: Echo) -> ExportResult:
        import torch

        from vitdeploy.onnx_export.exporter import export_onnx
        from vitdeploy.rewrites.timm_hiera import rewrite_timm_hiera

        size = hiera_export_size(model, options.input_size)
        kind, config, metadata = self.export_metadata(recipe, arch, model, size, options, echo,
                                                      what=f", timm {type(model).__name__}")
        in_chans = int(config["input_size"][0])
        example = torch.randn(options.batch, in_chans, size, size, generator=torch.Generator().manual_seed(0))
        return export_onnx(rewrite_timm_hiera(model, kind), (example,), output, input_names=[recipe.input_name],
                           output_names=[kind], metadata=metadata, opset=options.opset or recipe.opset,
                           dynamic_batch=options.dynamic_batch)

    def eager_reference(self, metadata: dict[str, Any], checkpoint: str | None) -> nn.Module:
        """timm's own model (fused attention as timm ships it) through the exported output's method."""
        seed = reference_seed(metadata, checkpoint)  # refuses a wrong checkpoint before torch is imported

        from vitdeploy.models.timm_hiera import load_timm_hiera
        from vitdeploy.models.timm_vit import TimmOutputReference, TimmVitArch

        model = load_timm_hiera(TimmVitArch.from_dict(metadata["architecture"]), checkpoint, random_seed=seed)
        return TimmOutputReference(model, str(metadata.get("output", "logits"))).eval()


def hiera_export_size(model: nn.Module, requested: int | None) -> int:
    """The side to export at: the built size, or ``requested``. Hiera's position embedding is built for one
    size; HieraDet resizes its own to the token grid, so any multiple of its total stride works (windows
    are padded as SAM 2 pads them)."""
    from vitdeploy.models.timm_hiera import hiera_input_size

    built = hiera_input_size(model)
    if requested is None or requested == built:
        return built
    if not hasattr(model, "global_pos_size"):  # timm's Hiera: a fixed (1, tokens, C) position embedding
        raise InputError(f"--input-size {requested}: this Hiera's position embedding is built for {built}x{built}; "
                         "drop --input-size, or set [architecture] img_size in the recipe (and a checkpoint of that size)")
    stride = max(int(info["reduction"]) for info in model.feature_info)
    require_patch_multiple(requested, stride, unit="total stride")
    return requested


FAMILY = TimmHiera()
