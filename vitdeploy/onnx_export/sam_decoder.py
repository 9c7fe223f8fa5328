"""Export of the SAM prompt encoder + mask decoder: rewrite, stamp metadata, export, check.

The graph is static except for the number of prompt points (symbolic dimension ``num_points``). It
has no shape-tensor inputs at all: every Reshape/Expand/Slice shape is a constant, so TensorRT needs
only an ordinary optimisation profile for ``point_coords``/``point_labels`` (min/opt/max recorded in
the metadata as ``shape_profile``), never ``set_shape_input`` values.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

from vitdeploy.metadata import artifact_metadata
from vitdeploy.onnx_export.exporter import ExportResult, export_onnx
from vitdeploy.rewrites.layernorm2d import LayerNorm2dMode
from vitdeploy.rewrites.sam_decoder import MaskOutput, rewrite_sam_decoder
from vitdeploy.runtime_facts import family_name

INPUT_NAMES = ["image_embeddings", "point_coords", "point_labels", "mask_input", "has_mask_input"]
OUTPUT_NAMES = ["low_res_masks", "iou_predictions"]
POINTS_DIM = "num_points"
#: Points in the export example: not 0 or 1, which torch.export would specialise the dimension to.
EXAMPLE_POINTS = 3


def sam_decoder_keys(
    architecture: dict[str, Any],
    *,
    mask_output: str = "all",
    num_mask_tokens: int = 4,
    layernorm2d: str = "matmul",
    max_points: int = 32,
    opt_points: int = 2,
) -> dict[str, Any]:
    """What a decoder file carries beyond every file's keys (:func:`vitdeploy.metadata.artifact_metadata`), derived
    from its architecture: the embedding grid, the mask prompt's size, which mask tokens the outputs hold, its
    inputs and outputs, the point axis and its shape profile (1..``max_points``), the point labels."""
    grid = int(architecture["image_embedding_size"])
    indices = {"all": list(range(num_mask_tokens)), "multimask": list(range(1, num_mask_tokens)), "single": [0]}[mask_output]

    def profile(*tail: int) -> dict[str, list[int]]:
        return {"min": [1, 1, *tail], "opt": [1, opt_points, *tail], "max": [1, max_points, *tail]}

    return {
        "image_embedding_size": [grid, grid],
        "embed_dim": int(architecture["embed_dim"]),
        "mask_input_size": [4 * grid, 4 * grid],
        "num_mask_tokens": num_mask_tokens,
        "mask_output": mask_output,
        "mask_output_indices": indices,  # which mask tokens the outputs hold; 0 is the single-mask output
        "input_names": list(INPUT_NAMES),
        "output_names": list(OUTPUT_NAMES),
        "dynamic_axes": {"point_coords": {"1": POINTS_DIM}, "point_labels": {"1": POINTS_DIM}},
        "shape_profile": {"point_coords": profile(2), "point_labels": profile()},
        "point_labels": {"-1": "padding", "0": "background", "1": "foreground", "2": "box top-left", "3": "box bottom-right"},
        "layernorm2d": layernorm2d,
    }


def decoder_example_inputs(embed_dim: int, grid: int, input_size: int, points: int = EXAMPLE_POINTS,
                           seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Seeded example inputs in the graph's input order (a mask prompt present, the last point padding)."""
    gen = torch.Generator().manual_seed(seed)
    embeddings = torch.randn(1, embed_dim, grid, grid, generator=gen)
    coords = torch.rand(1, points, 2, generator=gen) * input_size
    labels = torch.tensor([[1.0] * (points - 1) + [-1.0]])
    mask = torch.randn(1, 1, 4 * grid, 4 * grid, generator=gen)
    return embeddings, coords, labels, mask, torch.ones(1)


def export_sam_mask_decoder(
    prompt_encoder: nn.Module,
    mask_decoder: nn.Module,
    path: str | os.PathLike,
    *,
    metadata: dict[str, Any] | None = None,
    variant: str = "custom",
    opset: int = 18,
    layernorm2d: LayerNorm2dMode = "matmul",
    mask_output: MaskOutput = "all",
) -> ExportResult:
    """Rewrite the official prompt encoder + mask decoder (copies) and export them to ``path``.

    Without ``metadata`` it is read off the modules (SAM's pixel mean/std, weights marked as not
    random); ``variant`` must then name the encoder it pairs with (``vit_b``...), since all SAM
    variants share one decoder architecture and the runtime refuses a pair whose variants differ.

    Only the point axis of ``point_coords``/``point_labels`` is dynamic; the hygiene check allows that
    one symbolic dimension (and arithmetic on it, e.g. ``num_points + 5`` tokens) and nothing else.
    """
    exportable = rewrite_sam_decoder(prompt_encoder, mask_decoder, layernorm2d=layernorm2d, mask_output=mask_output)
    if metadata is None:
        from vitdeploy.models.recipes import SAM_PIXEL_MEAN, SAM_PIXEL_STD
        from vitdeploy.models.sam_decoder import SamDecoderArch

        arch = SamDecoderArch.from_modules(prompt_encoder, mask_decoder)
        metadata = artifact_metadata(
            family=family_name("sam", "mask_decoder"), variant=variant, input_size=arch.input_image_size,
            pixel_mean=SAM_PIXEL_MEAN, pixel_std=SAM_PIXEL_STD, architecture=arch.to_dict(), random_seed=None,
            checkpoint_name=None, checkpoint_sha256=None,
            **sam_decoder_keys(arch.to_dict(), mask_output=mask_output, num_mask_tokens=arch.num_multimask_outputs + 1,
                               layernorm2d=layernorm2d),
        )
    pe = exportable.prompt_encoder
    example = decoder_example_inputs(pe.embed_dim, pe.image_embedding_size[0], pe.input_image_size[0])
    return export_onnx(
        exportable,
        example,
        path,
        input_names=list(INPUT_NAMES),
        output_names=list(OUTPUT_NAMES),
        metadata=metadata,
        opset=opset,
        dynamic_axes={"point_coords": {1: POINTS_DIM}, "point_labels": {1: POINTS_DIM}},
    )
