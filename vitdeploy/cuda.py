"""CUDA for the TensorRT runner and builder through cuda-python (``cuda.bindings.runtime``), not torch.

Why cuda-python: it is what NVIDIA's TensorRT 10/11 Python samples use for memory and streams
(``samples/python/common_runtime.py``: ``cudaMalloc``, ``cudaMallocHost``, ``cudaMemcpyAsync``,
``cudaStreamCreate``), it is documented function by function (CUDA Python ``cuda.bindings.runtime``
reference), it also answers what the sidecar needs (GPU name and compute capability, from
``cudaGetDeviceProperties``), and it needs neither PyTorch (the runtime must work without it) nor a
libcudart found on the loader path (Polygraphy's ctypes wrapper searches for one and has no device
query). Every call returns ``(cudaError_t, *values)``; :func:`check` turns a failure into an
EngineError that names the call and CUDA's own error name and text.

The module layout is ``cuda.bindings.runtime`` since cuda-python 12.6; older releases had
``cuda.cudart`` with the same functions, so both are accepted.
"""

from __future__ import annotations

import ctypes
from dataclasses import asdict, dataclass
from types import ModuleType
from typing import Any

import numpy as np

from vitdeploy.errors import EngineError, InputError, MissingDependencyError

CUDA_PYTHON_HINT = "pip install cuda-python (a release whose major version matches the driver's CUDA, e.g. 'cuda-python>=12.6,<13' for CUDA 12)"


def cudart(purpose: str = "using the GPU") -> ModuleType:
    """The CUDA runtime bindings of cuda-python, or MissingDependencyError."""
    try:
        from cuda.bindings import runtime
    except ImportError:
        try:
            from cuda import cudart as runtime  # cuda-python < 12.6
        except ImportError as exc:
            raise MissingDependencyError("cuda-python", purpose, CUDA_PYTHON_HINT) from exc
    return runtime


def cuda_python_version() -> str | None:
    """Installed version of the CUDA runtime bindings (``cuda-bindings``, or the older ``cuda-python``), or None."""
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("cuda-bindings", "cuda-python"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return None


def set_device(index: int) -> None:
    """Make CUDA device ``index`` current for this thread (TensorRT builds and runs on the current device)."""
    check(cudart().cudaSetDevice(index), f"cudaSetDevice({index})")


def check(result: Any, what: str) -> Any:
    """Unpack a cuda-python ``(err, *values)`` result; EngineError naming ``what`` and CUDA's error."""
    rt = cudart()
    err, values = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
    if err != rt.cudaError_t.cudaSuccess:
        name = rt.cudaGetErrorName(err)[1]
        text = rt.cudaGetErrorString(err)[1]
        name = name.decode() if isinstance(name, bytes) else str(name)
        text = text.decode() if isinstance(text, bytes) else str(text)
        raise EngineError(f"{what} failed: {name} ({text})")
    if not values:
        return None
    return values[0] if len(values) == 1 else values


@dataclass(frozen=True)
class GpuInfo:
    """One CUDA device as the sidecar records it."""

    index: int
    name: str
    compute_capability: str  # "8.9"
    total_memory_mib: int
    driver_cuda_version: str  # "12.4": the newest CUDA the driver supports

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _cuda_version(number: int) -> str:
    return f"{number // 1000}.{(number % 1000) // 10}" if number else "none"


def query_gpu(index: int = 0) -> GpuInfo:
    """Name, compute capability and memory of CUDA device ``index``.

    Raises:
        MissingDependencyError: cuda-python is not installed.
        EngineError: no CUDA driver or device is usable (CUDA's error name and text are quoted).
        InputError: ``index`` is not a device of this machine.
    """
    rt = cudart("querying the GPU")
    count = check(rt.cudaGetDeviceCount(), "no usable CUDA GPU here: cudaGetDeviceCount")
    if not 0 <= index < count:
        raise InputError(f"CUDA device {index} does not exist: this machine has {count} (use 0..{count - 1})")
    props = check(rt.cudaGetDeviceProperties(index), f"cudaGetDeviceProperties({index})")
    raw = props.name if isinstance(props.name, bytes) else str(props.name).encode()
    driver = check(rt.cudaDriverGetVersion(), "cudaDriverGetVersion")
    return GpuInfo(
        index=index,
        name=raw.split(b"\x00", 1)[0].decode(errors="replace").strip(),
        compute_capability=f"{props.major}.{props.minor}",
        total_memory_mib=int(props.totalGlobalMem) // (1 << 20),
        driver_cuda_version=_cuda_version(int(driver)),
    )


class Stream:
    """A CUDA stream (``cudaStreamCreate``); ``handle`` is the integer TensorRT's ``execute_async_v3`` takes."""

    def __init__(self) -> None:
        self._rt = cudart()
        self._stream = check(self._rt.cudaStreamCreate(), "cudaStreamCreate")

    @property
    def raw(self) -> Any:
        return self._stream

    @property
    def handle(self) -> int:
        return int(self._stream)

    def synchronize(self) -> None:
        check(self._rt.cudaStreamSynchronize(self._stream), "cudaStreamSynchronize")

    def close(self) -> None:
        if self._stream is not None:
            check(self._rt.cudaStreamDestroy(self._stream), "cudaStreamDestroy")
            self._stream = None


class DeviceBuffer:
    """``nbytes`` of device memory (``cudaMalloc``), freed by :meth:`close`."""

    def __init__(self, nbytes: int) -> None:
        self._rt = cudart()
        self.nbytes = int(nbytes)
        self.ptr: int | None = int(check(self._rt.cudaMalloc(max(self.nbytes, 1)), f"cudaMalloc({self.nbytes})"))

    def close(self) -> None:
        if self.ptr is not None:
            check(self._rt.cudaFree(self.ptr), "cudaFree")
            self.ptr = None


class PinnedArray:
    """A page-locked host array (``cudaMallocHost``) of a fixed capacity, viewed as NumPy.

    Copies between page-locked memory and the device run truly asynchronously on the stream; from
    pageable NumPy memory CUDA would stage them through a driver buffer first.
    """

    def __init__(self, capacity: int, dtype: np.dtype) -> None:
        self._rt = cudart()
        self.dtype = np.dtype(dtype)
        self.capacity = int(capacity)
        self.nbytes = self.capacity * self.dtype.itemsize
        self.ptr: int | None = int(check(self._rt.cudaMallocHost(max(self.nbytes, 1)), f"cudaMallocHost({self.nbytes})"))
        raw = ctypes.cast(ctypes.c_void_p(self.ptr), ctypes.POINTER(ctypes.c_ubyte))
        # A byte view first: float16 has no ctypes type to build the array from directly.
        self.array = np.ctypeslib.as_array(raw, (max(self.nbytes, 1),))[: self.nbytes].view(self.dtype)

    def view(self, shape: tuple[int, ...]) -> np.ndarray:
        size = int(np.prod(shape)) if shape else 1
        if size > self.capacity:
            raise InputError(f"tensor of shape {shape} exceeds the buffer allocated for the engine's maximum shape")
        return self.array[:size].reshape(shape)

    def close(self) -> None:
        if self.ptr is not None:
            check(self._rt.cudaFreeHost(self.ptr), "cudaFreeHost")
            self.ptr = None
            self.array = np.empty(0, self.dtype)


def copy_to_device(dst: DeviceBuffer, src: np.ndarray, stream: Stream) -> None:
    """Asynchronous host -> device copy of ``src`` (contiguous) into ``dst`` on ``stream``."""
    rt = cudart()
    check(rt.cudaMemcpyAsync(dst.ptr, src.ctypes.data, src.nbytes, rt.cudaMemcpyKind.cudaMemcpyHostToDevice, stream.raw),
          "cudaMemcpyAsync (host to device)")


def copy_to_host(dst: np.ndarray, src: DeviceBuffer, stream: Stream) -> None:
    """Asynchronous device -> host copy of ``dst.nbytes`` from ``src`` into ``dst`` (contiguous) on ``stream``."""
    rt = cudart()
    check(rt.cudaMemcpyAsync(dst.ctypes.data, src.ptr, dst.nbytes, rt.cudaMemcpyKind.cudaMemcpyDeviceToHost, stream.raw),
          "cudaMemcpyAsync (device to host)")
