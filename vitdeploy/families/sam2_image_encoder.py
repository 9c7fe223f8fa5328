"""SAM 2 / 2.1's image encoder (the official ``sam2`` package): Hiera trunk + FPN neck + the no-memory embedding,
three outputs (the image embedding and the two high-resolution feature maps the mask decoder takes)."""

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

#: Hiera's total stride: a 4x4 patch embedding, then three 2x2 q-poolings.
TOTAL_STRIDE = 32


class Sam2ImageEncoderFamily(Sam2Family):
    name = "sam2_image_encoder"
    title = 'SAM 2 image encoders'
    runtime_metadata = ("input_size", "pixel_mean", "pixel_std")
    role = ("SAM 2 image encoder: an image or video frame -> its embedding and two high-resolution feature maps (image "
            "and video)")
    required_metadata = ("architecture", "input_size", "pixel_mean", "pixel_std")

    def probe_scopes(self, metadata: dict[str, Any]) -> tuple[str, ...]:
        """One Hiera block of each kind (each stage, its pooling transition, windowed and global blocks), found in the
        graph: the whole file also holds the FPN neck and the position embedding, which OpenVINO took 190 s to compile
        for hiera-t at 1024 (the probe on the whole file: 204.5 s; on these blocks: 14.3 s, with the same choice)."""
        return ("model.image_encoder.trunk.blocks.*",)

    def check_export(self, recipe: Recipe, options: ExportOptions) -> None:
        from vitdeploy.sizes import require_patch_multiple

        if options.input_size:
            require_patch_multiple(options.input_size, TOTAL_STRIDE, unit="total stride")

    def export(self, recipe: Recipe, arch: Any, model: nn.Module, output: str | Path, options: ExportOptions,
               echo: Echo) -> ExportResult:
        import torch

        from vitdeploy.metadata import artifact_metadata
        from vitdeploy.onnx_export.exporter import export_onnx
        from vitdeploy.rewrites.sam2_image_encoder import OUTPUT_NAMES, rewrite_sam2_image_encoder

        if options.dynamic_batch:
            raise InputError("--dynamic-batch is not supported for SAM 2's image encoder yet: export with a fixed --batch")
        size = options.input_size or int(model.image_size)
        echo(f"exporting {recipe.name} ({recipe.variant}, sam2 {Path(arch.config).stem}) at {size}x{size}: "
             f"{', '.join(OUTPUT_NAMES)}")
        metadata = artifact_metadata(
            family=self.name, variant=recipe.variant, input_size=size, pixel_mean=recipe.pixel_mean,
            pixel_std=recipe.pixel_std, architecture=arch.to_dict(), **options.provenance(),
            input_name=recipe.input_name, output_names=list(OUTPUT_NAMES), resize="square",
            model_image_size=int(model.image_size),
        )
        example = torch.randn(options.batch, 3, size, size, generator=torch.Generator().manual_seed(0))
        exportable = rewrite_sam2_image_encoder(model)
        with torch.no_grad():  # fills the neck's position-encoding cache, which the exporter would see assigned
            exportable(example)
        return export_onnx(exportable, (example,), output, input_names=[recipe.input_name],
                           output_names=list(OUTPUT_NAMES), metadata=metadata, opset=options.opset or recipe.opset)

    def eager_reference(self, metadata: dict[str, Any], checkpoint: str | None) -> nn.Module:
        """The official ``SAM2Base`` with the export's weights, through the features ``SAM2ImagePredictor`` keeps."""
        from vitdeploy.rewrites.sam2_image_encoder import Sam2ImageEncoder

        return Sam2ImageEncoder(self.reference_model(metadata, checkpoint)).eval()

    def image_preprocessor(self, metadata: dict[str, Any]):
        """SAM 2's own: a square antialiased resize to the input size, /255, normalize (``SAM2Transforms``)."""
        from vitdeploy.runtime.processing.sam2_transforms import Sam2Preprocessor

        return Sam2Preprocessor(int(metadata["input_size"][0]), tuple(metadata["pixel_mean"]), tuple(metadata["pixel_std"]))

    calibration_preprocessor = image_preprocessor


FAMILY = Sam2ImageEncoderFamily()
