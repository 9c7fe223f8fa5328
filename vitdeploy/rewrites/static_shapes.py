"""Window partitioning, relative-position tables and position-embedding resampling, fixed at construction.

Each piece here replaces a function of ``segment_anything.modeling.image_encoder`` that decides
padding, index grids or interpolation from tensor shapes at run time. The decisions are made once,
for the static token grid, and stored as non-persistent buffers (so state dicts are unchanged).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn


class WindowPartition(nn.Module):
    """Static ``window_partition``: pad the token grid to a multiple of the window, cut it into windows.

    The original computes ``pad_h``/``pad_w`` from ``x.shape`` and branches on them at run time; here
    they are constants and the pad is a fixed ``Pad`` node (or absent).
    """

    def __init__(self, grid_hw: tuple[int, int], window_size: int, channels: int):
        super().__init__()
        self.channels = channels
        h, w = grid_hw
        self.window_size = window_size
        self.pad_h = (window_size - h % window_size) % window_size
        self.pad_w = (window_size - w % window_size) % window_size
        self.padded_hw = (h + self.pad_h, w + self.pad_w)
        self.num_windows_hw = (self.padded_hw[0] // window_size, self.padded_hw[1] // window_size)
        self.grid_hw = grid_hw
        self.padding = (0, 0, 0, self.pad_w, 0, self.pad_h) if (self.pad_h or self.pad_w) else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # B, H, W, C -> B*nW, ws, ws, C
        ws, (nh, nw), channels = self.window_size, self.num_windows_hw, self.channels
        if self.padding is not None:
            x = F.pad(x, self.padding)
        x = x.reshape(-1, nh, ws, nw, ws, channels)  # B, nh, ws, nw, ws, C
        return x.permute(0, 1, 3, 2, 4, 5).reshape(-1, ws, ws, channels)

    def unpartition(self, windows: torch.Tensor) -> torch.Tensor:  # B*nW, ws, ws, C -> B, H, W, C
        ws, (nh, nw) = self.window_size, self.num_windows_hw
        (hp, wp), (h, w), channels = self.padded_hw, self.grid_hw, self.channels
        x = windows.reshape(-1, nh, nw, ws, ws, channels).permute(0, 1, 3, 2, 4, 5)  # B, nh, ws, nw, ws, C
        x = x.reshape(-1, hp, wp, channels)
        if self.padding is not None:
            x = x[:, :h, :w, :]
        return x


def rel_pos_gather_matrix(q_size: int, k_size: int, table_len: int) -> torch.Tensor:
    """Matrix ``M`` (q_size*k_size, table_len) with ``M @ rel_pos == get_rel_pos(q, k, rel_pos)`` flattened.

    ``get_rel_pos`` is linear in the table: it linearly interpolates the table to ``2*max(q, k)-1``
    rows when the checkpoint was trained for another size, then gathers rows with an index grid built
    by ``arange``. Running the official function on an identity table yields exactly that linear map
    (one-hot rows when no interpolation is needed), so the index grid and the interpolation weights
    are resolved once, by the official code itself.
    """
    from segment_anything.modeling.image_encoder import get_rel_pos

    with torch.no_grad():
        eye = torch.eye(table_len, dtype=torch.float32)
        return get_rel_pos(q_size, k_size, eye).reshape(q_size * k_size, table_len).contiguous()


def bicubic_resample_matrix(src: int, dst: int) -> torch.Tensor:
    """Matrix ``A`` (dst, src) such that ``A @ v`` is ``F.interpolate(v, dst, mode='bicubic')`` along one axis.

    Bicubic interpolation (align_corners=False, as ViTDet's ``get_abs_pos`` and timm use) is separable,
    so the 2-D resample of a position embedding is ``A_h @ P @ A_w^T``.
    """
    with torch.no_grad():
        eye = torch.eye(src, dtype=torch.float32).reshape(1, src, src, 1)  # channel i = one-hot at row i
        out = F.interpolate(eye, size=(dst, 1), mode="bicubic", align_corners=False)  # 1, src, dst, 1
        return out[0, :, :, 0].t().contiguous()


def copy_vitdet_block(block: nn.Module, official: nn.Module, grid_hw: tuple[int, int],
                      qkv_windows: bool = False) -> tuple[int, int]:
    """Set up a rewritten ViTDet ``Block`` (SAM's, SAM 3's) from the official one: its norms and MLP copied (the same
    parameter names), its window partition fixed for ``grid_hw`` (and, with ``qkv_windows``, one for the qkv's
    three-times-wider tokens); returns the token grid its attention runs on (a window, or the whole grid)."""
    block.norm1 = copy.deepcopy(official.norm1)
    block.norm2 = copy.deepcopy(official.norm2)
    block.mlp = copy.deepcopy(official.mlp)
    block.window_size = int(official.window_size)
    dim = official.attn.qkv.in_features
    windowed = block.window_size > 0
    block.windows = WindowPartition(grid_hw, block.window_size, dim) if windowed else None
    if qkv_windows:
        block.qkv_windows = WindowPartition(grid_hw, block.window_size, 3 * dim) if windowed else None
    return (block.window_size, block.window_size) if windowed else grid_hw
