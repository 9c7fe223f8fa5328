"""SAM 3's detector (the official ``sam3`` package's ``Sam3Image.forward_grounding``): the vision encoder's feature
levels, a text prompt's features and up to ``max_boxes`` exemplar boxes -> every query's score, box and mask logits
and the prompt's presence logit.

The boxes have a fixed capacity (``[detector] max_boxes`` of the recipe, 16 by default): a prompt of fewer boxes pads
the rest of the slots (``box_padding``), which the rewrite proves changes no valid token. A fixed count of slots
instead of a dynamic axis because OpenVINO's CPU plugin (2026.4) fails at run time on the attention over a dynamic
number of prompt tokens (``Check '!utils::is_dynamic_value(dim)' failed at .../set_load_store_scalar.cpp``), and
one shape is one TensorRT profile; the padded slots cost the geometry encoder a few tokens and every prompt
attention 16 keys more than the text's 32."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from vitdeploy.errors import InputError, RecipeError
from vitdeploy.families.base import Echo, ExportOptions, ModelFamily, recipe_section, reference_seed

if TYPE_CHECKING:
    import numpy as np
    from torch import nn

    from vitdeploy.models.recipes import Recipe
    from vitdeploy.onnx_export.exporter import ExportResult
    from vitdeploy.runtime.processing.input_sets import InputSet

#: The text encoder's context (``VETextEncoder``'s): the detector's text inputs have this many tokens.
CONTEXT_LENGTH = 32


class Sam3DetectorFamily(ModelFamily):
    name = "sam3_detector"
    eager_loader = "vitdeploy.models.sam3_detector:load_sam3_detector"
    recipe_suffix = "_detector"
    title = "SAM 3 detectors"
    role = ("SAM 3 detector: the vision encoder's feature levels, a text prompt's features and exemplar boxes -> every "
            "query's score, box and mask logits and the prompt's presence logit (Sam3Image.forward_grounding)")
    runtime_metadata = ("input_size", "image_embedding_size", "embed_dim", "num_queries", "context_length", "max_boxes")
    required_metadata = ("architecture", "input_size", "image_embedding_size", "embed_dim", "num_queries",
                         "context_length", "max_boxes")

    def probe_scopes(self, metadata: dict[str, Any]) -> tuple[str, ...]:
        """The first layer of the fusion encoder (over the 72x72 grid) and of the query decoder: the whole graph,
        warmed up and timed on each candidate, made the probe 21.3 s of the model's first use on the Xeon with AMX; these
        two took 4.1-4.9 s there, with the same choice (OpenVINO f32)."""
        return ("fusion_layers.0", "decoder_layers.0")

    def architecture_class(self) -> type:
        from vitdeploy.models.sam3_detector import Sam3DetectorArch

        return Sam3DetectorArch

    def max_boxes(self, recipe: Recipe) -> int:
        max_boxes = int(recipe_section(recipe, "detector", {"max_boxes"}).get("max_boxes", 16))
        if not 1 <= max_boxes <= 256:
            raise RecipeError(f"recipe '{recipe.name}': [detector] max_boxes must be 1 to 256, got {max_boxes}")
        return max_boxes

    def check_export(self, recipe: Recipe, options: ExportOptions) -> None:
        self.architecture(recipe.architecture)
        self.max_boxes(recipe)
        if options.dynamic_batch:
            raise InputError("--dynamic-batch does not apply to SAM 3's detector: its shapes are fixed (pass --batch N "
                             "for a fixed number of images, one prompt each)")
        if options.input_size:
            raise InputError("--input-size does not apply to SAM 3's detector: it is built for the model's image size "
                             "(set img_size in the recipe's [architecture])")

    def export(self, recipe: Recipe, arch: Any, model: nn.Module, output: str | Path, options: ExportOptions,
               echo: Echo) -> ExportResult:
        import torch

        from vitdeploy.metadata import artifact_metadata
        from vitdeploy.models.sam3_detector import build_position_encoding
        from vitdeploy.onnx_export.exporter import export_onnx
        from vitdeploy.rewrites.sam3_detector import INPUT_NAMES, OUTPUT_NAMES, rewrite_sam3_detector

        max_boxes = self.max_boxes(recipe)
        g, d = arch.grid, arch.d_model
        echo(f"exporting {recipe.name} ({recipe.variant}) for a {arch.img_size}x{arch.img_size} image ({g}x{g} tokens), "
             f"{arch.num_queries} queries, {max_boxes} exemplar box slots")
        metadata = artifact_metadata(
            family=self.name, variant=recipe.variant, input_size=arch.img_size, pixel_mean=recipe.pixel_mean,
            pixel_std=recipe.pixel_std, architecture=arch.to_dict(), **options.provenance(),
            image_embedding_size=[g, g], embed_dim=d, num_queries=arch.num_queries, context_length=CONTEXT_LENGTH,
            max_boxes=max_boxes, mask_size=[4 * g, 4 * g], input_names=list(INPUT_NAMES), output_names=list(OUTPUT_NAMES),
            box_format="cxcywh normalized to [0, 1]", box_labels={"0": "negative", "1": "positive"},
        )
        feeds = self.example_feeds(g, d, options.batch, max_boxes, seed=0)
        example = tuple(torch.from_numpy(feeds[name]) for name in INPUT_NAMES)
        exportable = rewrite_sam3_detector(model, build_position_encoding(d), g)
        return export_onnx(exportable, example, output, input_names=list(INPUT_NAMES), output_names=list(OUTPUT_NAMES),
                           metadata=metadata, opset=options.opset or recipe.opset)

    def eager_reference(self, metadata: dict[str, Any], checkpoint: str | None) -> nn.Module:
        """The official ``Sam3Image.forward_grounding`` with the export's weights, as ``Sam3Processor`` calls it."""
        seed = reference_seed(metadata, checkpoint)

        from vitdeploy.models.sam3_detector import build_position_encoding, load_sam3_detector
        from vitdeploy.rewrites.sam3_detector import Sam3Detector

        arch = self.architecture(metadata["architecture"])
        return Sam3Detector(load_sam3_detector(arch, checkpoint, random_seed=seed),
                            build_position_encoding(arch.d_model)).eval()

    @staticmethod
    def example_feeds(grid: int, channels: int, batch: int, boxes: int, seed: int = 0) -> dict[str, np.ndarray]:
        """Seeded inputs as the vision and text encoders and ``Sam3Processor`` lay them out: standard-normal feature
        levels and text features, each row's text padded after a different length, and per row 1 to ``boxes``
        exemplar boxes inside the image (positive and negative), the rest of the slots padding."""
        import numpy as np

        rng = np.random.default_rng(seed)
        feeds = {f"backbone_fpn_{i}": rng.standard_normal((batch, channels, grid * 4 // 2 ** i, grid * 4 // 2 ** i))
                 for i in range(3)}
        feeds["text_memory"] = rng.standard_normal((batch, CONTEXT_LENGTH, channels))
        lengths = rng.integers(3, CONTEXT_LENGTH + 1, batch)
        feeds["text_padding"] = np.arange(CONTEXT_LENGTH)[None, :] >= lengths[:, None]
        centers = rng.uniform(0.25, 0.75, (batch, boxes, 2))
        sizes = rng.uniform(0.05, 0.45, (batch, boxes, 2))
        feeds["boxes"] = np.concatenate([centers, sizes], axis=-1)
        feeds["box_labels"] = rng.integers(0, 2, (batch, boxes)).astype(np.int64)
        feeds["box_labels"][:, 0] = 1
        valid = rng.integers(1, boxes + 1, batch)
        feeds["box_padding"] = np.arange(boxes)[None, :] >= valid[:, None]
        return {name: value.astype(np.float32) if value.dtype == np.float64 else value for name, value in feeds.items()}

    def random_input_sets(self, metadata: dict[str, Any], input_names: list[str], input_shapes: dict[str, list[Any]],
                          count: int, seed: int = 0) -> list[InputSet]:
        from vitdeploy.runtime.processing.input_sets import InputSet

        g, d = int(metadata["image_embedding_size"][0]), int(metadata["embed_dim"])
        shape = input_shapes.get("backbone_fpn_0", [1])
        batch = shape[0] if isinstance(shape[0], int) else 2
        boxes = int(metadata["max_boxes"])
        return [InputSet(f"prompt{i}", self.example_feeds(g, d, batch, boxes, seed + i),
                         f"seed {seed + i}: random features, a padded text prompt and 1..{boxes} exemplar boxes in "
                         f"{boxes} slots")
                for i in range(count)]

    def template_feeds(self, metadata: dict[str, Any], template: dict[str, list[Any]],
                       seed: int = 0) -> dict[str, np.ndarray] | None:
        batch = template.get("backbone_fpn_0", [1])[0]
        boxes = template.get("boxes", [1, 1])[1]
        g, d = int(metadata["image_embedding_size"][0]), int(metadata["embed_dim"])
        return self.example_feeds(g, d, batch if isinstance(batch, int) else 1, boxes if isinstance(boxes, int) else 1, seed)

    def image_preprocessor(self, metadata: dict[str, Any]):
        raise InputError("SAM 3's detector takes the vision encoder's features and a prompt, not images: drop --images "
                         "(validate the vision encoder with --images instead)")


FAMILY = Sam3DetectorFamily()
