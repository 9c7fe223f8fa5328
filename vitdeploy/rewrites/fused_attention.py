"""SAM attention with the decomposed relative-position term folded into the query/key products.

The official attention adds ``rel_h[q, h_k] + rel_w[q, w_k]`` to the scaled scores ``q.k / sqrt(d)``.
That additive (N, N) bias per head is what keeps runtimes off their fused (flash) attention kernels:
ONNX Runtime's CPU flash path takes no bias, TensorRT's fusion wants a plain BMM-Softmax-BMM. The
same sum is a dot product of augmented vectors, exactly:

    q_aug = [q * scale, rel_h(q), rel_w(q)]                  (hd + kh + kw values per query)
    k_aug = [k, onehot(h_k), onehot(w_k)]                     (hd + kh + kw values per key)
    q_aug . k_aug = scale * q.k + rel_h[q, h_k] + rel_w[q, w_k]

so attention becomes plain scaled-dot-product attention with scale 1. ``rel_h``/``rel_w`` are the
small (N, kh) and (N, kw) products :class:`ExportableAttention` computes already (no N x N tensor);
``onehot`` is a constant buffer fixed at construction for the static token grid. The price is a
longer Q.K^T reduction (hd + kh + kw instead of hd: 192 instead of 64 for ViT-B's global blocks at
1024 px); what it buys is that no (N, N) tensor is ever built outside the fused kernel.

Two kernels, chosen at construction (the export target decides):

* ``sdpa``: scaled-dot-product attention written as ``softmax(q_aug @ k_aug^T) @ v`` -> standard
  ONNX MatMul, Softmax, MatMul with nothing in between, the pattern TensorRT fuses. Written out
  rather than through ``F.scaled_dot_product_attention``, whose exporter translation reads tensor
  shapes (Shape nodes) when the batch axis is dynamic. With ``pad_value=True`` the values are
  zero-padded to the query/key head size, because TensorRT documents one head size H for K and V in
  its fused attention; the padded output columns are sliced off (zero weights: the result is unchanged).
* ``ort_mha``: :func:`vitdeploy.rewrites.attention_ops.ort_multihead_attention`, exported as ONNX
  Runtime's contrib ``MultiHeadAttention`` (CPU flash attention; query/key and value head sizes may differ).

Parameter names are the official ones (``qkv``, ``proj``, ``rel_pos_h``, ``rel_pos_w``), so
``load_state_dict(strict=True)`` still proves the weights; the new buffers are non-persistent.
"""

from __future__ import annotations

import copy
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from vitdeploy.errors import InputError
from vitdeploy.relpos_layout import onehot_key_table
from vitdeploy.rewrites.attention_ops import ort_multihead_attention
from vitdeploy.rewrites.sam_encoder import ExportableAttention, ExportableImageEncoder

AttentionKernel = Literal["sdpa", "ort_mha"]
KERNELS = ("sdpa", "ort_mha")


def key_onehot(head_dim: int, h: int, w: int) -> torch.Tensor:
    """(h*w, head_dim + h + w): zeros, then one-hot of the key's row, then one-hot of its column
    (:func:`vitdeploy.relpos_layout.onehot_key_table`, the layout the fused CPU kernel reads)."""
    return torch.from_numpy(onehot_key_table(head_dim, h, w))


class FusedAttention(nn.Module):
    """:class:`ExportableAttention` as plain scaled-dot-product attention over augmented queries/keys.

    Differs from the official ``Attention`` (and from :class:`ExportableAttention`) only in how the
    rel-pos term reaches the scores (see the module docstring); the numbers are the same up to float
    summation order.
    """

    def __init__(self, source: ExportableAttention, kernel: AttentionKernel = "sdpa", pad_value: bool = False):
        super().__init__()
        if kernel not in KERNELS:
            raise InputError(f"unknown attention kernel '{kernel}': use one of {', '.join(KERNELS)}")
        if pad_value and kernel != "sdpa":
            raise InputError("pad_value applies to the 'sdpa' kernel only (ONNX Runtime's MultiHeadAttention takes other value sizes)")
        if not isinstance(source, ExportableAttention):
            raise InputError(f"FusedAttention rewrites ExportableAttention, got {type(source).__name__}")
        self.qkv = copy.deepcopy(source.qkv)
        self.proj = copy.deepcopy(source.proj)
        self.num_heads = source.num_heads
        self.scale = source.scale
        self.dim = source.dim
        self.head_dim = source.head_dim
        self.tokens_hw = source.tokens_hw
        self.use_rel_pos = source.use_rel_pos
        self.kernel = kernel
        self.pad_value = pad_value
        h, w = self.tokens_hw
        self.aug_dim = self.head_dim + (h + w if self.use_rel_pos else 0)
        if self.use_rel_pos:
            self.rel_pos_h = nn.Parameter(source.rel_pos_h.detach().clone())
            self.rel_pos_w = nn.Parameter(source.rel_pos_w.detach().clone())
            self.register_buffer("rel_h_map", source.rel_h_map.clone(), persistent=False)
            self.register_buffer("rel_w_map", source.rel_w_map.clone(), persistent=False)
            self.register_buffer("key_onehot", key_onehot(self.head_dim, h, w), persistent=False)

    def augmented_qk(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(q_aug, k_aug), each (B, N, heads, aug_dim), from q and k (B, N, heads, hd)."""
        if not self.use_rel_pos:
            return q * self.scale, k
        (h, w), heads, hd = self.tokens_hw, self.num_heads, self.head_dim
        rh = torch.matmul(self.rel_h_map, self.rel_pos_h).reshape(h, h, hd)  # qh, kh, C
        rw = torch.matmul(self.rel_w_map, self.rel_pos_w).reshape(w, w, hd)  # qw, kw, C
        # rel_h[b, qh, qw, n, kh] = q[b, qh, qw, n, :] . rh[qh, kh, :]: batch over qh.
        rel_h = torch.matmul(q.reshape(-1, h, w * heads, hd), rh.transpose(1, 2))  # B, qh, qw*heads, kh
        rel_h = rel_h.reshape(-1, h * w, heads, h)  # B, N, heads, kh
        # rel_w[b, qh, qw, n, kw] = q[b, qh, qw, n, :] . rw[qw, kw, :]: batch over qw.
        q_t = q.reshape(-1, h, w, heads, hd).transpose(1, 2).reshape(-1, w, h * heads, hd)  # B, qw, qh*heads, C
        rel_w = torch.matmul(q_t, rw.transpose(1, 2)).reshape(-1, w, h, heads, w)  # B, qw, qh, heads, kw
        rel_w = rel_w.transpose(1, 2).reshape(-1, h * w, heads, w)  # B, N, heads, kw
        q_aug = torch.cat([q * self.scale, rel_h, rel_w], dim=-1)  # B, N, heads, hd+kh+kw
        # Pad + constant add instead of concatenating an expanded table: no batch size is read from a shape.
        k_aug = F.pad(k, (0, h + w)) + self.key_onehot[None, :, None, :]  # B, N, heads, hd+kh+kw
        return q_aug, k_aug

    def attend(self, qkv: torch.Tensor) -> torch.Tensor:  # B, h, w, 3C -> B, h, w, C (before proj)
        """Attention of the ``qkv`` projection's output, without the output projection."""
        (h, w), heads, hd, da = self.tokens_hw, self.num_heads, self.head_dim, self.aug_dim
        n = h * w
        qkv = qkv.reshape(-1, n, 3, heads, hd)  # B, N, 3, heads, hd
        q, k, v = qkv.unbind(2)  # B, N, heads, hd each
        q_aug, k_aug = self.augmented_qk(q, k)
        if self.kernel == "ort_mha":
            out = ort_multihead_attention(q_aug.reshape(-1, n, heads * da), k_aug.reshape(-1, n, heads * da),
                                          v.reshape(-1, n, heads * hd), heads, 1.0)  # B, N, heads*hd
        else:
            if self.pad_value and da > hd:
                v = F.pad(v, (0, da - hd))  # B, N, heads, da (zero columns)
            scores = torch.matmul(q_aug.transpose(1, 2), k_aug.permute(0, 2, 3, 1))  # B, heads, N, N (scale inside q_aug)
            out = torch.matmul(scores.softmax(dim=-1), v.transpose(1, 2))  # B, heads, N, hd or da
            if self.pad_value and da > hd:
                out = out[..., :hd]
            out = out.transpose(1, 2)  # B, N, heads, hd
        return out.reshape(-1, h, w, self.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # B, h, w, C
        return self.proj(self.attend(self.qkv(x)))


def fuse_sam_attention(encoder: ExportableImageEncoder, kernel: AttentionKernel = "sdpa",
                       pad_value: bool = False) -> ExportableImageEncoder:
    """A copy of a rewritten encoder whose every block uses :class:`FusedAttention` (the argument is not modified).

    Raises:
        InputError: ``encoder`` is not an :class:`ExportableImageEncoder` or the kernel is unknown.
    """
    if not isinstance(encoder, ExportableImageEncoder):
        raise InputError(f"fuse_sam_attention takes the rewritten encoder (rewrite_sam_image_encoder), got {type(encoder).__name__}")
    if kernel not in KERNELS:
        raise InputError(f"unknown attention kernel '{kernel}': use one of {', '.join(KERNELS)}")
    fused = copy.deepcopy(encoder)
    for block in fused.blocks:
        block.attn = FusedAttention(block.attn, kernel, pad_value=pad_value)
    fused.load_state_dict(encoder.state_dict(), strict=True)  # same names, same weights
    return fused.eval()


__all__ = ["KERNELS", "AttentionKernel", "FusedAttention", "fuse_sam_attention", "key_onehot"]
