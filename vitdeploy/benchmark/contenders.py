"""Contenders: a Runner plus what the report needs to know about it (backend, precision, device, batches)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vitdeploy.errors import InputError
from vitdeploy.runtime.runners import Runner

EAGER_PRECISIONS = ("fp32", "fp16", "bf16")


@dataclass
class Contender:
    """One thing to time.

    Attributes:
        label: unique name in the table, e.g. ``torch-eager fp16 cuda``.
        batch_range: (smallest, largest) batch the runner accepts; ``None`` for no limit.
        batch_note: why a batch outside the range is skipped (e.g. "static batch 1").
        synchronize: waits for the device after a run (GPU backends), or None.
    """

    label: str
    runner: Runner
    backend: str
    precision: str
    device: str
    batch_range: tuple[int, int] | None = None
    batch_note: str = ""
    synchronize: Callable[[], None] | None = None

    def skip_reason(self, batch: int) -> str | None:
        if self.batch_range is None or self.batch_range[0] <= batch <= self.batch_range[1]:
            return None
        return self.batch_note or f"batch outside {self.batch_range[0]}..{self.batch_range[1]}"


def input_template(runner: Any) -> dict[str, list[int | str]]:
    """Input shapes of a deployed runner, the batch axis (0) marked ``"batch"``.

    Raises:
        InputError: a symbolic axis other than the batch (the harness makes batch-shaped inputs only).
    """
    template: dict[str, list[int | str]] = {}
    for name, dims in runner.input_shapes().items():
        bad = [i for i, d in enumerate(dims) if i > 0 and not isinstance(d, int)]
        if bad:
            raise InputError(f"input '{name}' has dynamic axes {bad} besides the batch: benchmark times models whose only "
                             "dynamic axis is the batch")
        template[name] = ["batch", *dims[1:]]
    return template


def deployed_contender(path: str | Path, *, threads: int | None, device: str, gpu: int = 0,
                       fused_attention: bool = False, tf32: bool = False, allow_unverified: bool = False) -> Contender:
    """An ONNX file (ONNX Runtime on ``device``, optionally with the fused rel-pos kernel; FP32 unless ``tf32``)
    or a TensorRT plan (on CUDA device ``gpu``)."""
    from vitdeploy.runtime.loader import ENGINE_SUFFIXES, open_runner

    path = Path(path)
    runner = open_runner(path, threads=threads, ort_device=device, gpu=gpu, fused_attention=fused_attention,
                         tf32=tf32 and path.suffix.lower() not in ENGINE_SUFFIXES, allow_unverified=allow_unverified)
    precision = str(runner.metadata.get("precision", "fp32"))
    if path.suffix.lower() in ENGINE_SUFFIXES:
        name = runner.input_names[0]
        lo, hi = runner.input_range(name)  # type: ignore[attr-defined]
        gpu_name = runner.gpu.name  # type: ignore[attr-defined]
        return Contender(
            label=f"tensorrt {precision} ({path.name})", runner=runner, backend="tensorrt", precision=precision,
            device=f"cuda:{gpu} {gpu_name}", batch_range=(lo[0], hi[0]),
            batch_note=f"engine profile batch {lo[0]}..{hi[0]}" if lo[0] != hi[0] else f"engine built for batch {lo[0]}",
            synchronize=runner.synchronize,  # type: ignore[attr-defined]
        )
    first = next(iter(runner.input_shapes().values()))  # type: ignore[attr-defined]
    static = isinstance(first[0], int)
    fused = " + fused rel-pos kernel" if fused_attention else ""
    math = " tf32" if tf32 and device != "cpu" and precision == "fp32" else ""
    return Contender(
        label=f"onnxruntime-{device} {precision}{math}{fused} ({path.name})", runner=runner, backend="onnxruntime",
        precision=precision, device=device,
        batch_range=(first[0], first[0]) if static else None,
        batch_note=f"static batch {first[0]} (re-export with --dynamic-batch)" if static else "",
    )


def eager_contender(reference: Runner, *, metadata: dict[str, Any], checkpoint: str | None, precision: str, device: str,
                    threads: int | None, tf32: bool = False) -> Contender:
    """The official eager model (rebuilt from ``metadata`` as ``vitdeploy validate`` does) in FP32 or under autocast.

    ``reference`` supplies the input and output names (a deployed runner of the same model). On CUDA, FP32
    matmuls and cuDNN convolutions use TF32 only with ``tf32`` (PyTorch's cuDNN default is TF32 on): the
    same math as the ONNX Runtime contenders.
    """
    import torch

    from vitdeploy.benchmark.autocast import AutocastModule
    from vitdeploy.validation.references import eager_reference
    from vitdeploy.validation.torch_runner import TorchRunner

    if precision not in EAGER_PRECISIONS:
        raise InputError(f"eager precision '{precision}' is not one of {', '.join(EAGER_PRECISIONS)}")
    if device == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda: this PyTorch sees no CUDA GPU ('vitdeploy doctor' shows why); use --device cpu")
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
    module = eager_reference(metadata, checkpoint).to(device)
    if precision != "fp32":
        module = AutocastModule(module, device, precision)
    runner = TorchRunner(module, reference.input_names, reference.output_names, threads=threads, device=device, metadata=metadata)
    where = device if device == "cpu" else f"cuda:{torch.cuda.current_device()} {torch.cuda.get_device_name()}"
    return Contender(
        label=f"torch-eager {precision}{' autocast' if precision != 'fp32' else ''} {device}", runner=runner,
        backend="torch", precision=precision, device=where,
        synchronize=torch.cuda.synchronize if device == "cuda" else None,
    )
