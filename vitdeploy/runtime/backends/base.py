"""The runner contract every backend implements, and the options every runner takes.

Modelled on Polygraphy's ``BaseRunner``: a runner is opened on one file, says what its inputs and
outputs are (names, shapes, dtypes), runs feeds to outputs (``run``, also called ``infer``), times its
last run, says what actually ran (``provider``) and is closed when done (``close`` or a ``with``
block). Callers (the predictor, ``validate``, ``benchmark``, the applications) use nothing else, so a
new backend is its module, its entry in :mod:`vitdeploy.runtime.backends.registry` and its tests.

:class:`RunnerOptions` holds what every runner takes (threads, device, GPU, precision policy, TF32,
spinning); a backend's own settings (ONNX Runtime's attention forms, TensorRT's runtime cache) stay
keyword arguments of that backend.
"""

from __future__ import annotations

import abc
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vitdeploy.errors import InputError
from vitdeploy.precisions import PRECISION_POLICIES, Precision

#: ``RunnerOptions.device``: ONNX Runtime's CPU, CUDA or TensorRT provider; other runtimes take what they run on.
DEVICES = ("cpu", "cuda", "tensorrt")


@dataclass(frozen=True)
class RunnerOptions:
    """What every runner takes. A runner refuses an option it cannot honour, naming the fix.

    Attributes:
        threads: intra-op CPU threads (None: the runtime's default, usually every core).
        device: ``cpu``, ``cuda`` or ``tensorrt`` (ONNX Runtime's providers); engines run on CUDA.
        gpu: CUDA device index for engines.
        policy: the precision policy applied to the file (:data:`PRECISION_POLICIES`), not the file's own precision.
        tf32: TF32 math for FP32 layers on CUDA (off: exact FP32 GEMMs).
        spinning: idle pool threads spin (None: the runtime's default).
    """

    threads: int | None = None
    device: str = "cpu"
    gpu: int = 0
    policy: str = "file"
    tf32: bool = False
    spinning: bool | None = None

    def __post_init__(self) -> None:
        if self.threads is not None and self.threads < 1:
            raise InputError(f"threads must be at least 1, got {self.threads}")
        if self.policy not in PRECISION_POLICIES:
            raise InputError(f"precision policy '{self.policy}' is not one of {', '.join(PRECISION_POLICIES)}")
        if self.gpu < 0:
            raise InputError(f"the GPU index must be 0 or more, got {self.gpu}")


@dataclass(frozen=True)
class TensorMeta:
    """One input or output: its name, shape (a dynamic axis is a string: its name, ``"?"`` or ``"lo..hi"``; empty where
    the runner cannot know it, as for an eager model) and dtype (None where the runtime does not say)."""

    name: str
    shape: tuple[int | str, ...]
    dtype: np.dtype | None


class Runner(abc.ABC):
    """One deployed file opened on one runtime. Subclasses set the attributes in ``__init__`` and implement the
    abstract methods; ``run`` checks the feeds, times the backend's :meth:`_run` and keeps the time.

    Attributes:
        name: runtime and device, e.g. ``onnxruntime-cpu``, ``openvino-cpu``, ``tensorrt-fp16``.
        backend: the library that runs the file: ``onnxruntime``, ``openvino``, ``tensorrt``, ``tensorrt-rtx``, ``torch``.
        version: that library's version.
        provider: what actually ran, in one line (provider, inference precision, threads, verification).
        device: where it runs (``cpu``, ``cuda``, ``tensorrt``, or a CUDA device index for engines).
        path: the file (None for an in-memory model).
        input_names, output_names: in the model's order.
        metadata: the file's vitdeploy metadata.
        warnings: what a user should know about how the file runs here.
        deployment: what ``--runtime auto`` chose and why (a ``deployment.Deployment``; None when a runtime was asked).
    """

    name: str
    backend: str
    version: str = ""
    provider: str = ""
    device: Any = "cpu"
    path: Path | None = None
    input_names: list[str]
    output_names: list[str]
    metadata: dict[str, Any]
    warnings: list[str]
    deployment: Any = None
    _last_time: float | None = None
    _closed: bool = False

    # -- opening -----------------------------------------------------------------------------------------

    @classmethod
    def from_options(cls, path: str | Path, options: RunnerOptions, **settings: Any) -> Runner:
        """The runner for the file ``path`` with the common ``options`` and this backend's own ``settings`` (the ones
        its registry entry lists): how :mod:`~vitdeploy.runtime.backends.registry` opens every runtime. A backend that
        opens files overrides it, refusing an option it cannot honour; one that runs an in-memory model (the eager
        reference) has no file to open."""
        raise NotImplementedError(f"{cls.__name__} runs an in-memory model: it is not opened from a file")

    # -- what the model takes and gives ------------------------------------------------------------------

    @abc.abstractmethod
    def input_metadata(self) -> dict[str, TensorMeta]:
        """Name -> :class:`TensorMeta` of every input, in order."""

    @abc.abstractmethod
    def output_metadata(self) -> dict[str, TensorMeta]:
        """Name -> :class:`TensorMeta` of every output, in order (shapes as far as the runtime knows them)."""

    def input_shapes(self) -> dict[str, list[int | str]]:
        """Name -> shape of every input (a dynamic axis is a string)."""
        return {name: list(meta.shape) for name, meta in self.input_metadata().items()}

    def batch_range(self) -> tuple[int, int] | None:
        """(smallest, largest) batch the first input takes; None: any batch."""
        first = next(iter(self.input_metadata().values()))
        return (first.shape[0], first.shape[0]) if first.shape and isinstance(first.shape[0], int) else None

    @property
    def precision(self) -> Precision:
        """The precision the file declares (FP32 where it declares none)."""
        return Precision.of(self.metadata)

    # -- running -----------------------------------------------------------------------------------------

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once: ``feeds`` maps input names to arrays; returns output name -> array (InputError for a missing input)."""
        if self._closed:
            raise InputError(f"the runner for {self._label()} is closed: open it again")
        missing = [n for n in self.input_names if n not in feeds]
        if missing:
            raise InputError(f"missing inputs {missing} for {self._label()} (it takes {self.input_names})")
        start = time.perf_counter()
        outputs = self._run(feeds)
        self._last_time = time.perf_counter() - start
        return outputs

    def _label(self) -> str:
        return f"'{self.path.name}'" if self.path is not None else self.name

    #: Polygraphy's name for :meth:`run`.
    infer = run

    @abc.abstractmethod
    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The backend's run, every input present; returns every output, synchronized."""

    def last_inference_time(self) -> float | None:
        """Seconds the last :meth:`run` took, device work included (None before the first run)."""
        return self._last_time

    def synchronize(self) -> None:
        """Wait for the device's queued work (every ``run`` already returns synchronized; GPU runners override)."""

    def notes(self, threads: int | None = None) -> list[str]:
        """What a user should know about how the file runs here, one line each (``validate``/``benchmark`` print them):
        what ran, then the warnings."""
        chosen = [f"chosen by --runtime auto: {self.deployment.describe()}"] if self.deployment is not None else []
        return chosen + ([f"runs on {self.provider}"] if self.provider else []) + [f"warning: {w}" for w in self.warnings]

    # -- lifetime ----------------------------------------------------------------------------------------

    def close(self) -> None:
        """Free what the runner holds (sessions, device buffers); it cannot run afterwards."""
        self._closed = True

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["DEVICES", "PRECISION_POLICIES", "Runner", "RunnerOptions", "TensorMeta"]
