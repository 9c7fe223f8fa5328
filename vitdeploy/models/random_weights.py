"""Seeded random weights for every model family: the ``--random-weights`` exports, the tests and the benchmarks.

One home for the rule every family's random model follows, so a file's ``random_seed`` rebuilds the same
weights whichever family wrote it. It lives with the models (the layer that builds them), below
``families``, which records the seed as provenance (:meth:`vitdeploy.families.base.ExportOptions.provenance`).
"""

from __future__ import annotations

import torch
from torch import nn


def randomize_parameters(module: nn.Module, seed: int, std: float = 0.02) -> nn.Module:
    """Give every parameter seeded, non-zero random values, in place; returns ``module``.

    Official SAM initialises the position embedding and relative-position tables to zero and
    LayerNorm to (1, 0); random weights that kept those would skip whole code paths in parity tests.
    """
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(module.named_parameters()):
            noise = torch.randn(param.shape, generator=gen, dtype=torch.float32)
            if _is_norm_weight(name, param):
                param.copy_(1.0 + 0.1 * noise)
            elif param.ndim >= 2 and name.rsplit(".", 1)[-1] == "weight":
                fan_in = param[0].numel()
                param.copy_(noise / fan_in**0.5)
            else:
                param.copy_(std * noise)
    return module


def _is_norm_weight(name: str, param: torch.Tensor) -> bool:
    return param.ndim == 1 and name.endswith("weight") and bool(torch.all(param == 1))


__all__ = ["randomize_parameters"]
