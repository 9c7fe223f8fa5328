"""The eager reference for SAM 3's vision encoder: the official ``sam3`` package's ViTDet trunk and dual neck.

``sam3.model_builder`` builds one model only (the full image model, 840 M parameters, 1008 px) and on a CPU
stops in its constructors (``PositionEmbeddingSine`` precomputes its cache on ``device="cuda"``). This module
builds the same official classes (``sam3.model.vitdet.ViT``, ``sam3.model.necks.Sam3DualViTDetNeck``,
``sam3.model.position_encoding.PositionEmbeddingSine``, ``sam3.model.vl_combiner.SAM3VLBackbone``) with the
builder's own arguments, of which a recipe may change the sizes (:class:`Sam3VisionArch`: the tests' tiny model,
or another input size). The one shim, on the reference side, is named and changes no arithmetic:
``precompute_resolution=None``, so the position encoding computes its table on the first call, on this
device, by the same code the precomputation runs.

Weights come from ``--checkpoint`` (the official ``sam3.pt``: ``{"model": {"detector.backbone.vision_backbone.
...": ...}}`` or a state dict of the vision backbone itself, read with ``weights_only=True``) or are seeded random
(every parameter perturbed). The rotary tables (``freqs_cis`` buffers) are not weights: the model computes them
for its own input size, so a checkpoint's are not loaded.

The package is a wheel that pins ``numpy<2.4``: ``pip install --no-deps sam3==0.1.4`` plus what it imports
(``ftfy``, ``regex``, ``einops``, ``psutil``, ``wcwidth``; ``iopath``, ``pycocotools``, ``timm`` come with the dev
install), as ``scripts/lib/venv.sh`` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from torch import nn

from vitdeploy.errors import RecipeError
from vitdeploy.models.sam3_common import (GridArchTable, build_position_encoding, load_official_weights, missing_sam3,
                                          read_weights, select_under)

#: Keys of an official checkpoint that hold the vision backbone (``_load_checkpoint`` strips ``detector.``).
CHECKPOINT_PREFIXES = ("detector.backbone.vision_backbone.", "backbone.vision_backbone.")


@dataclass(frozen=True)
class Sam3VisionArch(GridArchTable):
    """The sizes of SAM 3's vision encoder (the official constructors' argument names); defaults are the builder's.

    ``img_size`` is the square input the model is built for (its rotary tables are computed for it);
    ``scalp`` levels of the lowest resolution are dropped, as ``SAM3VLBackbone(scalp=1)`` does in the image model.
    ``add_sam2_neck``: the second neck the interactive (click) predictor reads.
    """

    img_size: int = 1008
    pretrain_img_size: int = 336
    patch_size: int = 14
    embed_dim: int = 1024
    depth: int = 32
    num_heads: int = 16
    mlp_ratio: float = 4.625
    window_size: int = 24
    global_att_blocks: tuple[int, ...] = (7, 15, 23, 31)
    d_model: int = 256
    scale_factors: tuple[float, ...] = (4.0, 2.0, 1.0, 0.5)
    add_sam2_neck: bool = True
    scalp: int = 1

    WHAT: ClassVar[str] = "a SAM 3 vision encoder"

    def with_img_size(self, size: int) -> Sam3VisionArch:
        from dataclasses import replace

        return replace(self, img_size=int(size))

    def check(self) -> None:
        """Refuse sizes the official classes cannot build or run, in words, before torch builds anything."""
        super().check()
        if self.embed_dim % self.num_heads or (self.embed_dim // self.num_heads) % 4:
            raise RecipeError(f"embed_dim {self.embed_dim} / num_heads {self.num_heads} must be a multiple of 4 "
                              "(the 2-D rotary embedding rotates pairs along x and y)")
        if not self.global_att_blocks or max(self.global_att_blocks) >= self.depth:
            raise RecipeError(f"global_att_blocks {list(self.global_att_blocks)} must name blocks below depth {self.depth}")
        if set(self.scale_factors) - {4.0, 2.0, 1.0, 0.5}:
            raise RecipeError(f"scale_factors {list(self.scale_factors)}: the neck has 4.0, 2.0, 1.0 and 0.5")
        if not 0 <= self.scalp < len(self.scale_factors):
            raise RecipeError(f"scalp {self.scalp} must leave at least one of {len(self.scale_factors)} levels")
        if 0.5 in self.scale_factors and (self.grid % 2):
            raise RecipeError(f"img_size {self.img_size} gives an odd grid ({self.grid}) that the 0.5 level cannot pool")
        if self.add_sam2_neck and len(self.scale_factors) - self.scalp != 3:
            raise RecipeError(f"the interactive neck (add_sam2_neck) needs three levels after scalp, as the click "
                              f"predictor reads them; scale_factors {list(self.scale_factors)} with scalp {self.scalp} "
                              f"leave {len(self.scale_factors) - self.scalp}")

    def interactive_arch(self) -> Any:
        """The sizes of the interactive heads that read this encoder's second neck."""
        from vitdeploy.models.sam3_interactive_decoder import Sam3InteractiveArch

        return Sam3InteractiveArch(img_size=self.img_size, patch_size=self.patch_size, d_model=self.d_model)


def _sam3():
    try:
        from sam3.model import necks, vitdet, vl_combiner
    except ImportError as exc:
        raise missing_sam3(exc) from exc
    return vitdet, necks, vl_combiner


def build_sam3_vision(arch: Sam3VisionArch) -> nn.Module:
    """The official ``SAM3VLBackbone`` holding only the vision side (``forward_image``), as
    ``sam3.model_builder`` builds it (``_create_vit_backbone``, ``_create_vit_neck``, ``_create_vl_backbone``), eval mode.
    """
    vitdet, necks, vl_combiner = _sam3()
    arch.check()
    trunk = vitdet.ViT(
        img_size=arch.img_size, pretrain_img_size=arch.pretrain_img_size, patch_size=arch.patch_size,
        embed_dim=arch.embed_dim, depth=arch.depth, num_heads=arch.num_heads, mlp_ratio=arch.mlp_ratio,
        norm_layer="LayerNorm", drop_path_rate=0.1, qkv_bias=True, use_abs_pos=True, tile_abs_pos=True,
        global_att_blocks=tuple(arch.global_att_blocks), rel_pos_blocks=(), use_rope=True, use_interp_rope=True,
        window_size=arch.window_size, pretrain_use_cls_token=True, retain_cls_token=False, ln_pre=True, ln_post=False,
        return_interm_layers=False, bias_patch_embed=False, compile_mode=None,
    )
    neck = necks.Sam3DualViTDetNeck(position_encoding=build_position_encoding(arch.d_model), d_model=arch.d_model,
                                    scale_factors=list(arch.scale_factors), trunk=trunk, add_sam2_neck=arch.add_sam2_neck)
    return vl_combiner.SAM3VLBackbone(visual=neck, text=None, scalp=arch.scalp).eval()


def _is_rotary_table(key: str) -> bool:
    return key.rsplit(".", 1)[-1] == "freqs_cis"


def load_sam3_vision(arch: Sam3VisionArch, checkpoint: str | Path | None = None, *, random_seed: int | None = None,
                     what: str | None = None) -> nn.Module:
    """Build the official vision backbone and fill it from a checkpoint or with seeded random weights."""
    model = build_sam3_vision(arch)
    own_tables = {k: v for k, v in model.state_dict().items() if _is_rotary_table(k)}

    def select(state: dict[str, Any]) -> dict[str, Any]:
        chosen = select_under(state, CHECKPOINT_PREFIXES)
        return {**{f"vision_backbone.{k}": v for k, v in chosen.items() if not _is_rotary_table(k)}, **own_tables}

    return load_official_weights(model, checkpoint, random_seed=random_seed, what=what or "SAM 3's vision backbone",
                                 hint=": use the official sam3.pt or a state dict of its vision backbone", select=select)


class Sam3VisionParts(nn.Module):
    """What SAM 3's vision encoder file computes from: the official vision backbone and, where it has the
    interactive neck, the interactive heads, whose per-image part (``conv_s0``/``conv_s1``, which
    ``Sam3Processor.set_image`` applies, and ``no_mem_embed``, which ``predict_inst`` adds) the file carries so
    that a click runs the prompt encoder and mask decoder only."""

    def __init__(self, backbone: nn.Module, heads: nn.Module | None):
        super().__init__()
        self.backbone, self.heads = backbone, heads


def load_sam3_vision_parts(arch: Sam3VisionArch, checkpoint: str | Path | None = None, *,
                           random_seed: int | None = None, what: str | None = None) -> Sam3VisionParts:
    """:func:`load_sam3_vision` and, with ``add_sam2_neck``, the interactive heads of the same checkpoint (read once)
    or seed."""
    heads = None
    if arch.add_sam2_neck:
        from vitdeploy.models.sam3_interactive_decoder import load_sam3_interactive

        checkpoint = read_weights(checkpoint) if checkpoint is not None else None
        heads = load_sam3_interactive(arch.interactive_arch(), checkpoint, random_seed=random_seed)
    return Sam3VisionParts(load_sam3_vision(arch, checkpoint, random_seed=random_seed, what=what), heads).eval()


def vision_backbone_at_size(model: nn.Module, arch: Sam3VisionArch, size: int) -> nn.Module:
    """The official vision backbone built for input ``size`` with ``model``'s weights: its rotary tables are
    computed for the new grid (the weights do not depend on the input size)."""
    if size == arch.img_size:
        return model
    resized = build_sam3_vision(arch.with_img_size(size))
    state = {k: v for k, v in model.state_dict().items() if not _is_rotary_table(k)}
    own = {k: v for k, v in resized.state_dict().items() if _is_rotary_table(k)}
    resized.load_state_dict({**state, **own}, strict=True)
    return resized.eval()


__all__ = ["CHECKPOINT_PREFIXES", "Sam3VisionArch", "Sam3VisionParts", "build_sam3_vision", "load_sam3_vision",
           "load_sam3_vision_parts", "vision_backbone_at_size"]
