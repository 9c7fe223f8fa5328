"""LayerNorm2d (channel-wise LayerNorm of an NCHW tensor) in two export-friendly forms."""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from vitdeploy.errors import ExportError, InputError

#: The two forms: ``matmul`` (channel statistics by MatMul: no reduction over the channel axis) or ``native``
#: (ONNX ``LayerNormalization`` over channels-last, opset >= 17, which TensorRT recognises).
LayerNorm2dMode = Literal["matmul", "native"]


class MatMulLayerNorm2d(nn.Module):
    """``segment_anything.modeling.common.LayerNorm2d`` with channel statistics computed by MatMul.

    Differences from the original: the mean and variance over the channel axis are products with a
    constant ``1/C`` row vector instead of ``mean(dim=1)``, and the spatial size is fixed at
    construction. Why: the original exports to ReduceMean over axis 1 of an NCHW tensor, which runtimes
    run as a strided reduction; a (1, C) x (C, H*W) MatMul is a GEMM every runtime runs well.
    Parameter names (``weight``, ``bias``) are the original's.
    """

    def __init__(self, num_channels: int, height: int, width: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(num_channels))
        self.bias = nn.Parameter(torch.zeros(num_channels))
        self.eps = eps
        self.num_channels = num_channels
        self.hw = (height, width)
        self.register_buffer("mean_row", torch.full((1, num_channels), 1.0 / num_channels), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c, (h, w) = self.num_channels, self.hw
        flat = x.reshape(-1, c, h * w)  # B, C, HW
        centered = flat - torch.matmul(self.mean_row, flat)  # B, C, HW
        var = torch.matmul(self.mean_row, centered * centered)  # B, 1, HW
        normed = centered / torch.sqrt(var + self.eps)
        out = normed * self.weight[:, None] + self.bias[:, None]
        return out.reshape(-1, c, h, w)


class NativeLayerNorm2d(nn.Module):
    """LayerNorm2d as NHWC ``layer_norm`` between two transposes.

    Exports to the ONNX ``LayerNormalization`` op (opset >= 17), which TensorRT recognises and keeps in
    FP32 inside FP16 engines; a hand-written mean/variance chain overflows FP16 once |x - mean| > 256.
    Parameter names (``weight``, ``bias``) are the original's.
    """

    def __init__(self, num_channels: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(num_channels))
        self.bias = nn.Parameter(torch.zeros(num_channels))
        self.eps = eps
        self.num_channels = num_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        nhwc = x.permute(0, 2, 3, 1)  # B, H, W, C
        out = nn.functional.layer_norm(nhwc, (self.num_channels,), self.weight, self.bias, self.eps)
        return out.permute(0, 3, 1, 2)  # B, C, H, W


def rewrite_layernorm2d(official: nn.Module, channels: int, grid_hw: tuple[int, int], mode: LayerNorm2dMode) -> nn.Module:
    """The export-friendly form ``mode`` of an official ``LayerNorm2d`` (SAM's and SAM 2's), with its weights loaded
    strictly; anything else, or an unknown mode, is refused."""
    if type(official).__name__ != "LayerNorm2d":
        raise ExportError(f"expected segment_anything LayerNorm2d, found {type(official).__name__}")
    if mode == "matmul":
        new: nn.Module = MatMulLayerNorm2d(channels, grid_hw[0], grid_hw[1], eps=official.eps)
    elif mode == "native":
        new = NativeLayerNorm2d(channels, eps=official.eps)
    else:
        raise InputError(f"unknown LayerNorm2d mode '{mode}': use 'matmul' or 'native'")
    new.load_state_dict(official.state_dict(), strict=True)
    return new
