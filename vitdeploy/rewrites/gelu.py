"""Exact GELU written in the node order ONNX Runtime's graph optimizer fuses into one ``Gelu`` kernel.

``nn.GELU()`` (exact, erf form) exports through the dynamo exporter as
``Div(x, sqrt 2) -> Erf -> Add 1 -> Mul 0.5 -> Mul x``. ONNX Runtime's in-session ``GeluFusion``
(level ``extended``) knows two orders only, ``0.5 x * (1 + erf)`` and ``(x * (1 + erf)) * 0.5``, so
that graph keeps five element-wise kernels per MLP; measured on the full-size ViT-B encoder
(ONNX Runtime 1.31, CPU): 12 Erf nodes left in the optimized graph. :class:`ErfGelu` computes the
same function as ``(x * (1 + erf(x / sqrt 2))) * 0.5`` -- the second order -- and the optimizer then
replaces it with one ``com.microsoft.Gelu`` node. No parameters; the numbers are GELU's up to float
rounding order.
"""

from __future__ import annotations

import copy
import math

import torch
from torch import nn

from vitdeploy.errors import ExportError

_SQRT2 = math.sqrt(2.0)


class ErfGelu(nn.Module):
    """Exact (erf) GELU as ``(x * (1 + erf(x / sqrt(2)))) * 0.5``: see the module docstring."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * (1.0 + torch.erf(x / _SQRT2))) * 0.5


def fusable_gelu(encoder: nn.Module) -> nn.Module:
    """A copy of a rewritten SAM encoder whose MLP activations are :class:`ErfGelu` (the argument is not modified).

    Raises:
        ExportError: an MLP activation is not the exact ``nn.GELU`` this form reproduces.
    """
    out = copy.deepcopy(encoder)
    for i, block in enumerate(out.blocks):
        act = block.mlp.act
        if type(act) is not nn.GELU or act.approximate != "none":
            raise ExportError(f"blocks.{i}.mlp.act is {act!r}: the ONNX Runtime GELU form reproduces exact nn.GELU() only")
        block.mlp.act = ErfGelu()
    return out


__all__ = ["ErfGelu", "fusable_gelu"]
