"""SAM 3's vision encoder (the official ``sam3`` package): the ViTDet trunk with 2-D rotary embeddings and windowed
attention, and the dual SimpleFPN neck; the feature levels ``SAM3VLBackbone.forward_image`` returns for the
detector (``backbone_fpn_*``) and, from the second neck, the interactive predictor's features as
``Sam3Processor.set_image`` and ``predict_inst`` prepare them (``image_embed``, ``high_res_feats_0``/``_1``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from vitdeploy.families.base import Echo, ExportOptions, ModelFamily, reference_seed

if TYPE_CHECKING:
    from torch import nn

    from vitdeploy.models.recipes import Recipe
    from vitdeploy.onnx_export.exporter import ExportResult


class Sam3VisionEncoderFamily(ModelFamily):
    name = "sam3_vision_encoder"
    eager_loader = "vitdeploy.models.sam3_vision_encoder:load_sam3_vision_parts"
    title = "SAM 3 vision encoders"
    verified_on_cuda = (
        (("generic", "fp32"), "H200, onnxruntime-gpu 1.31.1, 2026-11-28: full size, relative L2 2.0e-6 vs the official "
                              "model with TF32 off"),
        (("generic", "fp16"), "H200, onnxruntime-gpu 1.31.1, 2026-11-28: full size, cosine 0.999998, relative L2 2.1e-3 "
                              "vs the official model"),
    )
    role = ("SAM 3 vision encoder: an image -> the detector's three feature levels and the click predictor's "
            "image_embed and high_res_feats (SAM3VLBackbone.forward_image, Sam3Processor.set_image)")
    runtime_metadata = ("input_size", "pixel_mean", "pixel_std")
    required_metadata = ("architecture", "input_size", "pixel_mean", "pixel_std")

    def architecture_class(self) -> type:
        from vitdeploy.models.sam3_vision_encoder import Sam3VisionArch

        return Sam3VisionArch

    def probe_scopes(self, metadata: dict[str, Any]) -> tuple[str, ...]:
        """The first windowed block and the first global one (``architecture.global_att_blocks``)."""
        arch = metadata.get("architecture") or {}
        depth, global_blocks = arch.get("depth"), arch.get("global_att_blocks") or ()
        if not isinstance(depth, int) or not all(isinstance(i, int) for i in global_blocks):
            return ()
        windowed = next((i for i in range(depth) if i not in global_blocks), None)
        return tuple(f"blocks.{i}" for i in sorted({windowed, *global_blocks[:1]} - {None}))

    def check_export(self, recipe: Recipe, options: ExportOptions) -> None:
        from vitdeploy.sizes import require_patch_multiple

        arch = self.architecture(recipe.architecture)
        if options.input_size:
            require_patch_multiple(options.input_size, arch.patch_size)
            arch.with_img_size(options.input_size).check()

    def export(self, recipe: Recipe, arch: Any, model: nn.Module, output: str | Path, options: ExportOptions,
               echo: Echo) -> ExportResult:
        import torch

        from vitdeploy.metadata import artifact_metadata
        from vitdeploy.models.sam3_vision_encoder import vision_backbone_at_size
        from vitdeploy.onnx_export.exporter import export_onnx
        from vitdeploy.rewrites.sam3_vision_encoder import rewrite_sam3_vision_encoder

        size = options.input_size or arch.img_size
        exportable = rewrite_sam3_vision_encoder(vision_backbone_at_size(model.backbone, arch, size), model.heads)
        names = list(exportable.output_names)
        echo(f"exporting {recipe.name} ({recipe.variant}) at {size}x{size}: {', '.join(names)}"
             + (" with a dynamic batch" if options.dynamic_batch else ""))
        metadata = artifact_metadata(
            family=self.name, variant=recipe.variant, input_size=size, pixel_mean=recipe.pixel_mean,
            pixel_std=recipe.pixel_std, architecture=arch.to_dict(), **options.provenance(),
            input_name=recipe.input_name, output_names=names, resize="square", dynamic_batch=options.dynamic_batch,
        )
        example = torch.randn(options.batch, 3, size, size, generator=torch.Generator().manual_seed(0))
        return export_onnx(exportable, (example,), output, input_names=[recipe.input_name], output_names=names,
                           metadata=metadata, opset=options.opset or recipe.opset, dynamic_batch=options.dynamic_batch)

    def eager_reference(self, metadata: dict[str, Any], checkpoint: str | None) -> nn.Module:
        """The official ``SAM3VLBackbone.forward_image`` with the export's weights, built for the export's size, and
        the interactive heads' per-image part."""
        seed = reference_seed(metadata, checkpoint)  # refuses a wrong checkpoint before torch is imported

        from vitdeploy.models.sam3_vision_encoder import load_sam3_vision_parts
        from vitdeploy.rewrites.sam3_vision_encoder import Sam3VisionEncoder

        arch = self.architecture(metadata["architecture"]).with_img_size(int(metadata["input_size"][0]))
        parts = load_sam3_vision_parts(arch, checkpoint, random_seed=seed)
        return Sam3VisionEncoder(parts.backbone, parts.heads).eval()

    def image_preprocessor(self, metadata: dict[str, Any]):
        """``Sam3Processor``'s: the uint8 image resized to a square (PyTorch's uint8 antialiased kernel), /255,
        normalized (mean and std 0.5)."""
        from vitdeploy.runtime.processing.sam3_transforms import Sam3Preprocessor

        return Sam3Preprocessor(int(metadata["input_size"][0]), tuple(metadata["pixel_mean"]), tuple(metadata["pixel_std"]))

    calibration_preprocessor = image_preprocessor


FAMILY = Sam3VisionEncoderFamily()
