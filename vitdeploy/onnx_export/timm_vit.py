"""Export of a timm VisionTransformer (ViT, DeiT): rewrite, stamp metadata, export, check."""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

from vitdeploy.metadata import family_metadata
from vitdeploy.onnx_export.exporter import ExportResult, export_onnx
from vitdeploy.rewrites.timm_vit import TimmOutput, rewrite_timm_vit
from vitdeploy.runtime_facts import family_name


#: A timm ViT's own metadata keys and their defaults (the export's).
TIMM_VIT_KEYS: dict[str, Any] = {"output": "logits", "data_config": {}, "dynamic_batch": False, "input_name": "image",
                                 "output_name": "logits"}


def timm_vit_metadata(**keys: Any) -> dict[str, Any]:
    """Metadata for an exported timm ViT (see :mod:`vitdeploy.metadata`): ``variant``, ``input_size``,
    ``pixel_mean``, ``pixel_std``, ``architecture``, ``random_seed``, the checkpoint's name and digest, and
    :data:`TIMM_VIT_KEYS`.

    ``pixel_mean``/``pixel_std`` are on the 0..255 scale like SAM's (timm's own [0, 1] values, crop and
    interpolation are kept in ``data_config``).
    """
    return family_metadata(family_name("timm", "vit"), TIMM_VIT_KEYS, keys)  # the name runtime_facts.json gives


def export_timm_vit(
    model: nn.Module,
    path: str | os.PathLike,
    *,
    metadata: dict[str, Any] | None = None,
    input_size: int | None = None,
    output: TimmOutput = "logits",
    batch: int = 1,
    dynamic_batch: bool = False,
    opset: int = 18,
    input_name: str = "image",
    output_name: str | None = None,
    external_data: bool | None = None,
) -> ExportResult:
    """Rewrite a timm VisionTransformer (a copy) and export it to ``path``.

    Without ``metadata`` it is read off the module: the timm name from its ``pretrained_cfg`` (the
    reference can then be rebuilt only with a matching recipe), timm's mean/std scaled to 0..255.
    """
    exportable = rewrite_timm_vit(model, input_size=input_size, output=output)
    size = exportable.input_hw[0]
    output_name = output_name or output
    if metadata is None:
        from vitdeploy.models.timm_vit import timm_data_config

        config = timm_data_config(model)
        cfg = getattr(model, "pretrained_cfg", None) or {}
        name = cfg.get("architecture", "custom") if isinstance(cfg, dict) else "custom"
        metadata = timm_vit_metadata(
            variant=name, input_size=size, pixel_mean=[255.0 * m for m in config["mean"]],
            pixel_std=[255.0 * s for s in config["std"]], architecture={"model_name": name}, random_seed=None,
            output=output, data_config=config, dynamic_batch=dynamic_batch, input_name=input_name, output_name=output_name,
        )
    example = torch.randn(batch, exportable.in_chans, size, size, generator=torch.Generator().manual_seed(0))
    return export_onnx(exportable, (example,), path, input_names=[input_name], output_names=[output_name],
                       metadata=metadata, opset=opset, dynamic_batch=dynamic_batch, external_data=external_data)
