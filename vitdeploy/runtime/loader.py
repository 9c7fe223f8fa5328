"""Open any deployed model behind the Runner interface, chosen by its file suffix."""

from __future__ import annotations

from pathlib import Path

from vitdeploy.errors import InputError
from vitdeploy.runtime.runners import Runner

ONNX_SUFFIXES = (".onnx",)
ENGINE_SUFFIXES = (".plan", ".engine", ".trt")


def open_runner(path: str | Path, *, threads: int | None = None, ort_device: str = "cpu", gpu: int = 0,
                fused_attention: bool = False, tf32: bool = False, allow_unverified: bool = False) -> Runner:
    """``.onnx`` -> :class:`OnnxRuntimeRunner` (``threads``, ``ort_device``, ``fused_attention``, ``tf32``,
    ``allow_unverified``); ``.plan``/``.engine``/``.trt`` -> :class:`TensorRTRunner` on CUDA device ``gpu``
    (an engine's math was fixed when it was built)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in ONNX_SUFFIXES:
        from vitdeploy.runtime.runners import OnnxRuntimeRunner

        return OnnxRuntimeRunner(path, threads=threads, device=ort_device, fused_attention=fused_attention, tf32=tf32,
                                 allow_unverified=allow_unverified)
    if fused_attention:
        raise InputError(f"--fused-attention applies to ONNX models on ONNX Runtime, not to '{path.name}'")
    if suffix in ENGINE_SUFFIXES:
        from vitdeploy.runtime.tensorrt_runner import TensorRTRunner

        return TensorRTRunner(path, device=gpu)
    raise InputError(
        f"'{path.name}' is neither an ONNX model ({', '.join(ONNX_SUFFIXES)}) nor a TensorRT engine "
        f"({', '.join(ENGINE_SUFFIXES)}): give a file written by 'vitdeploy export' or 'vitdeploy build-engine'"
    )
