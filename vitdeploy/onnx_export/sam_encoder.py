"""Export recipe for the SAM image encoder: rewrite, stamp metadata, export, check."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from vitdeploy.metadata import tool_versions
from vitdeploy.onnx_export.exporter import ExportResult, export_onnx
from vitdeploy.rewrites.sam_encoder import LayerNorm2dMode, rewrite_sam_image_encoder


def sam_encoder_metadata(
    *,
    variant: str,
    img_size: int,
    pixel_mean: Sequence[float],
    pixel_std: Sequence[float],
    architecture: dict[str, Any],
    random_seed: int | None,
    checkpoint_name: str | None = None,
    checkpoint_sha256: str | None = None,
    dynamic_batch: bool = False,
    input_name: str = "image",
    output_name: str = "image_embeddings",
    layernorm2d: str = "matmul",
) -> dict[str, Any]:
    """Metadata for an exported encoder (see :mod:`vitdeploy.metadata` for the contract)."""
    versions = tool_versions()
    return {
        "family": "sam_image_encoder",
        "variant": variant,
        "input_size": [img_size, img_size],
        "pixel_mean": list(pixel_mean),
        "pixel_std": list(pixel_std),
        "precision": "fp32",
        "random_weights": random_seed is not None,
        "random_seed": random_seed,
        "checkpoint": checkpoint_name,
        "checkpoint_sha256": checkpoint_sha256,
        "architecture": architecture,
        "dynamic_batch": dynamic_batch,
        "input_name": input_name,
        "output_name": output_name,
        "layernorm2d": layernorm2d,
        "vitdeploy_version": versions["vitdeploy"],
        "tool_versions": versions,
    }


def export_sam_image_encoder(
    encoder: nn.Module,
    path: str | os.PathLike,
    *,
    metadata: dict[str, Any] | None = None,
    img_size: int | None = None,
    batch: int = 1,
    dynamic_batch: bool = False,
    opset: int = 18,
    layernorm2d: LayerNorm2dMode = "matmul",
    input_name: str = "image",
    output_name: str = "image_embeddings",
    external_data: bool | None = None,
) -> ExportResult:
    """Rewrite an official SAM image encoder (a copy) and export it to ``path``.

    Without ``metadata``, it is read off the module: architecture from the module, SAM's pixel
    mean/std, variant guessed from the architecture (``custom`` otherwise), weights marked as not random.
    """
    exportable = rewrite_sam_image_encoder(encoder, img_size=img_size, layernorm2d=layernorm2d)
    size = exportable.img_size
    if metadata is None:
        from vitdeploy.models.recipes import SAM_PIXEL_MEAN, SAM_PIXEL_STD
        from vitdeploy.models.sam_encoder import SamEncoderArch

        arch = SamEncoderArch.from_module(encoder)
        known = {(768, 12): "vit_b", (1024, 24): "vit_l", (1280, 32): "vit_h"}
        metadata = sam_encoder_metadata(
            variant=known.get((arch.embed_dim, arch.depth), "custom"), img_size=size, pixel_mean=SAM_PIXEL_MEAN,
            pixel_std=SAM_PIXEL_STD, architecture=arch.to_dict(), random_seed=None, dynamic_batch=dynamic_batch,
            input_name=input_name, output_name=output_name, layernorm2d=layernorm2d,
        )
    example = torch.randn(batch, exportable.patch_embed.proj.in_channels, size, size, generator=torch.Generator().manual_seed(0))
    return export_onnx(
        exportable,
        (example,),
        path,
        input_names=[input_name],
        output_names=[output_name],
        metadata=metadata,
        opset=opset,
        dynamic_batch=dynamic_batch,
        external_data=external_data,
    )
