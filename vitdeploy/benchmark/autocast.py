"""Eager PyTorch in FP16 / BF16 through ``torch.autocast``: the fair eager baseline for mixed-precision engines."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

AUTOCAST_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


class AutocastModule(nn.Module):
    """Runs ``module`` under ``torch.autocast(device_type, dtype)``; outputs are returned as float32.

    The wrapped module is used as is (not copied, not converted): autocast picks per-op precisions at
    run time, which is how PyTorch users run mixed precision, so the baseline is the eager model they
    would otherwise deploy.
    """

    def __init__(self, module: nn.Module, device_type: str, precision: str):
        super().__init__()
        if precision not in AUTOCAST_DTYPES:
            raise ValueError(f"autocast precision must be one of {sorted(AUTOCAST_DTYPES)}, not {precision!r}")
        self.module = module
        self.device_type = device_type
        self.dtype = AUTOCAST_DTYPES[precision]

    def forward(self, *args: torch.Tensor) -> Any:
        with torch.autocast(device_type=self.device_type, dtype=self.dtype):
            out = self.module(*args)
        if isinstance(out, (tuple, list)):
            return type(out)(o.float() for o in out)
        return out.float()
