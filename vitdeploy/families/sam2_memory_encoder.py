"""SAM 2 / 2.1's memory encoder (the official ``sam2`` package): a frame's features and its predicted mask (the
decoder's low-resolution logits, upsampled in the graph) -> the memory the next frames attend to
(``SAM2Base._encode_new_memory``; :mod:`vitdeploy.rewrites.sam2_memory`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from vitdeploy.errors import InputError
from vitdeploy.families.base import Echo, ExportOptions
from vitdeploy.families.sam2_base import Sam2Family

if TYPE_CHECKING:
    from torch import nn

    from vitdeploy.models.recipes import Recipe
    from vitdeploy.onnx_export.exporter import ExportResult
    from vitdeploy.runtime.processing.input_sets import InputSet

INPUT_NAMES = ("image_embed", "pred_masks", "object_score_logits", "binarize")
OUTPUT_NAMES = ("maskmem_features", "maskmem_pos_enc")


class Sam2MemoryEncoder(Sam2Family):
    name = "sam2_memory_encoder"
    recipe_suffix = '_memory_encoder'
    title = 'SAM 2 memory encoders'
    role = "SAM 2 memory encoder (video): a frame's features and mask -> the memory later frames attend to"
    required_metadata = ("architecture", "input_size", "image_embedding_size")
    #: Whether ``pred_masks`` may also come at the model's image size (``dynamic_axes`` on its two sides, 4 x grid
    #: to the image size): where the official predictor makes a frame's memories from masks it changed at that size
    #: (SAM 3's tracker, the non-overlap of objects); the graph's own resize is then the identity.
    full_size_masks = False

    def check_export(self, recipe: Recipe, options: ExportOptions) -> None:
        if options.batch != 1 or options.dynamic_batch or options.input_size:
            raise InputError("--batch/--dynamic-batch/--input-size do not apply to the memory encoder: it is built for "
                             "the model's image size, one object at a time")

    def export(self, recipe: Recipe, arch: Any, model: nn.Module, output: str | Path, options: ExportOptions,
               echo: Echo) -> ExportResult:
        import torch

        from vitdeploy.metadata import artifact_metadata
        from vitdeploy.onnx_export.exporter import export_onnx

        size, grid = int(model.image_size), int(model.sam_image_embedding_size)
        echo(f"exporting {recipe.name} ({recipe.variant}): {4 * grid}x{4 * grid} mask logits (upsampled to {size}x{size}) "
             f"+ {grid}x{grid} features -> memory")
        metadata = artifact_metadata(
            family=self.name, variant=recipe.variant, input_size=size, pixel_mean=recipe.pixel_mean,
            pixel_std=recipe.pixel_std, architecture=arch.to_dict(), **options.provenance(),
            image_embedding_size=[grid, grid], mask_size=[4 * grid, 4 * grid], embed_dim=int(model.hidden_dim),
            mem_dim=int(model.mem_dim),
            binarize_mask_from_pts_for_mem_enc=bool(model.binarize_mask_from_pts_for_mem_enc),
            sigmoid_scale_for_mem_enc=float(model.sigmoid_scale_for_mem_enc),
            sigmoid_bias_for_mem_enc=float(model.sigmoid_bias_for_mem_enc),
            input_names=list(INPUT_NAMES), output_names=list(OUTPUT_NAMES), **self._mask_axes(grid, size),
        )
        gen = torch.Generator().manual_seed(0)
        example = (torch.randn(1, int(model.hidden_dim), grid, grid, generator=gen),
                   torch.randn(1, 1, 4 * grid, 4 * grid, generator=gen), torch.tensor([[0.5]]), torch.zeros(1))
        axes = {"pred_masks": {2: "mask_height", 3: "mask_width"}} if self.full_size_masks else None
        return export_onnx(self.exportable(model).eval(), example, output, input_names=list(INPUT_NAMES),
                           output_names=list(OUTPUT_NAMES), metadata=metadata, opset=options.opset or recipe.opset,
                           dynamic_axes=axes)

    def _mask_axes(self, grid: int, size: int) -> dict[str, Any]:
        """The metadata of a mask input that may come at either size (:attr:`full_size_masks`)."""
        if not self.full_size_masks:
            return {}
        return {"dynamic_axes": {"pred_masks": {"2": "mask_height", "3": "mask_width"}},
                "shape_profile": {"pred_masks": {"min": [1, 1, 4 * grid, 4 * grid], "opt": [1, 1, 4 * grid, 4 * grid],
                                                 "max": [1, 1, size, size]}}}

    def exportable(self, model: Any) -> nn.Module:
        """The graph's module for the official model :meth:`load_eager` gave."""
        from vitdeploy.rewrites.sam2_memory import ExportableMemoryEncoder

        return ExportableMemoryEncoder(model)

    def eager_reference(self, metadata: dict[str, Any], checkpoint: str | None) -> nn.Module:
        from vitdeploy.rewrites.sam2_memory import OfficialMemoryEncoderReference

        return OfficialMemoryEncoderReference(self.reference_model(metadata, checkpoint)).eval()

    def random_input_sets(self, metadata: dict[str, Any], input_names: list[str], input_shapes: dict[str, list[Any]],
                          count: int, seed: int = 0) -> list[InputSet]:
        """Features and mask logits; alternately a present object from a sigmoid mask, an absent one from clicks."""
        import numpy as np

        from vitdeploy.runtime.processing.input_sets import InputSet

        grid, channels = int(metadata["image_embedding_size"][0]), int(metadata["embed_dim"])
        sets = []
        for i in range(count):
            rng = np.random.default_rng(seed + i)
            present = i % 2 == 0
            feeds = {"image_embed": rng.standard_normal((1, channels, grid, grid)).astype(np.float32),
                     "pred_masks": (4.0 * rng.standard_normal((1, 1, 4 * grid, 4 * grid))).astype(np.float32),
                     "object_score_logits": np.array([[2.0 if present else -2.0]], np.float32),
                     "binarize": np.array([0.0 if present else 1.0], np.float32)}
            sets.append(InputSet(f"frame{i}", feeds, f"seed {seed + i}: object {'present, sigmoid' if present else 'absent, binarized'}"))
        return sets

    def template_feeds(self, metadata: dict[str, Any], template: dict[str, list[Any]], seed: int = 0):
        return self.random_input_sets(metadata, [], {}, 1, seed)[0].feeds


FAMILY = Sam2MemoryEncoder()
