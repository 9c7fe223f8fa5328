"""Export recipe for the SAM image encoder: rewrite, stamp metadata, export, check."""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

from vitdeploy.metadata import family_metadata
from vitdeploy.onnx_export.exporter import ExportResult, export_onnx
from vitdeploy.targets import DEFAULT_TARGET, get_target
from vitdeploy.rewrites.layernorm2d import LayerNorm2dMode
from vitdeploy.rewrites.sam_encoder import rewrite_sam_image_encoder
from vitdeploy.runtime_facts import family_name


#: An encoder's own metadata keys and their defaults (the export's).
SAM_ENCODER_KEYS: dict[str, Any] = {"dynamic_batch": False, "input_name": "image", "output_name": "image_embeddings",
                                    "layernorm2d": "matmul", "target": DEFAULT_TARGET}


def sam_encoder_metadata(**keys: Any) -> dict[str, Any]:
    """Metadata for an exported encoder (see :mod:`vitdeploy.metadata` for the contract): ``variant``,
    ``input_size``, ``pixel_mean``, ``pixel_std``, ``architecture``, ``random_seed``, the checkpoint's name and
    digest, and :data:`SAM_ENCODER_KEYS`."""
    return family_metadata(family_name("sam", "image_encoder"), SAM_ENCODER_KEYS, keys)  # runtime_facts.json's name


def export_sam_image_encoder(
    encoder: nn.Module,
    path: str | os.PathLike,
    *,
    metadata: dict[str, Any] | None = None,
    input_size: int | None = None,
    batch: int = 1,
    dynamic_batch: bool = False,
    opset: int = 18,
    layernorm2d: LayerNorm2dMode = "matmul",
    input_name: str = "image",
    output_name: str = "image_embeddings",
    external_data: bool | None = None,
    target: str = DEFAULT_TARGET,
) -> ExportResult:
    """Rewrite an official SAM image encoder (a copy) and export it to ``path``.

    Without ``metadata``, it is read off the module: architecture from the module, SAM's pixel
    mean/std, variant guessed from the architecture (``custom`` otherwise), weights marked as not random.
    ``target`` picks the attention form (:mod:`vitdeploy.targets`) and is stamped in the
    metadata as ``target``.
    """
    spec = get_target(target)
    exportable = rewrite_sam_image_encoder(encoder, input_size=input_size, layernorm2d=layernorm2d)
    translations = None
    if spec.attention != "decomposed":
        from vitdeploy.rewrites.fused_attention import fuse_sam_attention

        exportable = fuse_sam_attention(exportable, spec.attention, pad_value=spec.pad_value)  # type: ignore[arg-type]
    if spec.ort_gelu:
        from vitdeploy.rewrites.gelu import fusable_gelu

        exportable = fusable_gelu(exportable)
    if spec.contrib_ops:
        from vitdeploy.onnx_export.ort_contrib import ort_contrib_translations

        translations = ort_contrib_translations()
    size = exportable.input_size
    if metadata is None:
        from vitdeploy.models.recipes import SAM_PIXEL_MEAN, SAM_PIXEL_STD
        from vitdeploy.models.sam_arch import SAM_VARIANTS
        from vitdeploy.models.sam_encoder import SamEncoderArch

        arch = SamEncoderArch.from_module(encoder)
        metadata = sam_encoder_metadata(
            variant=SAM_VARIANTS.get((arch.embed_dim, arch.depth), "custom"), input_size=size, pixel_mean=SAM_PIXEL_MEAN,
            pixel_std=SAM_PIXEL_STD, architecture=arch.to_dict(), random_seed=None, dynamic_batch=dynamic_batch,
            input_name=input_name, output_name=output_name, layernorm2d=layernorm2d, target=spec.name,
        )
    else:
        metadata = {**metadata, "target": spec.name}
    example = torch.randn(batch, exportable.patch_embed.proj.in_channels, size, size, generator=torch.Generator().manual_seed(0))
    return export_onnx(exportable, (example,), path, input_names=[input_name], output_names=[output_name],
                       metadata=metadata, opset=opset, dynamic_batch=dynamic_batch, external_data=external_data,
                       custom_translation_table=translations)
