"""Contenders: a Runner plus what the report needs to know about it (backend, precision, device, batches)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vitdeploy.errors import InputError
from vitdeploy.runtime.backends.base import Runner

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


def parse_shapes(texts: tuple[str, ...] | list[str]) -> dict[str, list[int]]:
    """``("point_coords:1x5x2,point_labels:1x5",)`` -> ``{"point_coords": [1, 5, 2], "point_labels": [1, 5]}``
    (trtexec's ``--shapes`` syntax; repeated options and comma lists both work)."""
    shapes: dict[str, list[int]] = {}
    for text in texts:
        for item in filter(None, (part.strip() for part in text.split(","))):
            name, sep, dims = item.rpartition(":")
            try:
                shape = [int(d) for d in dims.lower().split("x")]
            except ValueError:
                shape = []
            if not sep or not name or not shape or min(shape) < 1:
                raise InputError(f"--shapes '{item}' is not NAME:DxDx... with positive sizes (e.g. point_coords:1x5x2)")
            shapes[name] = shape
    return shapes


def input_template(runner: Runner, shapes: dict[str, list[int]] | None = None) -> dict[str, list[int | str]]:
    """Input shapes of a deployed runner, the batch axis (0) marked ``"batch"``; ``shapes`` (from ``--shapes``) fix
    the other dynamic axes (e.g. the SAM decoder's number of points).

    Raises:
        InputError: a symbolic axis other than the batch that ``shapes`` does not fix, or a shape that does not fit.
    """
    shapes = dict(shapes or {})
    declared = runner.input_shapes()
    unknown = sorted(set(shapes) - set(declared))
    if unknown:
        raise InputError(f"--shapes names {unknown}, which are not inputs of the model (it takes {sorted(declared)})")
    template: dict[str, list[int | str]] = {}
    for name, dims in declared.items():
        given = shapes.get(name)
        if given is not None:
            fixed = [(i, d, g) for i, (d, g) in enumerate(zip(dims, given)) if i > 0 and isinstance(d, int) and d != g]
            if len(given) != len(dims) or fixed:
                raise InputError(f"--shapes {name}:{'x'.join(map(str, given))} does not fit the input's shape {dims}")
            dims = [dims[0], *given[1:]]
        bad = [i for i, d in enumerate(dims) if i > 0 and not isinstance(d, int)]
        if bad:
            example = "x".join(str(d) if isinstance(d, int) else "5" for d in ["1", *dims[1:]][1:])
            raise InputError(f"input '{name}' has dynamic axes {bad} besides the batch ({dims}): give their sizes with "
                             f"--shapes {name}:1x{example} (as trtexec's --shapes)")
        template[name] = ["batch", *dims[1:]]
    return template


def deployed_contender(path: str | Path, *, threads: int | None, device: str, gpu: int = 0,
                       fused_attention: bool | None = None, folded_attention: bool = False, tf32: bool = False,
                       allow_unverified: bool = False, runtime: str = "onnxruntime",
                       inference_precision: str | None = None) -> Contender:
    """An ONNX file (ONNX Runtime on ``device``, optionally with the fused rel-pos kernel; FP32 unless ``tf32``;
    or OpenVINO on the CPU with ``runtime="openvino"``) or a TensorRT plan (on CUDA device ``gpu``)."""
    from vitdeploy.runtime.deploy.loader import ENGINE_SUFFIXES, open_runner

    path = Path(path)
    engine = path.suffix.lower() in ENGINE_SUFFIXES  # its math (precision, TF32) was fixed when it was built
    runner = open_runner(path, threads=threads, ort_device=device, gpu=gpu, fused_attention=fused_attention,
                         folded_attention=folded_attention, tf32=tf32 and not engine, allow_unverified=allow_unverified,
                         runtime=runtime, precision="file" if engine else inference_precision)
    precision = runner.precision.value
    batches = runner.batch_range()
    if engine:
        lo, hi = batches or (1, 1)
        return Contender(
            label=f"{runner.backend} {precision} ({path.name})", runner=runner, backend="tensorrt", precision=precision,
            device=f"cuda:{gpu} {runner.gpu.name}", batch_range=(lo, hi),  # type: ignore[attr-defined]
            batch_note=f"engine profile batch {lo}..{hi}" if lo != hi else f"engine built for batch {lo}",
            synchronize=runner.synchronize,
        )
    fusion = getattr(runner, "fusion", None)  # ONNX Runtime's: the default takes the kernel where it is built
    attention = " + fused rel-pos kernel" if fusion is not None and fusion.changed else " folded attention" if folded_attention else ""
    math = " tf32" if tf32 and device != "cpu" and precision == "fp32" else ""
    chosen = runner.deployment  # --runtime auto: what it chose
    policy = chosen.precision if chosen is not None else inference_precision or "file"
    math += f" {policy}-inference" if policy != "file" else ""
    math += " (auto)" if chosen is not None else ""
    return Contender(  # runner.name: onnxruntime-<device> or openvino-cpu (which refused any other device)
        label=f"{runner.name} {precision}{math}{attention} ({path.name})", runner=runner,
        backend=chosen.runtime if chosen is not None else runtime,
        precision=precision, device=device, batch_range=batches,
        batch_note=f"static batch {batches[0]} (re-export with --dynamic-batch)" if batches else "",
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
    from vitdeploy.families import eager_reference
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
