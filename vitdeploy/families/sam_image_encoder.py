"""The SAM image encoder (``segment_anything``'s ``ImageEncoderViT``, ViT-B/L/H): windowed attention with
decomposed relative positions and a LayerNorm2d neck; three attention forms for three runtimes."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from vitdeploy.families.base import Echo, ExportOptions, ModelFamily, reference_seed
from vitdeploy.targets import TARGETS

if TYPE_CHECKING:
    from torch import nn

    from vitdeploy.models.recipes import Recipe
    from vitdeploy.onnx_export.exporter import ExportResult


class SamImageEncoder(ModelFamily):
    name = "sam_image_encoder"
    title = 'SAM encoders'
    runtime_metadata = ("input_size", "pixel_mean", "pixel_std")
    verified_on_cuda = (
        (("generic", "fp32"), "H100, onnxruntime-gpu 1.31.1: relative L2 vs the official model 1.5e-6 with TF32 off "
                              "(2026-11-24), 7.2e-4 with TF32 on (2026-11-23)"),
        (("tensorrt", "fp32"), "H100, onnxruntime-gpu 1.31.1, 2026-11-23: relative L2 7.2e-4 vs the official model with "
                               "TF32 on"),
        (("generic", "fp16"), "H100, onnxruntime-gpu 1.31.1, 2026-11-24: cosine 0.999999, relative L2 1.4e-3 vs the "
                              "official model"),
        (("generic", "int8"), "H100, onnxruntime-gpu 1.31.1, 2026-11-24: cosine 0.99724, relative L2 0.074 vs the "
                              "official model"),
    )
    role = "SAM image encoder: an image -> its embedding (SamPredictor.set_image)"
    export_targets = tuple(TARGETS)
    layernorm2d_forms = ("matmul", "native")
    required_metadata = ("architecture", "input_size", "pixel_mean", "pixel_std")

    def probe_scopes(self, metadata: dict[str, Any]) -> tuple[str, ...]:
        """The first windowed block and the first global one (``architecture.global_attn_indexes``)."""
        arch = metadata.get("architecture") or {}
        depth, global_blocks = arch.get("depth"), arch.get("global_attn_indexes") or ()
        if not isinstance(depth, int) or not all(isinstance(i, int) for i in global_blocks):
            return ()
        windowed = next((i for i in range(depth) if i not in global_blocks), None)
        return tuple(f"blocks.{i}" for i in sorted({windowed, *global_blocks[:1]} - {None}))

    def architecture_class(self) -> type:
        from vitdeploy.models.sam_arch import SamEncoderArch

        return SamEncoderArch

    def check_export(self, recipe: Recipe, options: ExportOptions) -> None:
        from vitdeploy.models.sam_arch import SamEncoderArch
        from vitdeploy.sizes import require_patch_multiple

        arch = SamEncoderArch.from_recipe(recipe)
        if options.input_size:
            require_patch_multiple(options.input_size, arch.patch_size)

    def load_eager(self, recipe: Recipe, checkpoint: str | None, random_seed: int | None) -> tuple[Any, nn.Module]:
        from vitdeploy.models.sam_encoder import SamEncoderArch, load_sam_image_encoder

        arch = SamEncoderArch.from_recipe(recipe)
        model = load_sam_image_encoder(arch, checkpoint, prefix=recipe.checkpoint_prefix, random_seed=random_seed,
                                       what=f"recipe '{recipe.name}' ({recipe.variant})")
        return arch, model

    def export(self, recipe: Recipe, arch: Any, model: nn.Module, output: str | Path, options: ExportOptions,
               echo: Echo) -> ExportResult:
        from vitdeploy.metadata import artifact_metadata
        from vitdeploy.onnx_export.sam_encoder import export_sam_image_encoder

        size = options.input_size or arch.img_size
        layernorm2d = options.layernorm2d or self.layernorm2d_forms[0]
        echo(f"exporting {recipe.name} ({recipe.variant}) at {size}x{size}"
             + (" with a dynamic batch" if options.dynamic_batch else ""))
        metadata = artifact_metadata(
            family=self.name, variant=recipe.variant, input_size=size, pixel_mean=recipe.pixel_mean,
            pixel_std=recipe.pixel_std, architecture=arch.to_dict(), **options.provenance(),
            dynamic_batch=options.dynamic_batch, input_name=recipe.input_name, output_name=recipe.output_name,
            layernorm2d=layernorm2d, target=options.target,
        )
        return export_sam_image_encoder(
            model, output, metadata=metadata, input_size=size, batch=options.batch, dynamic_batch=options.dynamic_batch,
            opset=options.opset or recipe.opset, layernorm2d=layernorm2d,  # type: ignore[arg-type]
            input_name=recipe.input_name, output_name=recipe.output_name, target=options.target,
        )

    def eager_reference(self, metadata: dict[str, Any], checkpoint: str | None) -> nn.Module:
        """The official ``ImageEncoderViT`` with the export's weights, at the export's image size."""
        seed = reference_seed(metadata, checkpoint)  # refuses a wrong checkpoint before torch is imported

        from vitdeploy.models.sam_encoder import SamEncoderArch, load_sam_image_encoder, official_encoder_at_size

        arch_dict = dict(metadata["architecture"])
        arch_dict["global_attn_indexes"] = tuple(arch_dict.get("global_attn_indexes", ()))
        model = load_sam_image_encoder(SamEncoderArch(**arch_dict), checkpoint, random_seed=seed)
        return official_encoder_at_size(model, int(metadata["input_size"][0]))

    def image_preprocessor(self, metadata: dict[str, Any]):
        """SAM's own: resize the longest side, normalize, pad bottom/right to a square."""
        from vitdeploy.runtime.processing.preprocess import SamPreprocessor

        return SamPreprocessor(int(metadata["input_size"][0]), metadata["pixel_mean"], metadata["pixel_std"])

    calibration_preprocessor = image_preprocessor


FAMILY = SamImageEncoder()
