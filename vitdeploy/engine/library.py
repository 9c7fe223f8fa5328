"""Which TensorRT library builds and runs an engine: classic TensorRT 10/11, or TensorRT for RTX.

Every difference between the two that vitdeploy's builder and runner meet is decided here, from the
library's documentation (NVIDIA's "Porting Guide for TensorRT Applications" and "CPU-Only AOT and
TensorRT-RTX Engines" for TensorRT-RTX 1.x), never probed by calling an API that may be missing:

==========================  =======================================  ============================================
                            TensorRT 10 / 11 (``tensorrt``)           TensorRT for RTX (``tensorrt_rtx_bindings``)
==========================  =======================================  ============================================
PyPI wheels                 stubs that download from NVIDIA's index   real wheels: ``tensorrt-rtx-cu12/13-libs`` +
                                                                      ``-bindings`` (1.7.1.116: 89/95 MB)
build needs a GPU           yes (autotunes on the device)             no: ahead-of-time build on the CPU ("CPU-only
                                                                      AOT", on by default); kernels are JIT-compiled
                                                                      on the user's GPU when the engine loads
engine targets              the build GPU's compute capability        compute capabilities 8.0, 8.6, 8.9, 12.0 and
                            (or ``--hardware-compatibility``)         later by default; 7.5 only when asked for
                                                                      (``IBuilderConfig.set_compute_capability``)
typing                      strongly typed (TensorRT 10: the flag;    strongly typed always; no weak-typing flags
                            11: always); weak FP16 only on 10
timing cache                autotuning results, reused at build       none: "forces a GPU query during AOT" and has no
                                                                      effect on the engine (deprecated in RTX 1.2);
                                                                      the *runtime cache* keeps JIT kernels instead
INT8                        explicit Q/DQ (INT8 kernels)              Q/DQ parses; the support matrix lists INT8 as
                                                                      weight-only GEMM: what the engine computes is
                                                                      read from the build's layer list, not assumed
plan portability            same release (or ``--version-compatible``)  same release (treated so: nothing documents
                                                                      more)
==========================  =======================================  ============================================

The classic library is the first choice where both are importable (``--builder auto``): it is the one
the project's GPU notes measured and its engines are autotuned for the GPU they were built on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import ModuleType
from collections.abc import Callable
from typing import Any, ClassVar

from vitdeploy.engine.rtx_gpus import RTX_COMPUTE_CAPABILITIES, RTX_DEFAULT_TARGETS, rtx_runs_on, rtx_unsupported_gpu
from vitdeploy.engine.versions import TENSORRT_INSTALL_HINT, import_tensorrt, weak_typing_available
from vitdeploy.errors import InputError, MissingDependencyError

CLASSIC = "tensorrt"
RTX = "tensorrt-rtx"
#: The libraries a sidecar may name (``tensorrt.library``).
LIBRARIES = (CLASSIC, RTX)
#: ``--builder`` choices: ``auto`` takes classic TensorRT where it imports, else TensorRT for RTX.
BUILDER_CHOICES = ("auto", CLASSIC, RTX)

RTX_INSTALL_HINT = (
    "pip install 'vitdeploy[tensorrt-rtx]' (TensorRT for RTX for CUDA 13; "
    "'vitdeploy[tensorrt-rtx-cu12]' for CUDA 12 drivers)"
)
@dataclass(frozen=True)
class TensorRTLibrary:
    """One importable TensorRT library and what the builder and runner act on, as a type: classic TensorRT 10/11
    (this class) or :class:`TensorRTForRTX`, each answering for itself (the table above), so no caller tests which.

    Attributes:
        module: the imported Python module (``tensorrt`` or ``tensorrt_rtx_bindings``).
        version: its ``__version__``.
    """

    module: ModuleType
    version: str

    #: ``tensorrt`` or ``tensorrt-rtx``: the ``--builder`` value and what a sidecar records as ``tensorrt.library``.
    name: ClassVar[str] = CLASSIC
    #: How messages name it.
    title: ClassVar[str] = "TensorRT"
    #: Whether a build runs without a GPU (TensorRT-RTX's ahead-of-time build); classic TensorRT autotunes on one.
    builds_without_gpu: ClassVar[bool] = False
    #: Whether it keeps autotuning results in a timing cache (``--timing-cache``).
    has_timing_cache: ClassVar[bool] = True
    #: Whether it keeps JIT-compiled kernels in a runtime cache at load (``runtime_cache``).
    has_runtime_cache: ClassVar[bool] = False
    #: Whether the engine's build options can ask for compute capabilities (``--compute-capability``).
    targets_compute_capabilities: ClassVar[bool] = False

    @property
    def label(self) -> str:
        """``TensorRT 10.13.0.35`` or ``TensorRT-RTX 1.7.1.116``: how messages name it."""
        return f"{self.title} {self.version}"

    @property
    def weak_typing(self) -> bool:
        """Whether the weakly typed FP16 build (``BuilderFlag.FP16``) exists: classic TensorRT 10 only."""
        return weak_typing_available(self.version)

    def network_flags(self, legacy_fp16: bool) -> int:
        """``1 << STRONGLY_TYPED`` where the flag means something (classic 10); 0 on 11, on RTX and for legacy FP16.

        TensorRT-RTX has only strongly typed networks (its flag enum keeps ``STRONGLY_TYPED`` for source
        compatibility), as TensorRT 11 does.
        """
        if legacy_fp16 or not self.weak_typing:
            return 0
        return 1 << int(self.module.NetworkDefinitionCreationFlag.STRONGLY_TYPED)

    def gpu_refusal(self, gpu_name: str, compute_capability: str) -> str | None:
        """Why it runs no engine on this GPU, in one line with what to use instead; None where it runs them (classic
        TensorRT: on any GPU it supports at all)."""
        return None

    def check_engine(self, sidecar: dict[str, Any], env: Any, plan_name: str) -> list[str]:
        """Warnings for running the engine a sidecar describes here; EngineError where it cannot run (:mod:`.compat`)."""
        from vitdeploy.engine.compat import check_engine_compat

        return check_engine_compat(sidecar, env, plan_name)

    def execution_context(self, engine: Any, fill_cache: Callable[[Any], None] | None = None) -> tuple[Any, Any]:
        """(the engine's execution context, its runtime cache or None). ``fill_cache(cache)`` loads a new runtime cache
        before the context is made, where the library has one (:attr:`has_runtime_cache`); classic TensorRT ignores it."""
        return engine.create_execution_context(), None


@dataclass(frozen=True)
class TensorRTForRTX(TensorRTLibrary):
    """TensorRT for RTX (``tensorrt_rtx_bindings``): builds ahead of time on the CPU for compute capabilities, always
    strongly typed, no timing cache, JIT kernels in a runtime cache at load, and runs on the GPUs of
    :func:`rtx_runs_on` only (:meth:`gpu_refusal`)."""

    name: ClassVar[str] = RTX
    title: ClassVar[str] = "TensorRT-RTX"
    builds_without_gpu: ClassVar[bool] = True
    has_timing_cache: ClassVar[bool] = False
    has_runtime_cache: ClassVar[bool] = True
    targets_compute_capabilities: ClassVar[bool] = True

    @property
    def weak_typing(self) -> bool:
        return False

    def gpu_refusal(self, gpu_name: str, compute_capability: str) -> str | None:
        return None if rtx_runs_on(compute_capability) else rtx_unsupported_gpu(gpu_name, compute_capability)

    def check_engine(self, sidecar: dict[str, Any], env: Any, plan_name: str) -> list[str]:
        from vitdeploy.engine.compat import check_rtx_engine_compat

        return check_rtx_engine_compat(sidecar, env, plan_name)

    def execution_context(self, engine: Any, fill_cache: Callable[[Any], None] | None = None) -> tuple[Any, Any]:
        """A context from a runtime config, holding a runtime cache ``fill_cache`` loaded, where one is given."""
        config = engine.create_runtime_config()
        cache = None
        if fill_cache is not None:
            cache = config.create_runtime_cache()
            fill_cache(cache)
            config.set_runtime_cache(cache)
        return engine.create_execution_context(config), cache


def _import_classic(purpose: str) -> TensorRTLibrary:
    tensorrt = import_tensorrt(purpose)
    return TensorRTLibrary(tensorrt, str(tensorrt.__version__))


def _import_rtx(purpose: str) -> TensorRTLibrary:
    try:
        import tensorrt_rtx_bindings
    except ImportError as exc:
        raise MissingDependencyError("tensorrt-rtx", purpose, RTX_INSTALL_HINT) from exc
    except OSError as exc:  # libtensorrt_rtx.so.1 missing or for another CUDA
        raise MissingDependencyError("tensorrt-rtx", purpose, f"its libraries do not load ({exc}); {RTX_INSTALL_HINT}") from exc
    return TensorRTForRTX(tensorrt_rtx_bindings, str(tensorrt_rtx_bindings.__version__))


def load_library(builder: str, purpose: str) -> TensorRTLibrary:
    """The TensorRT library ``builder`` names (``auto``: classic where importable, else TensorRT-RTX).

    Raises:
        InputError: an unknown ``builder``.
        MissingDependencyError: the named library (for ``auto``: neither) imports; the message names both installs.
    """
    if builder == CLASSIC:
        return _import_classic(purpose)
    if builder == RTX:
        return _import_rtx(purpose)
    if builder != "auto":
        raise InputError(f"unknown TensorRT builder '{builder}': use one of {', '.join(BUILDER_CHOICES)}")
    try:
        return _import_classic(purpose)
    except MissingDependencyError as classic:
        try:
            return _import_rtx(purpose)
        except MissingDependencyError:
            raise MissingDependencyError(
                "tensorrt", purpose,
                f"neither TensorRT nor TensorRT for RTX imports here: {RTX_INSTALL_HINT}, or {TENSORRT_INSTALL_HINT}",
            ) from classic


def library_of_sidecar(sidecar: dict[str, Any]) -> str:
    """Which library built the engine a sidecar describes (sidecars written before TensorRT-RTX say nothing: classic)."""
    name = (sidecar.get("tensorrt") or {}).get("library", CLASSIC)
    if name not in LIBRARIES:
        raise InputError(f"the sidecar names an unknown TensorRT library '{name}': rebuild the engine with 'vitdeploy build-engine'")
    return str(name)


def parse_compute_capability(text: str) -> str:
    """``"8.6"``, ``"86"`` or ``"sm_86"`` -> ``"8.6"`` (InputError for anything TensorRT-RTX 1.7 cannot target)."""
    raw = str(text).strip().lower()
    match = re.fullmatch(r"(?:sm_?)?(\d+)\.?(\d)", raw)
    value = f"{int(match.group(1))}.{match.group(2)}" if match else raw
    if value not in RTX_COMPUTE_CAPABILITIES:
        raise InputError(f"--compute-capability '{text}' is not one TensorRT-RTX can target: use one of "
                         f"{', '.join(RTX_COMPUTE_CAPABILITIES)}")
    return value


def set_rtx_targets(library: TensorRTLibrary, config: Any, targets: tuple[str, ...]) -> tuple[str, ...]:
    """Set the compute capabilities a TensorRT-RTX engine is built for; returns what the engine targets.

    No ``targets``: the library's default (:data:`RTX_DEFAULT_TARGETS`, the config left as it is).
    """
    if not targets:
        return RTX_DEFAULT_TARGETS
    trt = library.module
    config.num_compute_capabilities = len(targets)
    for index, cc in enumerate(targets):
        member = getattr(trt.ComputeCapability, RTX_COMPUTE_CAPABILITIES[cc])
        if not config.set_compute_capability(member, index):
            raise InputError(f"{library.label} refused compute capability {cc} at index {index}: "
                             f"choose from {', '.join(RTX_COMPUTE_CAPABILITIES)}")
    return tuple(targets)
