"""Export-friendly SAM 3 vision encoder (the official ViTDet trunk + dual neck, ``SAM3VLBackbone.forward_image``),
same weights, same numbers.

``forward(image) -> (backbone_fpn_0, backbone_fpn_1, backbone_fpn_2[, image_embed, high_res_feats_0,
high_res_feats_1])``: the levels ``forward_image`` returns in ``backbone_fpn`` (the detector's), highest resolution
first, after ``scalp``; and, where the model has the interactive neck, the click predictor's features as
``Sam3Processor.set_image`` and ``Sam3Image.predict_inst`` prepare them from ``sam2_backbone_out["backbone_fpn"]``:
``conv_s0``/``conv_s1`` of the mask decoder on the two high-resolution levels (``high_res_feats_0``/``_1``), and
``no_mem_embed`` added to the lowest one (``image_embed``) -- the names and meanings of SAM 2's image encoder
outputs, so that SAM 2's decoder graph contract serves SAM 3's clicks. What differs from the official modules:

* **Rotary embedding in real arithmetic.** The official ``apply_rotary_enc`` views (x0, x1) pairs of each head as
  complex numbers and multiplies by ``freqs_cis`` (``view_as_complex``: no ONNX op; the exporter decomposes it
  into strided slices). Here the ``qkv`` rows of q and k are reordered once, per head, from interleaved pairs to
  halves (x0 of every pair, then x1), so the rotation is ``[q1 cos - q2 sin, q1 sin + q2 cos]`` on two contiguous
  halves, with ``cos``/``sin`` tables precomputed from the official ``freqs_cis``. q and k are reordered alike,
  so q.k is the same sum (in another order); v and the output are untouched.
* **Static windows.** Padding, window counts and the crop are fixed for the token grid
  (:class:`~vitdeploy.rewrites.static_shapes.WindowPartition`); the official ``window_partition`` reads them from
  ``x.shape`` and pads with ``F.pad`` at run time.
* **The absolute position table** (``get_abs_pos``: the pretraining table without its class token, tiled over the
  grid) is computed once, a constant of the graph.
* **Only the levels that are used.** The neck's lowest level, which ``scalp`` drops, is not computed; neither are
  the position encodings ``forward_image`` also returns (a function of the shapes alone: not graph outputs).
* No reads of ``x.shape``: every reshape uses static sizes and ``-1`` for the batch.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from vitdeploy.rewrites.rotary import deinterleave_order, rotate_halves
from vitdeploy.rewrites.static_shapes import WindowPartition, copy_vitdet_block

#: The click predictor's features (SAM 2's image encoder outputs: its decoder graph contract).
INTERACTIVE_OUTPUTS = ("image_embed", "high_res_feats_0", "high_res_feats_1")


class RotaryAttention(nn.Module):
    """The official ``Attention`` (2-D rope, no rel-pos) for a static (h, w) token grid, rope in real arithmetic."""

    def __init__(self, official: nn.Module, tokens_hw: tuple[int, int]):
        super().__init__()
        if official.use_rel_pos or official.cls_token or not official.use_rope:
            raise ValueError("SAM 3's attention has rope, no rel-pos and no class token")
        self.num_heads = int(official.num_heads)
        self.head_dim = int(official.head_dim)
        self.dim = self.num_heads * self.head_dim
        self.scale = float(official.scale)
        self.tokens_hw = tokens_hw
        order = deinterleave_order(self.num_heads, self.head_dim)
        rows = torch.cat([order, self.dim + order, 2 * self.dim + torch.arange(self.dim)])
        self.qkv = copy.deepcopy(official.qkv)
        with torch.no_grad():
            self.qkv.weight.copy_(official.qkv.weight[rows])
            if self.qkv.bias is not None:
                self.qkv.bias.copy_(official.qkv.bias[rows])
        self.proj = copy.deepcopy(official.proj)
        freqs = official.freqs_cis.detach()  # (h*w, head_dim/2) complex
        if freqs.shape[0] != tokens_hw[0] * tokens_hw[1]:
            raise ValueError(f"rotary table of {freqs.shape[0]} positions for a {tokens_hw} grid")
        self.register_buffer("cos", freqs.real.float().contiguous(), persistent=False)
        self.register_buffer("sin", freqs.imag.float().contiguous(), persistent=False)

    def rotate(self, x: torch.Tensor) -> torch.Tensor:  # B, heads, N, hd (halves layout)
        return rotate_halves(x, self.cos, self.sin)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # B, h, w, C -> B, h, w, C
        (h, w), heads, hd = self.tokens_hw, self.num_heads, self.head_dim
        n = h * w
        q, k, v = self.qkv(x).reshape(-1, n, 3, heads, hd).permute(2, 0, 3, 1, 4).unbind(0)  # B, heads, N, hd each
        q, k = self.rotate(q), self.rotate(k)
        attn = torch.matmul(q * self.scale, k.transpose(-2, -1)).softmax(dim=-1)
        out = torch.matmul(attn, v).permute(0, 2, 1, 3).reshape(-1, h, w, self.dim)
        return self.proj(out)


class RotaryBlock(nn.Module):
    """The official ``Block`` with a static window partition; parameter names unchanged."""

    def __init__(self, official: nn.Module, grid_hw: tuple[int, int]):
        super().__init__()
        if not isinstance(official.ls1, nn.Identity) or not isinstance(official.ls2, nn.Identity):
            raise ValueError("SAM 3's blocks have no layer scale")
        self.windows: WindowPartition | None
        self.attn = RotaryAttention(official.attn, copy_vitdet_block(self, official, grid_hw))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # B, H, W, C
        shortcut = x
        x = self.norm1(x)
        x = self.windows.unpartition(self.attn(self.windows(x))) if self.windows is not None else self.attn(x)
        x = shortcut + x
        return x + self.mlp(self.norm2(x))


def _require_heads(backbone: nn.Module, heads: nn.Module | None) -> None:
    if (backbone.vision_backbone.sam2_convs is not None) != (heads is not None):
        raise ValueError("the interactive neck (add_sam2_neck) and the interactive heads come together")


class Sam3VisionEncoder(nn.Module):
    """The official ``SAM3VLBackbone.forward_image`` as a tuple of feature maps, then the interactive predictor's
    features as ``Sam3Processor.set_image`` (``conv_s0``/``conv_s1``) and ``Sam3Image.predict_inst``
    (``_prepare_backbone_features``, ``+ no_mem_embed``, back to maps) prepare them (the reference side: no
    rewrite)."""

    def __init__(self, backbone: nn.Module, heads: nn.Module | None = None):
        super().__init__()
        _require_heads(backbone, heads)
        self.backbone, self.heads = backbone, heads

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.backbone.forward_image(image)
        if self.heads is None:
            return tuple(out["backbone_fpn"])
        # the interactive neck's maps: forward_image's one nested output (the official key names SAM 2, whose heads
        # they feed)
        (interactive,) = (value for value in out.values() if isinstance(value, dict))
        fpn = list(interactive["backbone_fpn"])
        fpn[0] = self.heads.sam_mask_decoder.conv_s0(fpn[0])
        fpn[1] = self.heads.sam_mask_decoder.conv_s1(fpn[1])
        sizes = [tuple(f.shape[-2:]) for f in fpn]
        _, feats, _, _ = self.heads._prepare_backbone_features({"backbone_fpn": fpn, "vision_pos_enc": fpn})
        feats[-1] = feats[-1] + self.heads.no_mem_embed
        maps = [f.permute(1, 2, 0).view(f.shape[1], -1, *size) for f, size in zip(feats, sizes)]
        return tuple(out["backbone_fpn"]) + (maps[2], maps[0], maps[1])


class ExportableSam3VisionEncoder(nn.Module):
    """The rewrite of ``SAM3VLBackbone``'s vision side for its built input size; see the module docstring."""

    def __init__(self, backbone: nn.Module, heads: nn.Module | None = None):
        super().__init__()
        from sam3.model.vitdet import get_abs_pos

        _require_heads(backbone, heads)
        neck = backbone.vision_backbone
        trunk = neck.trunk
        if trunk.retain_cls_token or trunk.pos_embed is None or not trunk.tile_abs_pos:
            raise ValueError("SAM 3's trunk tiles an absolute position table and keeps no class token")
        grid = next(int(b.attn.input_size[0]) for b in trunk.blocks if b.window_size == 0)  # a global block's grid
        self.grid = grid
        self.patch_embed = copy.deepcopy(trunk.patch_embed.proj)
        with torch.no_grad():
            table = get_abs_pos(trunk.pos_embed, trunk.pretrain_use_cls_token, (grid, grid), False, tiling=True)
        self.register_buffer("pos_table", table.detach().clone(), persistent=False)  # 1, H, W, C
        self.ln_pre = copy.deepcopy(trunk.ln_pre)
        last = trunk.full_attn_ids[-1]
        self.blocks = nn.ModuleList(RotaryBlock(b, (grid, grid)) for b in trunk.blocks[:last + 1])
        self.ln_post = copy.deepcopy(trunk.ln_post)
        kept = len(neck.convs) - int(backbone.scalp)
        self.convs = nn.ModuleList(copy.deepcopy(c) for c in neck.convs[:kept])
        self.sam2_convs = self.conv_s0 = self.conv_s1 = self.no_mem_embed = None
        if heads is not None:
            self.sam2_convs = nn.ModuleList(copy.deepcopy(c) for c in neck.sam2_convs[:kept])
            self.conv_s0 = copy.deepcopy(heads.sam_mask_decoder.conv_s0)
            self.conv_s1 = copy.deepcopy(heads.sam_mask_decoder.conv_s1)
            self.no_mem_embed = nn.Parameter(heads.no_mem_embed.detach().reshape(1, -1, 1, 1).clone())

    @property
    def output_names(self) -> tuple[str, ...]:
        names = tuple(f"backbone_fpn_{i}" for i in range(len(self.convs)))
        return names + (INTERACTIVE_OUTPUTS if self.sam2_convs is not None else ())

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = self.patch_embed(image).permute(0, 2, 3, 1) + self.pos_table  # B, H, W, C
        x = self.ln_pre(x)
        for block in self.blocks:
            x = block(x)
        x = self.ln_post(x).permute(0, 3, 1, 2)  # B, C, H, W
        levels = tuple(conv(x) for conv in self.convs)
        if self.sam2_convs is None:
            return levels
        s0, s1, low = (conv(x) for conv in self.sam2_convs)
        return levels + (low + self.no_mem_embed, self.conv_s0(s0), self.conv_s1(s1))


def rewrite_sam3_vision_encoder(backbone: nn.Module, heads: nn.Module | None = None) -> ExportableSam3VisionEncoder:
    """The export-friendly copy of the official vision backbone and, with the interactive neck, the per-image part of
    the interactive heads (the originals are left unchanged)."""
    return ExportableSam3VisionEncoder(backbone.eval(), heads).eval()


__all__ = ["INTERACTIVE_OUTPUTS", "ExportableSam3VisionEncoder", "RotaryAttention", "RotaryBlock", "Sam3VisionEncoder",
           "rewrite_sam3_vision_encoder"]
