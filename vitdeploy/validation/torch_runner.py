"""Eager PyTorch behind the Runner contract, so parity and latency treat every backend alike."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import numpy as np
import torch
from torch import nn

from vitdeploy.runtime.backends.base import Runner, TensorMeta


class TorchRunner(Runner):
    """Runs an ``nn.Module`` on CPU (or CUDA) with NumPy in and out; the module is not modified.

    An eager module takes whatever its ``forward`` takes: shapes are not known (empty in
    :meth:`input_metadata`), inputs are float32 and outputs come back as float32. ``autocast`` (``bf16``, ``fp16``):
    the module runs under ``torch.autocast(device, dtype)``, as an official implementation that publishes it runs
    (SAM 3's notebooks: BF16 autocast for the whole notebook); the module itself is unchanged.
    """

    backend = "torch"

    def __init__(self, module: nn.Module, input_names: list[str], output_names: list[str],
                 threads: int | None = None, device: str = "cpu", metadata: dict[str, Any] | None = None,
                 autocast: str | None = None):
        self.module = module.eval()
        self.input_names = list(input_names)
        self.output_names = list(output_names)
        self.device = torch.device(device)
        self.threads = threads
        self.autocast = {"bf16": torch.bfloat16, "fp16": torch.float16}[autocast] if autocast else None
        self.name = f"torch-eager-{device}" + (f"-{autocast}-autocast" if autocast else "")
        self.provider = ""
        self.version = str(torch.__version__)
        self.warnings: list[str] = []
        self.metadata = dict(metadata or {})
        if threads:
            torch.set_num_threads(int(threads))

    def input_metadata(self) -> dict[str, TensorMeta]:
        return {n: TensorMeta(n, (), np.dtype(np.float32)) for n in self.input_names}

    def output_metadata(self) -> dict[str, TensorMeta]:
        return {n: TensorMeta(n, (), np.dtype(np.float32)) for n in self.output_names}

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        args = [torch.from_numpy(np.ascontiguousarray(feeds[n])).to(self.device) for n in self.input_names]
        mixed = torch.autocast(self.device.type, self.autocast) if self.autocast is not None else nullcontext()
        with torch.inference_mode(), mixed:
            out = self.module(*args)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return {name: o.detach().float().cpu().numpy() for name, o in zip(self.output_names, outs)}
