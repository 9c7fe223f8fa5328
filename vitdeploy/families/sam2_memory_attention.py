"""SAM 2 / 2.1's memory attention (the official ``sam2`` package): the current frame's features conditioned on the
memory bank, the rotary embedding in real arithmetic, the bank as fixed slots with a mask
(:mod:`vitdeploy.rewrites.sam2_memory`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from vitdeploy.errors import InputError, RecipeError
from vitdeploy.families.base import Echo, ExportOptions, recipe_section
from vitdeploy.families.sam2_base import Sam2Family

if TYPE_CHECKING:
    from torch import nn

    from vitdeploy.models.recipes import Recipe
    from vitdeploy.onnx_export.exporter import ExportResult
    from vitdeploy.runtime.processing.input_sets import InputSet

INPUT_NAMES = ("image_embed", "memory", "memory_pos", "memory_mask")
OUTPUT_NAMES = ("pix_feat_with_mem",)
#: Conditioning (prompted) frames the bank holds beside the ``num_maskmem - 1`` most recent frames, by default.
DEFAULT_COND_FRAMES = 4


class Sam2MemoryAttention(Sam2Family):
    name = "sam2_memory_attention"
    required_metadata = ("architecture", "input_size", "image_embedding_size", "frame_slots", "pointer_slots")

    def check_export(self, recipe: Recipe, options: ExportOptions) -> None:
        if options.batch != 1 or options.dynamic_batch or options.input_size:
            raise InputError("--batch/--dynamic-batch/--input-size do not apply to memory attention: it is built for the "
                             "model's image size, one object at a time")
        self.slots(recipe, None)

    def slots(self, recipe: Recipe, model: nn.Module | None) -> tuple[int, int]:
        """(frame slots, pointer slots): the recipe's ``[memory]``, by default the official model's bank:
        ``num_maskmem - 1`` recent frames plus 4 prompted ones, and ``max_obj_ptrs_in_encoder`` pointers."""
        table = recipe_section(recipe, "memory", {"frame_slots", "pointer_slots"})
        frames = table.get("frame_slots", None if model is None else int(model.num_maskmem) - 1 + DEFAULT_COND_FRAMES)
        pointers = table.get("pointer_slots", None if model is None else int(model.max_obj_ptrs_in_encoder))
        for name, value in (("frame_slots", frames), ("pointer_slots", pointers)):
            if value is not None and int(value) < 1:
                raise RecipeError(f"recipe '{recipe.name}': [memory] {name} must be at least 1, got {value}")
        return (int(frames) if frames is not None else 0), (int(pointers) if pointers is not None else 0)

    def export(self, recipe: Recipe, arch: Any, model: nn.Module, output: str | Path, options: ExportOptions,
               echo: Echo) -> ExportResult:
        import torch

        from vitdeploy.metadata import artifact_metadata
        from vitdeploy.onnx_export.exporter import export_onnx
        from vitdeploy.rewrites.sam2_memory import ExportableMemoryAttention

        frames, pointers = self.slots(recipe, model)
        grid = int(model.sam_image_embedding_size)
        exportable = ExportableMemoryAttention(model, (grid, grid), frames, pointers).eval()
        tokens, per_pointer = exportable.memory_tokens, exportable.tokens_per_pointer
        echo(f"exporting {recipe.name} ({recipe.variant}): {len(exportable.layers)} layer(s), a bank of {frames} frame "
             f"slots x {grid * grid} tokens + {pointers} object pointers x {per_pointer} tokens ({tokens} tokens)")
        metadata = artifact_metadata(
            family=self.name, variant=recipe.variant, input_size=int(model.image_size), pixel_mean=recipe.pixel_mean,
            pixel_std=recipe.pixel_std, architecture=arch.to_dict(), **options.provenance(),
            image_embedding_size=[grid, grid], embed_dim=int(model.hidden_dim), mem_dim=int(model.mem_dim),
            frame_slots=frames, pointer_slots=pointers, tokens_per_pointer=per_pointer, memory_tokens=tokens,
            num_maskmem=int(model.num_maskmem), max_obj_ptrs_in_encoder=int(model.max_obj_ptrs_in_encoder),
            memory_layout=(f"tokens [0, {frames * grid * grid}): {frames} frame slots of {grid}x{grid} tokens (row-major); "
                           f"then {pointers} object pointers of {per_pointer} tokens; memory_mask 1 where in use, whole "
                           "frames and pointers"),
            input_names=list(INPUT_NAMES), output_names=list(OUTPUT_NAMES),
        )
        gen = torch.Generator().manual_seed(0)
        mask = torch.ones(1, tokens)
        mask[0, grid * grid: frames * grid * grid] = 0.0  # one frame in use, every pointer
        example = (torch.randn(1, int(model.hidden_dim), grid, grid, generator=gen),
                   torch.randn(1, tokens, int(model.mem_dim), generator=gen),
                   torch.randn(1, tokens, int(model.mem_dim), generator=gen), mask)
        return export_onnx(exportable, example, output, input_names=list(INPUT_NAMES), output_names=list(OUTPUT_NAMES),
                           metadata=metadata, opset=options.opset or recipe.opset)

    def eager_reference(self, metadata: dict[str, Any], checkpoint: str | None) -> nn.Module:
        from vitdeploy.rewrites.sam2_memory import OfficialMemoryAttentionReference

        model = self.reference_model(metadata, checkpoint)
        grid = int(metadata["image_embedding_size"][0])
        return OfficialMemoryAttentionReference(model, (grid, grid), int(metadata["frame_slots"]),
                                                int(metadata["pointer_slots"])).eval()

    def random_input_sets(self, metadata: dict[str, Any], input_names: list[str], input_shapes: dict[str, list[Any]],
                          count: int, seed: int = 0) -> list[InputSet]:
        """Features and a bank with some frame slots and pointers in use (whole ones), the rest masked."""
        import numpy as np

        from vitdeploy.runtime.processing.input_sets import InputSet

        grid, channels, mem = int(metadata["image_embedding_size"][0]), int(metadata["embed_dim"]), int(metadata["mem_dim"])
        frames, pointers, per = int(metadata["frame_slots"]), int(metadata["pointer_slots"]), int(metadata["tokens_per_pointer"])
        tokens, hw = int(metadata["memory_tokens"]), grid * grid
        sets = []
        for i in range(count):
            rng = np.random.default_rng(seed + i)
            mask = np.zeros((1, tokens), np.float32)
            used_frames = sorted(rng.choice(frames, size=max(1, min(frames, 1 + i % frames)), replace=False))
            for slot in used_frames:
                mask[0, slot * hw:(slot + 1) * hw] = 1.0
            used_pointers = int(rng.integers(0, pointers + 1))
            mask[0, frames * hw: frames * hw + used_pointers * per] = 1.0
            feeds = {"image_embed": rng.standard_normal((1, channels, grid, grid)).astype(np.float32),
                     "memory": rng.standard_normal((1, tokens, mem)).astype(np.float32),
                     "memory_pos": rng.standard_normal((1, tokens, mem)).astype(np.float32), "memory_mask": mask}
            sets.append(InputSet(f"bank{i}", feeds, f"seed {seed + i}: frames {used_frames}, {used_pointers} pointer(s)"))
        return sets

    def template_feeds(self, metadata: dict[str, Any], template: dict[str, list[Any]], seed: int = 0):
        return self.random_input_sets(metadata, [], {}, 1, seed)[0].feeds


FAMILY = Sam2MemoryAttention()
