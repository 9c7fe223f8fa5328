"""SAM 2 / 2.1's prompt encoder + mask decoder (the official ``sam2`` package): SAM 1's prompts plus the encoder's
two high-resolution feature maps, every mask token, the IoU and object-score predictions and the mask tokens."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from vitdeploy.errors import InputError, RecipeError
from vitdeploy.families.base import Echo, ExportOptions, recipe_section
from vitdeploy.families.sam2_base import Sam2Family

if TYPE_CHECKING:
    import numpy as np
    from torch import nn

    from vitdeploy.models.recipes import Recipe
    from vitdeploy.onnx_export.exporter import ExportResult
    from vitdeploy.runtime.processing.input_sets import InputSet

POINTS_DIM = "num_points"
#: Points in the export example: not 0 or 1, which torch.export would specialise the dimension to.
EXAMPLE_POINTS = 3


class Sam2MaskDecoder(Sam2Family):
    name = "sam2_mask_decoder"
    recipe_suffix = '_decoder'
    title = 'SAM 2 decoders'
    role = ("SAM 2 prompt encoder + mask decoder: features and clicks/box/mask -> masks, IoU and object scores, output "
            "tokens (image and video)")
    layernorm2d_forms = ("matmul", "native")  # the mask upscaler's
    required_metadata = ("architecture", "input_size", "image_embedding_size", "mask_input_size", "embed_dim")

    def check_export(self, recipe: Recipe, options: ExportOptions) -> None:
        if options.batch != 1 or options.dynamic_batch:
            raise InputError("--batch/--dynamic-batch do not apply to the mask decoder: it takes one prompt set per call "
                             "(its dynamic axis is the number of points)")
        if options.input_size:
            raise InputError("--input-size does not apply to SAM 2's decoder: it is built for the model's image size "
                             "(set ++model.image_size in the recipe's [architecture] overrides)")
        self.max_points(recipe)

    def max_points(self, recipe: Recipe) -> tuple[int, int]:
        table = recipe_section(recipe, "decoder", {"max_points", "opt_points"})
        max_points, opt_points = int(table.get("max_points", 32)), int(table.get("opt_points", 2))
        if not 1 <= opt_points <= max_points:
            raise RecipeError(f"recipe '{recipe.name}': need 1 <= opt_points <= max_points, got {opt_points} and {max_points}")
        return max_points, opt_points

    def export(self, recipe: Recipe, arch: Any, model: nn.Module, output: str | Path, options: ExportOptions,
               echo: Echo) -> ExportResult:
        import torch

        from vitdeploy.metadata import artifact_metadata
        from vitdeploy.onnx_export.exporter import export_onnx
        from vitdeploy.rewrites.sam2_decoder import INPUT_NAMES, OUTPUT_NAMES, rewrite_sam2_decoder

        max_points, opt_points = self.max_points(recipe)
        layernorm2d = options.layernorm2d or self.layernorm2d_forms[0]
        size, grid = int(model.image_size), int(model.sam_image_embedding_size)
        decoder = model.sam_mask_decoder
        channels, tokens = int(decoder.transformer_dim), int(decoder.num_mask_tokens)
        echo(f"exporting {recipe.name} ({recipe.variant}) for a {size}x{size} encoder ({grid}x{grid} embeddings), "
             f"{tokens} mask tokens, 1..{max_points} points")

        def profile(*tail: int) -> dict[str, list[int]]:
            return {"min": [1, 1, *tail], "opt": [1, opt_points, *tail], "max": [1, max_points, *tail]}

        metadata = artifact_metadata(
            family=self.name, variant=recipe.variant, input_size=size, pixel_mean=recipe.pixel_mean,
            pixel_std=recipe.pixel_std, architecture=arch.to_dict(), **options.provenance(),
            image_embedding_size=[grid, grid], embed_dim=channels, mask_input_size=[4 * grid, 4 * grid],
            high_res_channels=[channels // 8, channels // 4], num_mask_tokens=tokens,
            mask_output_indices=list(range(tokens)), input_names=list(INPUT_NAMES), output_names=list(OUTPUT_NAMES),
            dynamic_axes={"point_coords": {"1": POINTS_DIM}, "point_labels": {"1": POINTS_DIM}},
            shape_profile={"point_coords": profile(2), "point_labels": profile()},
            point_labels={"0": "background", "1": "foreground", "2": "box top-left", "3": "box bottom-right"},
            dynamic_multimask_via_stability=bool(decoder.dynamic_multimask_via_stability),
            dynamic_multimask_stability_delta=float(decoder.dynamic_multimask_stability_delta),
            dynamic_multimask_stability_thresh=float(decoder.dynamic_multimask_stability_thresh),
            pred_obj_scores=bool(decoder.pred_obj_scores), layernorm2d=layernorm2d,
        )
        gen = torch.Generator().manual_seed(0)
        example = (torch.randn(1, channels, grid, grid, generator=gen),
                   torch.randn(1, channels // 8, 4 * grid, 4 * grid, generator=gen),
                   torch.randn(1, channels // 4, 2 * grid, 2 * grid, generator=gen),
                   torch.rand(1, EXAMPLE_POINTS, 2, generator=gen) * size, torch.tensor([[2.0, 3.0, 1.0]]),
                   torch.randn(1, 1, 4 * grid, 4 * grid, generator=gen), torch.ones(1))
        return export_onnx(rewrite_sam2_decoder(model, layernorm2d), example, output, input_names=list(INPUT_NAMES),
                           output_names=list(OUTPUT_NAMES), metadata=metadata, opset=options.opset or recipe.opset,
                           dynamic_axes={"point_coords": {1: POINTS_DIM}, "point_labels": {1: POINTS_DIM}})

    def eager_reference(self, metadata: dict[str, Any], checkpoint: str | None) -> nn.Module:
        """The official prompt encoder and mask decoder, called as ``SAM2ImagePredictor._predict`` calls them."""
        from vitdeploy.rewrites.sam2_decoder import OfficialSam2DecoderReference

        return OfficialSam2DecoderReference(self.reference_model(metadata, checkpoint)).eval()

    def random_input_sets(self, metadata: dict[str, Any], input_names: list[str], input_shapes: dict[str, list[Any]],
                          count: int, seed: int = 0) -> list[InputSet]:
        """Features plus prompts as ``SAM2ImagePredictor`` lays them out: two clicks without a mask prompt, and a
        box and a click with one, alternately."""
        import numpy as np

        from vitdeploy.runtime.processing.input_sets import InputSet

        size, grid, channels = int(metadata["input_size"][0]), int(metadata["image_embedding_size"][0]), int(metadata["embed_dim"])
        sets = []
        for i in range(count):
            rng = np.random.default_rng(seed + i)
            feeds = {"image_embed": rng.standard_normal((1, channels, grid, grid)),
                     "high_res_feats_0": rng.standard_normal((1, channels // 8, 4 * grid, 4 * grid)),
                     "high_res_feats_1": rng.standard_normal((1, channels // 4, 2 * grid, 2 * grid)),
                     "mask_input": 4.0 * rng.standard_normal((1, 1, 4 * grid, 4 * grid))}
            if i % 2 == 0:
                coords, labels, has_mask, what = rng.uniform(0, size, (2, 2)), [1.0, 0.0], 0.0, "2 clicks, no mask"
            else:
                x0, y0 = rng.uniform(0, size / 2, 2)
                x1, y1 = x0 + rng.uniform(1, size / 2), y0 + rng.uniform(1, size / 2)
                coords = np.concatenate([[[x0, y0], [x1, y1]], rng.uniform(0, size, (1, 2))])
                labels, has_mask, what = [2.0, 3.0, 1.0], 1.0, "box + 1 click, mask prompt"
            feeds |= {"point_coords": np.asarray(coords)[None], "point_labels": np.asarray([labels]),
                      "has_mask_input": np.array([has_mask])}
            sets.append(InputSet(f"prompt{i}", {k: v.astype(np.float32) for k, v in feeds.items()}, f"seed {seed + i}: {what}"))
        return sets

    def template_feeds(self, metadata: dict[str, Any], template: dict[str, list[Any]],
                       seed: int = 0) -> dict[str, np.ndarray] | None:
        return self.random_input_sets(metadata, [], {}, 1, seed)[0].feeds

    def image_preprocessor(self, metadata: dict[str, Any]):
        raise InputError("the mask decoder takes image features and prompts, not images: drop --images "
                         "(validate the encoder with --images instead)")


FAMILY = Sam2MaskDecoder()
