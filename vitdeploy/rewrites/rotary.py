"""The rotary embedding in real arithmetic, channels in halves: what SAM 2's memory attention and SAM 3's ViT share.

The official code pairs channels (2i, 2i+1) as one complex number and multiplies by ``polar(1, angle)``; the complex
form exports with neither ONNX exporter, and its interleave is a slow copy in OpenVINO. Permuting each head's query and
key channels into halves (every x0, then every x1: :func:`deinterleave_order`, applied to the projection's rows) leaves
every q . k unchanged, and the rotation becomes two slices and one concatenation (:func:`rotate_halves`).
"""

from __future__ import annotations

import torch


def deinterleave_order(num_heads: int, head_dim: int) -> torch.Tensor:
    """Feature order that puts each head's (x0, x1) pairs as halves: per head ``0, 2, 4, ..., 1, 3, 5, ...``."""
    per_head = torch.cat([torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)])
    return torch.cat([h * head_dim + per_head for h in range(num_heads)])


def rotate_halves(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``view_as_complex(x) * polar(1, angle)`` in real arithmetic, ``x``'s last axis in halves: real parts, then
    imaginary parts, in and out; ``cos``/``sin`` of each pair's angle."""
    half = x.shape[-1] // 2
    x0, x1 = x[..., :half], x[..., half:]
    return torch.cat([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1)


__all__ = ["deinterleave_order", "rotate_halves"]
