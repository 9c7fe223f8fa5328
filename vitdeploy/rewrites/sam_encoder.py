"""Export-friendly SAM image encoder (``segment_anything.modeling.ImageEncoderViT``), same weights.

What differs from the official module, and why:

* Window partition/unpartition: padding, window counts and the crop are fixed for the static token
  grid (official: computed from ``x.shape`` at run time -> Shape/Gather/Pad chains in the graph).
  Where the grid needs padding, the ``qkv`` and ``proj`` GEMMs run on the real tokens only (the
  official block runs them on the zero padding too: 20% more rows at 1024 px); see
  :meth:`ExportableBlock.windowed_attention`.
* Relative positions: ``get_rel_pos``'s interpolation and ``arange`` index grid are resolved at
  construction into a constant gather matrix (official: Range/Mod/Cast nodes at run time), and the
  decomposed term uses broadcast MatMul (official: ``einsum``, exported as an Einsum node that
  TensorRT and ONNX Runtime run as a generic, slow kernel).
* Neck LayerNorm2d: channel statistics by MatMul (or the native LayerNormalization op on request).
* Another export size than the checkpoint's: the absolute position embedding is resampled bicubically
  (as ViTDet/timm) by two constant matrices, the rel-pos tables interpolated exactly as
  ``get_rel_pos`` would. The stored parameters keep the checkpoint's shapes.
* No reads of ``x.shape``: every reshape uses static sizes and ``-1`` for the batch, so a dynamic
  batch axis exports without Shape nodes.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from vitdeploy.errors import ExportError
from vitdeploy.rewrites.layernorm2d import LayerNorm2dMode, rewrite_layernorm2d
from vitdeploy.rewrites.static_shapes import (WindowPartition, bicubic_resample_matrix, copy_vitdet_block,
                                              rel_pos_gather_matrix)
from vitdeploy.sizes import require_patch_multiple



class ExportableAttention(nn.Module):
    """Multi-head attention with decomposed relative positions for a static (h, w) token grid.

    Parameters keep the official ``Attention`` names: ``qkv``, ``proj``, ``rel_pos_h``, ``rel_pos_w``.
    """

    def __init__(self, official: nn.Module, tokens_hw: tuple[int, int]):
        super().__init__()
        self.qkv = copy.deepcopy(official.qkv)
        self.proj = copy.deepcopy(official.proj)
        self.num_heads = official.num_heads
        self.scale = float(official.scale)
        self.dim = self.qkv.in_features
        self.head_dim = self.dim // self.num_heads
        self.tokens_hw = tokens_hw
        self.use_rel_pos = bool(official.use_rel_pos)
        if self.use_rel_pos:
            self.rel_pos_h = nn.Parameter(official.rel_pos_h.detach().clone())
            self.rel_pos_w = nn.Parameter(official.rel_pos_w.detach().clone())
            h, w = tokens_hw
            self.register_buffer("rel_h_map", rel_pos_gather_matrix(h, h, self.rel_pos_h.shape[0]), persistent=False)
            self.register_buffer("rel_w_map", rel_pos_gather_matrix(w, w, self.rel_pos_w.shape[0]), persistent=False)

    def rel_pos_bias(self, q: torch.Tensor) -> torch.Tensor:
        """Decomposed rel-pos term (B*heads, hw, hw) from unscaled queries, without einsum."""
        h, w = self.tokens_hw
        rh = torch.matmul(self.rel_h_map, self.rel_pos_h).reshape(h, h, self.head_dim)  # qh, kh, C
        rw = torch.matmul(self.rel_w_map, self.rel_pos_w).reshape(w, w, self.head_dim)  # qw, kw, C
        r_q = q.reshape(-1, h, w, self.head_dim)  # B*heads, qh, qw, C
        rel_h = torch.matmul(r_q, rh.transpose(1, 2))  # B*heads, qh, qw, kh
        rel_w = torch.matmul(r_q.transpose(1, 2), rw.transpose(1, 2)).transpose(1, 2)  # B*heads, qh, qw, kw
        bias = rel_h.unsqueeze(-1) + rel_w.unsqueeze(-2)  # B*heads, qh, qw, kh, kw
        return bias.reshape(-1, h * w, h * w)

    def attend(self, qkv: torch.Tensor) -> torch.Tensor:  # B, h, w, 3C -> B, h, w, C (before proj)
        """Attention of the ``qkv`` projection's output, without the output projection."""
        (h, w), heads, hd = self.tokens_hw, self.num_heads, self.head_dim
        n = h * w
        qkv = qkv.reshape(-1, n, 3, heads, hd).permute(2, 0, 3, 1, 4)  # 3, B, heads, N, hd
        q, k, v = qkv.reshape(3, -1, n, hd).unbind(0)  # B*heads, N, hd each
        attn = torch.matmul(q * self.scale, k.transpose(-2, -1))  # B*heads, N, N
        if self.use_rel_pos:
            attn = attn + self.rel_pos_bias(q)
        attn = attn.softmax(dim=-1)
        out = torch.matmul(attn, v).reshape(-1, heads, h, w, hd).permute(0, 2, 3, 1, 4)  # B, h, w, heads, hd
        return out.reshape(-1, h, w, self.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # B, h, w, C
        return self.proj(self.attend(self.qkv(x)))


class ExportableBlock(nn.Module):
    """Official ``Block`` with a static window partition; parameter names unchanged."""

    def __init__(self, official: nn.Module, grid_hw: tuple[int, int]):
        super().__init__()
        self.windows: WindowPartition | None
        self.qkv_windows: WindowPartition | None
        self.attn = ExportableAttention(official.attn, copy_vitdet_block(self, official, grid_hw, qkv_windows=True))

    def windowed_attention(self, x: torch.Tensor) -> torch.Tensor:  # B, H, W, C -> B, H, W, C
        """Window attention with the ``qkv``/``proj`` GEMMs on the unpadded grid only.

        The official block pads the grid with zero tokens and runs ``qkv`` and ``proj`` over the
        padded windows too (at 1024 px: 70x70 = 4900 tokens instead of 64x64 = 4096). A zero token's
        qkv is the bias alone, so ``qkv(pad(x)) == pad(x @ W^T) + b`` exactly; the padded tokens still
        take part in attention as keys, as in the official code. ``proj`` is per token, so it runs
        after the crop. Without padding this is the plain partition -> attention -> unpartition.
        """
        attn, windows = self.attn, self.windows
        if windows.padding is None:
            return windows.unpartition(attn(windows(x)))
        qkv = self.qkv_windows(F.linear(x, attn.qkv.weight))  # B*nW, ws, ws, 3C; padded tokens are 0
        if attn.qkv.bias is not None:
            qkv = qkv + attn.qkv.bias  # ... and now exactly the bias, as qkv(0) is
        return attn.proj(windows.unpartition(attn.attend(qkv)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # B, H, W, C
        shortcut = x
        x = self.norm1(x)
        x = self.windowed_attention(x) if self.windows is not None else self.attn(x)
        x = shortcut + x
        return x + self.mlp(self.norm2(x))


class ExportableImageEncoder(nn.Module):
    """Export-friendly SAM image encoder for one static input size; see the module docstring."""

    def __init__(self, official: nn.Module, input_size: int | None = None, layernorm2d: LayerNorm2dMode = "matmul"):
        super().__init__()
        _check_official_encoder(official)
        patch = int(official.patch_embed.proj.kernel_size[0])
        self.input_size = int(official.img_size if input_size is None else input_size)
        require_patch_multiple(self.input_size, patch, "input size")
        self.patch_size = patch
        grid = self.input_size // patch
        self.grid_hw = (grid, grid)
        self.embed_dim = official.patch_embed.proj.out_channels
        self.patch_embed = copy.deepcopy(official.patch_embed)
        if official.pos_embed is not None:
            self.pos_embed: nn.Parameter | None = nn.Parameter(official.pos_embed.detach().clone())
            src_h, src_w = self.pos_embed.shape[1], self.pos_embed.shape[2]
            self.resample_pos = (src_h, src_w) != self.grid_hw
            if self.resample_pos:
                self.register_buffer("pos_resample_h", bicubic_resample_matrix(src_h, grid), persistent=False)
                self.register_buffer("pos_resample_w", bicubic_resample_matrix(src_w, grid), persistent=False)
        else:
            self.pos_embed = None
            self.resample_pos = False
        self.blocks = nn.ModuleList(ExportableBlock(blk, self.grid_hw) for blk in official.blocks)
        conv1, ln1, conv2, ln2 = official.neck
        out_chans = conv1.out_channels
        self.neck = nn.Sequential(
            copy.deepcopy(conv1),
            rewrite_layernorm2d(ln1, out_chans, self.grid_hw, layernorm2d),
            copy.deepcopy(conv2),
            rewrite_layernorm2d(ln2, out_chans, self.grid_hw, layernorm2d),
        )
        self.out_chans = out_chans
        # Proof that the weights are the official ones, under the official names.
        self.load_state_dict(official.state_dict(), strict=True)
        self.eval()

    def position_embedding(self) -> torch.Tensor:
        """(1, H, W, C) absolute position embedding for the export grid."""
        pos = self.pos_embed
        if self.resample_pos:
            nchw = pos.permute(0, 3, 1, 2)  # 1, C, H0, W0
            nchw = torch.matmul(torch.matmul(self.pos_resample_h, nchw), self.pos_resample_w.t())  # 1, C, H, W
            pos = nchw.permute(0, 2, 3, 1)
        return pos

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # B, 3, S, S -> B, out_chans, S/p, S/p
        x = self.patch_embed(x)  # B, H, W, C
        if self.pos_embed is not None:
            x = x + self.position_embedding()
        for blk in self.blocks:
            x = blk(x)
        return self.neck(x.permute(0, 3, 1, 2))


def _check_official_encoder(module: nn.Module) -> None:
    """Refuse modules this rewrite was not written for, rather than rewrite them wrongly."""
    from segment_anything.modeling.image_encoder import Attention, Block, ImageEncoderViT, PatchEmbed

    if not isinstance(module, ImageEncoderViT):
        raise ExportError(f"expected segment_anything ImageEncoderViT, got {type(module).__name__}")
    if not isinstance(module.patch_embed, PatchEmbed):
        raise ExportError(f"unexpected patch_embed {type(module.patch_embed).__name__}: this rewrite supports PatchEmbed")
    for i, blk in enumerate(module.blocks):
        if type(blk) is not Block or type(blk.attn) is not Attention:
            raise ExportError(f"blocks.{i} is {type(blk).__name__}/{type(getattr(blk, 'attn', None)).__name__}: "
                              "this rewrite supports the official Block/Attention only")
    if len(module.neck) != 4:
        raise ExportError("unexpected neck layout: expected Conv2d, LayerNorm2d, Conv2d, LayerNorm2d")


def rewrite_sam_image_encoder(
    encoder: nn.Module, input_size: int | None = None, layernorm2d: LayerNorm2dMode = "matmul"
) -> ExportableImageEncoder:
    """Return an export-friendly copy of an official SAM image encoder (the argument is not modified).

    Args:
        encoder: ``segment_anything.modeling.ImageEncoderViT`` (official or fine-tuned).
        input_size: static export size; defaults to the encoder's own. Must be a multiple of the patch size.
        layernorm2d: ``"matmul"`` (channel statistics by MatMul) or ``"native"`` (LayerNormalization op).
    """
    return ExportableImageEncoder(encoder, input_size=input_size, layernorm2d=layernorm2d)
