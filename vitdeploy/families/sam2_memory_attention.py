"""SAM 2 / 2.1's memory attention (the official ``sam2`` package): the current frame's features conditioned on the
memory bank (recent and prompted frames, object pointers), the rotary embedding in real arithmetic, the bank as two
inputs of dynamic length with masks (:mod:`vitdeploy.rewrites.sam2_memory`). The file also records the settings the
video runtime tracks with (``tracker``)."""

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

INPUT_NAMES = ("image_embed", "memory_features", "memory_tpos", "memory_mask", "pointer_tokens", "pointer_presence",
               "pointer_tpos", "pointer_mask")
OUTPUT_NAMES = ("pix_feat_with_mem",)
FRAMES_DIM, POINTERS_DIM = "frames", "pointers"
DYNAMIC_AXES = {"memory_features": {1: FRAMES_DIM}, "memory_tpos": {1: FRAMES_DIM}, "memory_mask": {1: FRAMES_DIM},
                "pointer_tokens": {1: POINTERS_DIM}, "pointer_presence": {1: POINTERS_DIM},
                "pointer_tpos": {1: POINTERS_DIM}, "pointer_mask": {1: POINTERS_DIM}}
#: Prompted (conditioning) frames a bank of the default size holds beside the ``num_maskmem - 1`` most recent frames.
DEFAULT_COND_FRAMES = 4


class Sam2MemoryAttention(Sam2Family):
    name = "sam2_memory_attention"
    recipe_suffix = '_memory_attention'
    title = 'SAM 2 memory attentions'
    role = ("SAM 2 memory attention (video): a frame's features conditioned on the memory bank -> the decoder's input; "
            "carries the tracker's settings")
    required_metadata = ("architecture", "input_size", "image_embedding_size", "frame_slots", "pointer_slots", "tracker")

    def check_export(self, recipe: Recipe, options: ExportOptions) -> None:
        if options.batch != 1 or options.dynamic_batch or options.input_size:
            raise InputError("--batch/--dynamic-batch/--input-size do not apply to memory attention: it is built for the "
                             "model's image size, one object at a time")
        self.slots(recipe, None)

    def slots(self, recipe: Recipe, model: nn.Module | None) -> tuple[int, int]:
        """(frame slots, pointer slots): the most frames and pointers a fixed-size bank holds (a TensorRT profile's
        maximum; ONNX Runtime and OpenVINO take any number). The recipe's ``[memory]``, by default
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
        from vitdeploy.rewrites.sam2_memory import ExportableMemoryAttention, tracker_settings

        frames, pointers = self.slots(recipe, model)
        grid, mem, channels = int(model.sam_image_embedding_size), int(model.mem_dim), int(model.hidden_dim)
        exportable = ExportableMemoryAttention(model, (grid, grid)).eval()
        per_pointer = exportable.tokens_per_pointer
        echo(f"exporting {recipe.name} ({recipe.variant}): {len(exportable.layers)} layer(s); a bank of up to {frames} "
             f"frames x {grid * grid} tokens and {pointers} object pointers x {per_pointer} tokens")
        recent = int(model.num_maskmem) - 1

        def profile(slots: int, opt: int, *tail: int) -> dict[str, list[int]]:
            return {"min": [1, 1, *tail], "opt": [1, min(opt, slots), *tail], "max": [1, slots, *tail]}

        shape_profile = {"memory_features": profile(frames, recent + 1, mem, grid, grid),
                         "memory_tpos": profile(frames, recent + 1), "memory_mask": profile(frames, recent + 1),
                         **{name: profile(pointers, pointers, *([channels] if name == "pointer_tokens" else []))
                            for name in INPUT_NAMES if name.startswith("pointer_")}}
        metadata = artifact_metadata(
            family=self.name, variant=recipe.variant, input_size=int(model.image_size), pixel_mean=recipe.pixel_mean,
            pixel_std=recipe.pixel_std, architecture=arch.to_dict(), **options.provenance(),
            image_embedding_size=[grid, grid], embed_dim=channels, mem_dim=mem, frame_slots=frames,
            pointer_slots=pointers, tokens_per_pointer=per_pointer, tracker=tracker_settings(model),
            memory_layout=("memory_features (1, F, mem_dim, h, w): F frames' maskmem_features, memory_tpos their official "
                           "t_pos (0 prompted, 1..num_maskmem-1 recent); pointer_tokens (1, P, C): SAM output tokens, "
                           "pointer_presence their lambda_is_obj_appearing, pointer_tpos the signed frame distance / "
                           "(max_obj_ptrs_in_encoder - 1); masks 1 where in use"),
            input_names=list(INPUT_NAMES), output_names=list(OUTPUT_NAMES),
            dynamic_axes={name: {str(a): d for a, d in axes.items()} for name, axes in DYNAMIC_AXES.items()},
            shape_profile=shape_profile,
        )
        gen = torch.Generator().manual_seed(0)
        example = (torch.randn(1, channels, grid, grid, generator=gen), torch.randn(1, 2, mem, grid, grid, generator=gen),
                   torch.tensor([[0, recent]]), torch.ones(1, 2), torch.randn(1, 3, channels, generator=gen),
                   torch.tensor([[1.0, 0.0, 1.0]]), torch.tensor([[0.0, 0.25, -0.5]]), torch.tensor([[1.0, 1.0, 0.0]]))
        return export_onnx(exportable, example, output, input_names=list(INPUT_NAMES), output_names=list(OUTPUT_NAMES),
                           metadata=metadata, opset=options.opset or recipe.opset, dynamic_axes=DYNAMIC_AXES)

    def eager_reference(self, metadata: dict[str, Any], checkpoint: str | None) -> nn.Module:
        from vitdeploy.rewrites.sam2_memory import OfficialMemoryAttentionReference

        grid = int(metadata["image_embedding_size"][0])
        return OfficialMemoryAttentionReference(self.reference_model(metadata, checkpoint), (grid, grid)).eval()

    def random_input_sets(self, metadata: dict[str, Any], input_names: list[str], input_shapes: dict[str, list[Any]],
                          count: int, seed: int = 0) -> list[InputSet]:
        """A bank as tracking builds one: a prompted frame and some recent ones in a slot order of their own, some
        present and absent object pointers at signed distances, and a masked slot of each kind."""
        frames, pointers = min(int(metadata["frame_slots"]), 4), min(int(metadata["pointer_slots"]), 5)
        return self._banks(metadata, frames, pointers, count, seed)

    def probe_feeds(self, metadata: dict[str, Any], input_names: list[str],
                    input_shapes: dict[str, list[Any]]) -> dict[str, Any]:
        """The bank of one tracked object once it is full (from about the 16th tracked frame on): the prompted frame
        and ``num_maskmem - 1`` recent ones, ``pointer_slots`` pointers. The cost grows with the bank, and so can the
        ranking: hiera-t at 1024 on an AMD EPYC Zen 4 (2 threads), OpenVINO BF16 ran a 4-frame, 5-pointer bank in
        1.5-1.9 s against 2.6-2.8 s on ONNX Runtime, and the full bank (7 frames, 16 pointers) in 3.4-4.5 s against
        3.9-4.0 s."""
        frames = min(int(metadata["frame_slots"]), int(metadata["tracker"]["num_maskmem"]))
        return self._banks(metadata, frames, int(metadata["pointer_slots"]), 1, 0)[0].feeds

    def _banks(self, metadata: dict[str, Any], frames: int, pointers: int, count: int, seed: int) -> list[InputSet]:
        import numpy as np

        from vitdeploy.runtime.processing.input_sets import InputSet

        grid, channels, mem = int(metadata["image_embedding_size"][0]), int(metadata["embed_dim"]), int(metadata["mem_dim"])
        recent = int(metadata["tracker"]["num_maskmem"]) - 1
        sets = []
        for i in range(count):
            rng = np.random.default_rng(seed + i)
            tpos = np.array([[0, *rng.integers(1, recent + 1, frames - 1)]], np.int64)
            memory_mask = np.ones((1, frames), np.float32)
            memory_mask[0, -1] = 0.0 if frames > 1 else 1.0
            pointer_mask = np.ones((1, pointers), np.float32)
            pointer_mask[0, -1] = 0.0 if pointers > 1 else 1.0
            feeds = {"image_embed": rng.standard_normal((1, channels, grid, grid)).astype(np.float32),
                     "memory_features": rng.standard_normal((1, frames, mem, grid, grid)).astype(np.float32),
                     "memory_tpos": tpos, "memory_mask": memory_mask,
                     "pointer_tokens": rng.standard_normal((1, pointers, channels)).astype(np.float32),
                     "pointer_presence": (rng.random((1, pointers)) > 0.3).astype(np.float32),
                     "pointer_tpos": rng.uniform(-1.0, 1.0, (1, pointers)).astype(np.float32),
                     "pointer_mask": pointer_mask}
            sets.append(InputSet(f"bank{i}", feeds, f"seed {seed + i}: {frames} frame(s) (t_pos {tpos[0].tolist()}), "
                                                    f"{pointers} pointer(s), the last of each masked"))
        return sets

    def template_feeds(self, metadata: dict[str, Any], template: dict[str, list[Any]], seed: int = 0):
        return self.random_input_sets(metadata, [], {}, 1, seed)[0].feeds


FAMILY = Sam2MemoryAttention()
