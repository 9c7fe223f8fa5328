"""TensorRT behind the Runner contract: load a plan, check it can run here, run it on a CUDA stream.

Loading, in order, so each problem gets its own message before TensorRT sees the bytes:
plan file exists -> sidecar present and well formed -> plan size and SHA-256 match the sidecar
(truncated or swapped plan) -> the library that built it (classic ``tensorrt`` or TensorRT for RTX, from
the sidecar) and cuda-python importable -> a GPU present (a CPU-only machine stops here, in one line) ->
the sidecar's TensorRT version and GPU can run here (:mod:`vitdeploy.engine.compat`) ->
``deserialize_cuda_engine``.

TensorRT-RTX engines are JIT-compiled for the GPU when the execution context is made; the kernels it
compiles can be kept in a runtime cache file (``runtime_cache``: read when it exists, written when the
runner closes) so the next load skips the compilation (NVIDIA: "Working with Runtime Cache").

Running: device buffers and page-locked host buffers are allocated once, for the largest shapes the
engine's optimization profile allows, and their addresses bound to the execution context once
(``set_tensor_address``). Each :meth:`TensorRTRunner.run` copies inputs in, calls
``execute_async_v3`` on the runner's stream, copies outputs back and synchronizes the stream, so the
time of a call covers the GPU work. No torch: CUDA comes from cuda-python (:mod:`vitdeploy.cuda`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from vitdeploy.engine.build_log import BuildLog, make_trt_logger
from vitdeploy.engine.compat import RunningEnvironment
from vitdeploy.engine.library import library_of_sidecar, load_library
from vitdeploy.engine.sidecar import read_plan_checked, read_sidecar
from vitdeploy.errors import EngineError, InputError
from vitdeploy.fileio import atomic_write_bytes
from vitdeploy.precisions import Precision
from vitdeploy.runtime.backends.base import Runner, RunnerOptions, TensorMeta

Shape = tuple[int, ...]


def check_feed(name: str, array: np.ndarray, dtype: np.dtype, lo: Shape, hi: Shape) -> np.ndarray:
    """``array`` as a C-contiguous array of ``dtype`` within the shape range ``lo``..``hi`` (InputError if not).

    Floating inputs are cast between float widths (float32 images into an FP16-input engine); any
    other dtype difference is an error rather than a silent conversion.
    """
    array = np.asarray(array)
    if array.dtype != dtype and not (array.dtype.kind == "f" and dtype.kind == "f"):
        raise InputError(f"input '{name}' is {array.dtype}, the engine takes {dtype}: convert it with .astype(np.{dtype})")
    if array.ndim != len(lo) or any(not a <= d <= b for d, a, b in zip(array.shape, lo, hi)):
        want = f"{list(lo)}" if lo == hi else f"between {list(lo)} and {list(hi)}"
        raise InputError(f"input '{name}' has shape {list(array.shape)}, the engine takes {want}")
    return np.ascontiguousarray(array, dtype=dtype)


class TensorRTRunner(Runner):
    """Runs a TensorRT plan written by ``vitdeploy build-engine``; reads its sidecar for metadata.

    Args:
        path: the ``.plan`` file (its sidecar ``.plan.json`` must be next to it).
        device: CUDA device index.
        check_compatibility: check the sidecar's TensorRT version and GPU against this machine
            before deserializing (leave on; off only to let TensorRT itself judge).
        runtime_cache: TensorRT-RTX engines: file of JIT-compiled kernels, read if present and written
            when the runner closes (ignored for classic TensorRT engines, which are compiled at build).
    """

    @classmethod
    def from_options(cls, path: str | Path, options: RunnerOptions, **settings: Any) -> TensorRTRunner:
        """A runner on CUDA device ``options.gpu``. An engine's math (precision, TF32) was fixed when it was built, and
        TensorRT picks its own threads: those options are not asked of it. ``settings``: ``runtime_cache``,
        ``check_compatibility``."""
        if options.policy != "file":
            raise InputError(f"a TensorRT engine runs the precision it was built in: build a {options.policy} engine "
                             "with 'vitdeploy build-engine' instead of asking for it at run time")
        return cls(path, device=options.gpu, **settings)

    def __init__(self, path: str | Path, device: int = 0, check_compatibility: bool = True,
                 runtime_cache: str | Path | None = None):
        from vitdeploy import cuda

        path = Path(path)
        if not path.is_file():
            raise InputError(f"engine file '{path}' not found: build it with 'vitdeploy build-engine' or check the path")
        self.path = path
        self.sidecar = read_sidecar(path)
        plan = read_plan_checked(path, self.sidecar)
        self.library = load_library(library_of_sidecar(self.sidecar), f"running '{path.name}'")
        trt = self.library.module
        try:
            gpu = cuda.query_gpu(device)
        except EngineError as exc:
            raise EngineError(f"'{path.name}' is a {self.library.label} engine, which runs only on an NVIDIA GPU, and {exc}; "
                              "run the ONNX file instead (ONNX Runtime or OpenVINO on the CPU)") from exc
        cuda.set_device(device)
        env = RunningEnvironment(self.library.version, gpu.name, gpu.compute_capability)
        self.warnings = self.library.check_engine(self.sidecar, env, path.name) if check_compatibility else []
        self._buffers: list[Any] = []
        self._stream: cuda.Stream | None = None
        self._log = BuildLog()
        self._logger = make_trt_logger(trt, self._log)
        self._runtime = trt.Runtime(self._logger)
        if self.sidecar.get("build_options", {}).get("version_compatible"):
            # A version-compatible plan carries its lean runtime as host code; allowed only for plans we built.
            self._runtime.engine_host_code_allowed = True
        self._engine = self._runtime.deserialize_cuda_engine(plan)
        del plan
        if self._engine is None:
            why = " | ".join(self._log.errors[-3:]) or "no error was logged"
            raise EngineError(f"TensorRT {trt.__version__} could not deserialize '{path.name}': {why}; rebuild it with 'vitdeploy build-engine'")
        self._runtime_cache_path = Path(runtime_cache) if runtime_cache and self.library.has_runtime_cache else None
        self._runtime_cache: Any = None
        self._context = self._create_context()
        if self._context is None:
            raise EngineError(f"TensorRT could not create an execution context for '{path.name}' (out of GPU memory?): "
                              + (" | ".join(self._log.errors[-3:]) or "no error was logged"))
        self._setup_io(trt, cuda)
        precision = Precision.of(self.sidecar)
        self.name = f"{self.library.name}-{precision}"
        self.backend = self.library.name
        self.version = self.library.version
        self.device = device
        self.gpu = gpu
        self.provider = f"{self.library.label} on cuda:{device} {gpu.name}"
        self.metadata: dict[str, Any] = {**self.sidecar.get("metadata", {}), "precision": precision.value}

    def _create_context(self) -> Any:
        """The execution context; where the library keeps a runtime cache (TensorRT-RTX) and a file was given, with
        the cache read from it."""
        context, self._runtime_cache = self.library.execution_context(
            self._engine, self._load_runtime_cache if self._runtime_cache_path is not None else None)
        return context

    def _load_runtime_cache(self, cache: Any) -> None:
        if self._runtime_cache_path.is_file():  # asked for only where a cache file was given
            if not cache.deserialize(self._runtime_cache_path.read_bytes()):
                self.warnings.append(f"runtime cache '{self._runtime_cache_path}' could not be read; it is rebuilt")

    def _save_runtime_cache(self) -> None:
        if self._runtime_cache is None:  # made only where the library keeps one and a cache file was given
            return
        serialized = self._runtime_cache.serialize()
        if serialized is not None:
            atomic_write_bytes(self._runtime_cache_path, bytes(serialized))

    def _setup_io(self, trt: Any, cuda: Any) -> None:
        engine, context = self._engine, self._context
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        self.input_names = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.output_names = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
        self._dtypes: dict[str, np.dtype] = {}
        for n in names:
            try:
                self._dtypes[n] = np.dtype(trt.nptype(engine.get_tensor_dtype(n)))
            except TypeError as exc:  # bfloat16 / fp8 have no NumPy type
                raise EngineError(f"engine I/O tensor '{n}' is {engine.get_tensor_dtype(n)}, which NumPy cannot hold: "
                                  "export the model with float32 or float16 inputs and outputs") from exc
        self._ranges: dict[str, tuple[Shape, Shape]] = {}
        self._dynamic: set[str] = set()
        for n in self.input_names:
            shape = tuple(engine.get_tensor_shape(n))
            if any(d < 0 for d in shape):
                lo, _, hi = (tuple(s) for s in engine.get_tensor_profile_shape(n, 0))
                self._ranges[n] = (lo, hi)
                self._dynamic.add(n)
                if not context.set_input_shape(n, hi):
                    raise EngineError(f"TensorRT rejected the profile's maximum shape {list(hi)} for '{n}'")
            else:
                self._ranges[n] = (shape, shape)
        self._stream = cuda.Stream()
        self._device: dict[str, Any] = {}
        self._host: dict[str, Any] = {}
        for n in names:
            max_shape = tuple(context.get_tensor_shape(n))
            if any(d < 0 for d in max_shape):
                raise EngineError(f"TensorRT cannot bound the shape of '{n}' ({list(max_shape)}): a data-dependent output "
                                  "is not supported by this runner")
            capacity = int(np.prod(max_shape)) if max_shape else 1
            self._device[n] = cuda.DeviceBuffer(capacity * self._dtypes[n].itemsize)
            self._host[n] = cuda.PinnedArray(capacity, self._dtypes[n])
            self._buffers += [self._device[n], self._host[n]]
            if not context.set_tensor_address(n, self._device[n].ptr):
                raise EngineError(f"TensorRT rejected the device address for tensor '{n}'")

    def input_metadata(self) -> dict[str, TensorMeta]:
        """Each input; a dynamic axis is ``"lo..hi"``, the range the engine's optimization profile allows."""
        return {n: TensorMeta(n, tuple(a if a == b else f"{a}..{b}" for a, b in zip(lo, hi)), self._dtypes[n])
                for n, (lo, hi) in self._ranges.items()}

    def output_metadata(self) -> dict[str, TensorMeta]:
        """Each output at the largest shapes the profile allows (dynamic axes as ``"?"`` when the engine says -1)."""
        return {n: TensorMeta(n, tuple(d if d >= 0 else "?" for d in self._engine.get_tensor_shape(n)), self._dtypes[n])
                for n in self.output_names}

    def input_range(self, name: str) -> tuple[Shape, Shape]:
        """(smallest, largest) shape the engine accepts for input ``name``."""
        return self._ranges[name]

    def batch_range(self) -> tuple[int, int] | None:
        lo, hi = self._ranges[self.input_names[0]]
        return lo[0], hi[0]

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from vitdeploy import cuda

        for n in self.input_names:
            lo, hi = self._ranges[n]
            array = check_feed(n, feeds[n], self._dtypes[n], lo, hi)
            if n in self._dynamic and not self._context.set_input_shape(n, array.shape):
                raise InputError(f"TensorRT rejected shape {list(array.shape)} for input '{n}'")
            host = self._host[n].view(array.shape)
            np.copyto(host, array)
            cuda.copy_to_device(self._device[n], host, self._stream)
        if not self._context.execute_async_v3(self._stream.handle):
            self._stream.synchronize()
            raise EngineError(f"TensorRT execution of '{self.path.name}' failed: " + (" | ".join(self._log.errors[-3:]) or "no error was logged"))
        views = {}
        for n in self.output_names:
            views[n] = self._host[n].view(tuple(self._context.get_tensor_shape(n)))
            cuda.copy_to_host(views[n], self._device[n], self._stream)
        self._stream.synchronize()
        return {n: v.copy() for n, v in views.items()}

    def synchronize(self) -> None:
        """Wait for the runner's stream (each :meth:`run` already ends synchronized)."""
        if self._stream is not None:
            self._stream.synchronize()

    def close(self) -> None:
        """Free the GPU and page-locked buffers and the stream; the runner cannot run afterwards."""
        super().close()
        if self._stream is not None:
            self._stream.synchronize()
            self._save_runtime_cache()
        for buffer in self._buffers:
            buffer.close()
        self._buffers = []
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        self._context = None
        self._engine = None
