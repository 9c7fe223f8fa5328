"""Export-friendly SAM 3 vision encoder (the official ViTDet trunk + dual neck, ``SAM3VLBackbone.forward_image``),
same weights, same numbers.

``forward(image) -> (backbone_fpn_0, backbone_fpn_1, backbone_fpn_2[, sam2_backbone_fpn_0, ...])``: the levels
``forward_image`` returns in ``backbone_fpn`` (the detector's) and ``sam2_backbone_out["backbone_fpn"]`` (the
interactive predictor's), highest resolution first, after ``scalp``. What differs from the official modules:

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

from vitdeploy.rewrites.static_shapes import WindowPartition


def deinterleave_order(num_heads: int, head_dim: int) -> torch.Tensor:
    """Feature order that puts each head's (x0, x1) pairs as halves: per head ``0, 2, 4, ..., 1, 3, 5, ...``."""
    per_head = torch.cat([torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)])
    return torch.cat([h * head_dim + per_head for h in range(num_heads)])


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
        half = self.head_dim // 2
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([x1 * self.cos - x2 * self.sin, x1 * self.sin + x2 * self.cos], dim=-1)

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
        self.norm1 = copy.deepcopy(official.norm1)
        self.norm2 = copy.deepcopy(official.norm2)
        self.mlp = copy.deepcopy(official.mlp)
        self.window_size = int(official.window_size)
        dim = official.attn.qkv.in_features
        if self.window_size > 0:
            self.windows: WindowPartition | None = WindowPartition(grid_hw, self.window_size, dim)
            tokens_hw = (self.window_size, self.window_size)
        else:
            self.windows = None
            tokens_hw = grid_hw
        self.attn = RotaryAttention(official.attn, tokens_hw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # B, H, W, C
        shortcut = x
        x = self.norm1(x)
        x = self.windows.unpartition(self.attn(self.windows(x))) if self.windows is not None else self.attn(x)
        x = shortcut + x
        return x + self.mlp(self.norm2(x))


class Sam3VisionEncoder(nn.Module):
    """The official ``SAM3VLBackbone.forward_image`` as a tuple of feature maps (the reference side: no rewrite)."""

    def __init__(self, backbone: nn.Module):
        super().__init__()
        self.backbone = backbone

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.backbone.forward_image(image)
        sam2 = out["sam2_backbone_out"]
        return tuple(out["backbone_fpn"]) + (tuple(sam2["backbone_fpn"]) if sam2 is not None else ())


class ExportableSam3VisionEncoder(nn.Module):
    """The rewrite of ``SAM3VLBackbone``'s vision side for its built input size; see the module docstring."""

    def __init__(self, backbone: nn.Module):
        super().__init__()
        from sam3.model.vitdet import get_abs_pos

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
        self.sam2_convs = (nn.ModuleList(copy.deepcopy(c) for c in neck.sam2_convs[:kept])
                           if neck.sam2_convs is not None else None)

    @property
    def output_names(self) -> tuple[str, ...]:
        names = tuple(f"backbone_fpn_{i}" for i in range(len(self.convs)))
        return names + (tuple(f"sam2_backbone_fpn_{i}" for i in range(len(self.convs))) if self.sam2_convs is not None else ())

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = self.patch_embed(image).permute(0, 2, 3, 1) + self.pos_table  # B, H, W, C
        x = self.ln_pre(x)
        for block in self.blocks:
            x = block(x)
        x = self.ln_post(x).permute(0, 3, 1, 2)  # B, C, H, W
        levels = tuple(conv(x) for conv in self.convs)
        return levels + (tuple(conv(x) for conv in self.sam2_convs) if self.sam2_convs is not None else ())


def rewrite_sam3_vision_encoder(backbone: nn.Module) -> ExportableSam3VisionEncoder:
    """The export-friendly copy of the official vision backbone (the original is left unchanged)."""
    return ExportableSam3VisionEncoder(backbone.eval()).eval()


__all__ = ["ExportableSam3VisionEncoder", "RotaryAttention", "RotaryBlock", "Sam3VisionEncoder", "deinterleave_order",
           "rewrite_sam3_vision_encoder"]
