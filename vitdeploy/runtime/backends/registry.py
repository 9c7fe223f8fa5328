"""The runtimes vitdeploy runs deployed files on: one entry each, read by the loader and the CLI.

An entry names the files a runtime opens (by suffix), the runner class (imported only when a file is
opened, so listing runtimes imports none of them) and how to install it. The CLI's ``--runtime``
choices are the entries that open ONNX files; an engine file picks its runtime by its suffix. Adding a
backend is its runner module (a :class:`~vitdeploy.runtime.backends.base.Runner` with ``from_options``),
one entry here, and its tests.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vitdeploy.errors import InputError

if TYPE_CHECKING:
    from vitdeploy.runtime.backends.base import Runner, RunnerOptions


#: ONNX files: every runtime that opens them is a ``--runtime`` choice.
ONNX_SUFFIXES: tuple[str, ...] = (".onnx",)


@dataclass(frozen=True)
class RuntimeEntry:
    """One runtime.

    Attributes:
        name: the ``--runtime`` value.
        summary: one line for ``--help`` and ``doctor``.
        suffixes: the file suffixes it opens.
        runner: ``module:Class`` of its runner (imported when a file is opened).
        settings: the runner's own keyword settings the loader may pass (beyond :class:`RunnerOptions`).
        install: how to get it, for messages.
        modules: the Python modules that provide the runtime (any one will do).
    """

    name: str
    summary: str
    suffixes: tuple[str, ...]
    runner: str
    settings: frozenset[str] = frozenset()
    install: str = ""
    modules: tuple[str, ...] = ()

    def installed(self) -> bool:
        """Whether one of :attr:`modules` is installed (found, not imported)."""
        import importlib.util

        return any(importlib.util.find_spec(module) is not None for module in self.modules)

    @property
    def reads_onnx(self) -> bool:
        return bool(set(self.suffixes) & set(ONNX_SUFFIXES))

    def runner_class(self) -> type[Runner]:
        module, _, name = self.runner.partition(":")
        return getattr(importlib.import_module(module), name)

    def open(self, path: str | Path, options: RunnerOptions, **settings: Any) -> Runner:
        """The runner for ``path`` with the common ``options`` and this runtime's own ``settings``."""
        unknown = sorted(set(settings) - self.settings)
        if unknown:
            raise InputError(f"{', '.join(unknown)} is not a setting of {self.name} (it takes {', '.join(sorted(self.settings)) or 'none'})")
        return self.runner_class().from_options(path, options, **settings)  # type: ignore[attr-defined]


RUNTIMES: dict[str, RuntimeEntry] = {
    "onnxruntime": RuntimeEntry(
        "onnxruntime", "ONNX Runtime (each file as written; the default where --runtime auto has no better proven path): CPU, CUDA and TensorRT providers", (".onnx",),
        "vitdeploy.runtime.backends.onnxruntime_runner:OnnxRuntimeRunner",
        frozenset({"fused_attention", "folded_attention", "allow_unverified", "io_binding", "optimization",
                   "memory_pattern", "session_config", "profile_prefix"}),
        "pip install onnxruntime (a core dependency)", ("onnxruntime",)),
    "openvino": RuntimeEntry(
        "openvino", "OpenVINO's CPU plugin (optional extra)", (".onnx",),
        "vitdeploy.runtime.backends.openvino_runner:OpenVinoRunner",
        frozenset({"seven_bit_weights"}),
        "pip install 'vitdeploy[openvino]'", ("openvino",)),
    "tensorrt": RuntimeEntry(
        "tensorrt", "TensorRT engines from 'vitdeploy build-engine' (classic or TensorRT for RTX; NVIDIA GPU)",
        (".plan", ".engine", ".trt"),
        "vitdeploy.runtime.backends.tensorrt_runner:TensorRTRunner",
        frozenset({"runtime_cache", "check_compatibility"}),
        "pip install 'vitdeploy[tensorrt]' or 'vitdeploy[tensorrt-rtx]' on a machine with an NVIDIA GPU",
        ("tensorrt", "tensorrt_rtx_bindings")),
}
#: The runtime an ONNX file opens on when none is asked for.
DEFAULT_RUNTIME = "onnxruntime"
#: The ``--runtime`` choices: the runtimes that open ONNX files.
ONNX_RUNTIMES: tuple[str, ...] = tuple(name for name, entry in RUNTIMES.items() if entry.reads_onnx)
#: Engine files: the suffixes of the runtimes that do not open ONNX files.
ENGINE_SUFFIXES: tuple[str, ...] = tuple(s for entry in RUNTIMES.values() if not entry.reads_onnx for s in entry.suffixes)


def runtime_for_file(path: Path) -> RuntimeEntry | None:
    """The runtime a file opens on by its suffix alone (ONNX: the default), or None for a suffix none opens."""
    suffix = path.suffix.lower()
    if suffix in RUNTIMES[DEFAULT_RUNTIME].suffixes:
        return RUNTIMES[DEFAULT_RUNTIME]
    return next((entry for entry in RUNTIMES.values() if suffix in entry.suffixes), None)


__all__ = ["DEFAULT_RUNTIME", "ENGINE_SUFFIXES", "ONNX_RUNTIMES", "ONNX_SUFFIXES", "RUNTIMES", "RuntimeEntry",
           "runtime_for_file"]
