"""SAM's prompt encoder + mask decoder (``segment_anything``'s ``PromptEncoder`` and ``MaskDecoder``) as one
graph: image embeddings and prompts in, low-resolution masks and IoU predictions out."""

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


class SamMaskDecoder(ModelFamily):
    name = "sam_mask_decoder"
    recipe_suffix = '_decoder'
    title = 'SAM decoders'
    verified_on_cuda = (
        (("generic", "fp32"), "H100, onnxruntime-gpu 1.31.1, 2026-11-24: relative L2 9.2e-7 vs the official model with "
                              "TF32 off"),
    )
    role = "SAM prompt encoder + mask decoder: an embedding and clicks/box/mask -> masks and scores"
    layernorm2d_forms = ("matmul", "native")  # the mask upscaler's
    required_metadata = ("architecture", "input_size", "image_embedding_size", "mask_input_size", "embed_dim")

    def architecture_class(self) -> type:
        from vitdeploy.models.sam_arch import SamDecoderArch

        return SamDecoderArch

    def check_export(self, recipe: Recipe, options: ExportOptions) -> None:
        from vitdeploy.models.sam_arch import SamDecoderArch

        if options.batch != 1 or options.dynamic_batch:
            raise InputError("--batch/--dynamic-batch do not apply to the mask decoder: it takes one prompt set per call "
                             "(its dynamic axis is the number of points)")
        self.decoder_options(recipe)
        arch = SamDecoderArch.from_recipe(recipe)
        if options.input_size and options.input_size != arch.input_image_size:
            arch.at_input_size(options.input_size)  # refuses a size that is no whole number of encoder patches

    def decoder_options(self, recipe: Recipe) -> tuple[str, int, int]:
        """The recipe's ``[decoder]`` table: (mask output, max points, opt points)."""
        table = recipe_section(recipe, "decoder", {"mask_output", "max_points", "opt_points"})
        mask_output = str(table.get("mask_output", "all"))
        max_points, opt_points = int(table.get("max_points", 32)), int(table.get("opt_points", 2))
        if not 1 <= opt_points <= max_points:
            raise RecipeError(f"recipe '{recipe.name}': need 1 <= opt_points <= max_points, got {opt_points} and {max_points}")
        return mask_output, max_points, opt_points

    def load_eager(self, recipe: Recipe, checkpoint: str | None, random_seed: int | None) -> tuple[Any, nn.Module]:
        from vitdeploy.models.sam_decoder import SamDecoderArch, load_sam_prompt_decoder

        arch = SamDecoderArch.from_recipe(recipe)
        what = f"recipe '{recipe.name}' ({recipe.variant})"
        return arch, load_sam_prompt_decoder(arch, checkpoint, random_seed=random_seed, what=what)

    def export(self, recipe: Recipe, arch: Any, model: nn.Module, output: str | Path, options: ExportOptions,
               echo: Echo) -> ExportResult:
        from vitdeploy.models.sam_decoder import build_sam_prompt_decoder
        from vitdeploy.metadata import artifact_metadata
        from vitdeploy.onnx_export.sam_decoder import export_sam_mask_decoder, sam_decoder_keys

        mask_output, max_points, opt_points = self.decoder_options(recipe)  # check_export ran before the model was built
        if options.input_size and options.input_size != arch.input_image_size:
            # The decoder paired with an encoder exported at another size: official modules built for that size.
            sized = arch.at_input_size(options.input_size)
            resized = build_sam_prompt_decoder(sized)
            resized.load_state_dict(model.state_dict(), strict=True)
            arch, model = sized, resized.eval()
        layernorm2d = options.layernorm2d or self.layernorm2d_forms[0]
        echo(f"exporting {recipe.name} ({recipe.variant}) for a {arch.input_image_size}x{arch.input_image_size} encoder "
             f"({arch.image_embedding_size}x{arch.image_embedding_size} embeddings), mask output '{mask_output}', "
             f"1..{max_points} points")
        metadata = artifact_metadata(
            family=self.name, variant=recipe.variant, input_size=arch.input_image_size, pixel_mean=recipe.pixel_mean,
            pixel_std=recipe.pixel_std, architecture=arch.to_dict(), **options.provenance(),
            **sam_decoder_keys(arch.to_dict(), mask_output=mask_output, num_mask_tokens=arch.num_multimask_outputs + 1,
                               layernorm2d=layernorm2d, max_points=max_points, opt_points=opt_points),
        )
        return export_sam_mask_decoder(model.prompt_encoder, model.mask_decoder, output, metadata=metadata,
                                       opset=options.opset or recipe.opset, layernorm2d=layernorm2d,  # type: ignore[arg-type]
                                       mask_output=mask_output)  # type: ignore[arg-type]

    def eager_reference(self, metadata: dict[str, Any], checkpoint: str | None) -> nn.Module:
        """The official prompt encoder + mask decoder behind the graph's inputs and outputs."""
        seed = reference_seed(metadata, checkpoint)  # refuses a wrong checkpoint before torch is imported

        from vitdeploy.models.sam_decoder import OfficialDecoderReference, SamDecoderArch, load_sam_prompt_decoder

        arch = SamDecoderArch(**metadata["architecture"])
        model = load_sam_prompt_decoder(arch, checkpoint, random_seed=seed)
        indices = [int(i) for i in metadata.get("mask_output_indices", range(arch.num_multimask_outputs + 1))]
        return OfficialDecoderReference(model.prompt_encoder, model.mask_decoder, (indices[0], indices[-1] + 1)).eval()

    def random_input_sets(self, metadata: dict[str, Any], input_names: list[str], input_shapes: dict[str, list[Any]],
                          count: int, seed: int = 0) -> list[InputSet]:
        """Embeddings plus prompts laid out as ``SamPredictor`` does, alternating two clicks and a padding point
        without a mask prompt with a click plus a box with a mask prompt."""
        from vitdeploy.runtime.processing.input_sets import decoder_input_sets

        return decoder_input_sets(metadata, count, seed)

    def template_feeds(self, metadata: dict[str, Any], template: dict[str, list[Any]],
                       seed: int = 0) -> dict[str, np.ndarray] | None:
        """Prompts with the template's point count (``benchmark --shapes point_coords:1xNx2,...``)."""
        from vitdeploy.runtime.processing.input_sets import decoder_prompt_feeds

        if "point_coords" not in template:
            return None
        points = template["point_coords"][1]
        if not isinstance(points, int):
            raise InputError("the decoder's point count is dynamic: give it with --shapes point_coords:1xNx2,point_labels:1xN")
        return decoder_prompt_feeds(metadata, points, seed)

    def image_preprocessor(self, metadata: dict[str, Any]):
        raise InputError("the mask decoder takes image embeddings and prompts, not images: drop --images "
                         "(validate the encoder with --images instead)")


FAMILY = SamMaskDecoder()
