"""The runtimes vitdeploy runs deployed files on: one entry each, read by the loader and the CLI.

An entry names the files a runtime opens (by suffix), what it can run of an ONNX file on the CPU (the file
precisions it has kernels for, the custom ops it carries: :meth:`RuntimeEntry.cpu_gap`), the runner class
(imported only when a file is opened, so listing runtimes imports none of them) and how to install it. The
runners' refusals, ``--runtime auto``, ``vitdeploy tune`` and the C++ library's default all read the one
capability here, whose CPU half (precisions with kernels, custom ops) is the data file the C++ library reads too
(``vitdeploy/data/runtime_facts.json``). The CLI's ``--runtime``
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
from vitdeploy.precisions import Precision
from vitdeploy.runtime.forms.cpu_form import FUSED_KERNEL, read_cpu_form
from vitdeploy.runtime_facts import CPU_RUNTIMES

if TYPE_CHECKING:
    from vitdeploy.runtime.backends.base import Runner, RunnerOptions


#: ONNX files: every runtime that opens them is a ``--runtime`` choice.
ONNX_SUFFIXES: tuple[str, ...] = (".onnx",)
#: The custom ops a vitdeploy file may hold, by the name :class:`FileNeeds` gives them, and what each one is.
CUSTOM_OPS: dict[str, str] = {FUSED_KERNEL: "vitdeploy's fused attention kernel"}


@dataclass(frozen=True)
class FileNeeds:
    """What running an ONNX file on the CPU asks of a runtime: kernels for the precision of its graph and the
    custom ops it holds (names in :data:`CUSTOM_OPS`)."""

    precision: Precision = Precision.FP32
    custom_ops: frozenset[str] = frozenset()

    @classmethod
    def of(cls, metadata: dict[str, Any], name: str = "the file") -> FileNeeds:
        """The needs a file's decoded vitdeploy metadata declares (InputError for an unreadable entry)."""
        form = read_cpu_form(metadata, name)
        ops = frozenset({FUSED_KERNEL}) if form is not None and form.attention == FUSED_KERNEL else frozenset()
        return cls(Precision.of(metadata), ops)


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
        title: its name in sentences.
        cpu_precisions: the file precisions it has CPU kernels for (empty: it does not run ONNX files on the CPU).
        custom_ops: the vitdeploy custom ops it runs (names in :data:`CUSTOM_OPS`).
        policies: the precision policies it takes on the CPU (:data:`~vitdeploy.precisions.PRECISION_POLICIES`:
            ``file`` runs the file's own math; ``bf16``/``fp16`` run an FP32 file's layers in BF16/FP16).
    """

    name: str
    summary: str
    suffixes: tuple[str, ...]
    runner: str
    settings: frozenset[str] = frozenset()
    install: str = ""
    modules: tuple[str, ...] = ()
    title: str = ""
    cpu_precisions: frozenset[Precision] = frozenset()
    custom_ops: frozenset[str] = frozenset()
    policies: tuple[str, ...] = ("file",)

    def cpu_gap(self, needs: FileNeeds) -> str | None:
        """Why this runtime cannot run a file with ``needs`` on the CPU, as the phrase after the file's name
        (``is a BF16 graph and ONNX Runtime's CPU has no BF16 kernels``); None where it can."""
        if needs.precision not in self.cpu_precisions:
            name = needs.precision.value.upper()
            return f"is a {name} graph and {self.title}'s CPU has no {name} kernels"
        missing = sorted(needs.custom_ops - self.custom_ops)
        if missing:
            return f"runs {CUSTOM_OPS[missing[0]]}, an ONNX Runtime custom op {self.title} does not have"
        return None

    def cpu_refusal(self, needs: FileNeeds, file_name: str) -> str | None:
        """The one-line refusal of a file with ``needs`` on this runtime's CPU, naming the runtimes that run it
        (None where this one can); a runner adds its own further ways."""
        gap = self.cpu_gap(needs)
        if gap is None:
            return None
        others = [name for name in cpu_runtimes_for(needs) if name != self.name]
        fix = f"run it with --runtime {' or '.join(others)} (or auto)" if others else "no CPU runtime runs it"
        return f"'{file_name}' {gap}: {fix}"

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
        return self.runner_class().from_options(path, options, **settings)


def _cpu_facts(name: str) -> dict[str, Any]:
    """A CPU runtime's title, precisions with kernels, custom ops and precision policies, as the data file states them."""
    facts = CPU_RUNTIMES[name]
    unknown = set(facts.custom_ops) - set(CUSTOM_OPS)
    if unknown:
        raise RuntimeError(f"runtime_facts.json gives {name} custom op(s) {sorted(unknown)} vitdeploy does not know")
    return {"title": facts.title, "cpu_precisions": frozenset(Precision.parse(p) for p in facts.precisions),
            "custom_ops": frozenset(facts.custom_ops), "policies": facts.policies}


RUNTIMES: dict[str, RuntimeEntry] = {
    "onnxruntime": RuntimeEntry(
        "onnxruntime", "ONNX Runtime (each file as written; the default where --runtime auto has no better proven path): CPU, CUDA and TensorRT providers", (".onnx",),
        "vitdeploy.runtime.backends.onnxruntime_runner:OnnxRuntimeRunner",
        frozenset({"fused_attention", "folded_attention", "allow_unverified", "io_binding", "optimization",
                   "memory_pattern", "session_config", "profile_prefix"}),
        "pip install onnxruntime (a core dependency)", ("onnxruntime",), **_cpu_facts("onnxruntime")),
    "openvino": RuntimeEntry(
        "openvino", "OpenVINO's CPU plugin (optional extra)", (".onnx",),
        "vitdeploy.runtime.backends.openvino_runner:OpenVinoRunner",
        frozenset({"seven_bit_weights", "gelu_apart"}),
        "pip install 'vitdeploy[openvino]'", ("openvino",), **_cpu_facts("openvino")),
    "tensorrt": RuntimeEntry(
        "tensorrt", "TensorRT engines from 'vitdeploy build-engine' (classic or TensorRT for RTX; NVIDIA GPU)",
        (".plan", ".engine", ".trt"),
        "vitdeploy.runtime.backends.tensorrt_runner:TensorRTRunner",
        frozenset({"runtime_cache", "check_compatibility"}),
        "pip install 'vitdeploy[tensorrt]' or 'vitdeploy[tensorrt-rtx]' on a machine with an NVIDIA GPU",
        ("tensorrt", "tensorrt_rtx_bindings"), "TensorRT"),
}
#: The runtime an ONNX file opens on when none is asked for.
DEFAULT_RUNTIME = "onnxruntime"
#: The ``--runtime`` choices: the runtimes that open ONNX files.
ONNX_RUNTIMES: tuple[str, ...] = tuple(name for name, entry in RUNTIMES.items() if entry.reads_onnx)
#: Engine files: the suffixes of the runtimes that do not open ONNX files.
ENGINE_SUFFIXES: tuple[str, ...] = tuple(s for entry in RUNTIMES.values() if not entry.reads_onnx for s in entry.suffixes)


def cpu_runtimes_for(needs: FileNeeds, among: tuple[str, ...] = ONNX_RUNTIMES) -> tuple[str, ...]:
    """The runtimes of ``among`` that run a file with ``needs`` on the CPU, in registry order."""
    return tuple(name for name in among if RUNTIMES[name].cpu_gap(needs) is None)


def policy_runtime(policy: str) -> str:
    """The first runtime that takes the precision ``policy`` on the CPU (``bf16``: OpenVINO's BF16 inference)."""
    return next(name for name in ONNX_RUNTIMES if policy in RUNTIMES[name].policies)


def runtime_for_file(path: Path) -> RuntimeEntry | None:
    """The runtime a file opens on by its suffix alone (ONNX: the default), or None for a suffix none opens."""
    suffix = path.suffix.lower()
    if suffix in RUNTIMES[DEFAULT_RUNTIME].suffixes:
        return RUNTIMES[DEFAULT_RUNTIME]
    return next((entry for entry in RUNTIMES.values() if suffix in entry.suffixes), None)


__all__ = ["CUSTOM_OPS", "DEFAULT_RUNTIME", "ENGINE_SUFFIXES", "ONNX_RUNTIMES", "ONNX_SUFFIXES", "RUNTIMES", "FileNeeds",
           "RuntimeEntry", "cpu_runtimes_for", "policy_runtime", "runtime_for_file"]
