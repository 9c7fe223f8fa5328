"""SAM 3's text encoder (the official ``sam3`` package's ``VETextEncoder``: CLIP's text transformer, causal, context
32): token ids -> the text memory the detector attends to and the token embeddings."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from vitdeploy.errors import InputError
from vitdeploy.families.base import Echo, ExportOptions, ModelFamily, recipe_section, reference_seed

if TYPE_CHECKING:
    import numpy as np
    from torch import nn

    from vitdeploy.models.recipes import Recipe
    from vitdeploy.onnx_export.exporter import ExportResult
    from vitdeploy.runtime.processing.input_sets import InputSet

#: CLIP's special ids (``<start_of_text>``, ``<end_of_text>``): the last two of its 49408.
START_ID, END_ID = 49406, 49407


class Sam3TextEncoderFamily(ModelFamily):
    name = "sam3_text_encoder"
    eager_loader = "vitdeploy.models.sam3_text_encoder:load_sam3_text"
    recipe_suffix = "_text"
    title = "SAM 3 text encoders"
    verified_on_cuda = (
        (("generic", "fp32"), "H200, onnxruntime-gpu 1.31.1, 2026-11-28: full size, relative L2 1.0e-6 vs the official "
                              "model with TF32 off"),
    )
    role = ("SAM 3 text encoder: a text prompt's CLIP token ids -> the text memory the detector attends to and the "
            "token embeddings (VETextEncoder)")
    runtime_metadata = ("context_length",)
    required_metadata = ("architecture", "context_length")

    def probe_scopes(self, metadata: dict[str, Any]) -> tuple[str, ...]:
        """One residual attention block (the 24 of the full model are alike): the whole 1.4 GB file, loaded once per
        candidate, made the probe 33.6 s of the model's first use on the Xeon with AMX."""
        return ("blocks.*",)

    def architecture_class(self) -> type:
        from vitdeploy.models.sam3_text_encoder import Sam3TextArch

        return Sam3TextArch

    def check_export(self, recipe: Recipe, options: ExportOptions) -> None:
        self.architecture(recipe.architecture)
        if options.input_size:
            raise InputError("--input-size does not apply to a text encoder: its input is token ids of the context length")

    def export(self, recipe: Recipe, arch: Any, model: nn.Module, output: str | Path, options: ExportOptions,
               echo: Echo) -> ExportResult:
        import torch

        from vitdeploy.metadata import artifact_metadata
        from vitdeploy.onnx_export.exporter import export_onnx
        from vitdeploy.rewrites.sam3_text_encoder import OUTPUT_NAMES, rewrite_sam3_text_encoder

        input_size = int(recipe_section(recipe, "sam3", {"input_size"}).get("input_size", 1008))  # the model's images
        echo(f"exporting {recipe.name} ({recipe.variant}): tokens (batch, {arch.context_length}) -> {', '.join(OUTPUT_NAMES)}"
             + (" with a dynamic batch" if options.dynamic_batch else ""))
        metadata = artifact_metadata(
            family=self.name, variant=recipe.variant, input_size=input_size, pixel_mean=recipe.pixel_mean,
            pixel_std=recipe.pixel_std, architecture=arch.to_dict(), **options.provenance(),
            input_name="tokens", output_names=list(OUTPUT_NAMES), context_length=arch.context_length,
            tokenizer="clip_bpe_simple_vocab_16e6", dynamic_batch=options.dynamic_batch,
        )
        example = torch.from_numpy(self.token_batch(arch.context_length, options.batch, seed=0))
        return export_onnx(rewrite_sam3_text_encoder(model), (example,), output, input_names=["tokens"],
                           output_names=list(OUTPUT_NAMES), metadata=metadata, opset=options.opset or recipe.opset,
                           dynamic_batch=options.dynamic_batch)

    def eager_reference(self, metadata: dict[str, Any], checkpoint: str | None) -> nn.Module:
        """The official ``VETextEncoder.forward`` with the export's weights, its tokenizer given the ids."""
        seed = reference_seed(metadata, checkpoint)

        from vitdeploy.models.sam3_text_encoder import load_sam3_text
        from vitdeploy.rewrites.sam3_text_encoder import Sam3TextEncoder

        return Sam3TextEncoder(load_sam3_text(self.architecture(metadata["architecture"]), checkpoint, random_seed=seed)).eval()

    @staticmethod
    def token_batch(context_length: int, batch: int, seed: int = 0) -> np.ndarray:
        """Token ids as the tokenizer frames them: start, 1 to L-2 word ids, end, zero padding (one row per prompt;
        lengths differ, so some rows pad and one fills the context)."""
        import numpy as np

        rng = np.random.default_rng(seed)
        out = np.zeros((batch, context_length), np.int64)
        for row in range(batch):
            words = context_length - 2 if row == batch - 1 else int(rng.integers(1, context_length - 1))
            out[row, :words + 2] = [START_ID, *rng.integers(1, START_ID, words), END_ID]
        return out

    def random_input_sets(self, metadata: dict[str, Any], input_names: list[str], input_shapes: dict[str, list[Any]],
                          count: int, seed: int = 0) -> list[InputSet]:
        from vitdeploy.runtime.processing.input_sets import InputSet

        shape = input_shapes[input_names[0]]
        batch = shape[0] if isinstance(shape[0], int) else 2
        return [InputSet(f"random{i}", {input_names[0]: self.token_batch(int(shape[1]), batch, seed + i)},
                         f"seeded token ids (seed {seed + i}): start, words, end, padding")
                for i in range(count)]

    def template_feeds(self, metadata: dict[str, Any], template: dict[str, list[Any]],
                       seed: int = 0) -> dict[str, np.ndarray] | None:
        name, shape = next(iter(template.items()))
        return {name: self.token_batch(int(shape[1]), int(shape[0]) if isinstance(shape[0], int) else 1, seed)}

    def image_preprocessor(self, metadata: dict[str, Any]):
        raise InputError("a SAM 3 text encoder takes token ids, not images: drop --images "
                         "(vitdeploy.runtime.processing.clip_tokenizer.ClipTokenizer makes them from text)")


FAMILY = Sam3TextEncoderFamily()
