"""ONNX Runtime session settings, in one typed place, and the ``SessionOptions`` they make.

What each setting does on ONNX Runtime's CPU provider (documented under "Performance / Tune
performance" and "Graph optimizations" in the ONNX Runtime docs):

* ``optimization``: graph optimization level. ``basic`` folds constants and removes redundant nodes;
  ``extended`` adds the fusions (GELU, LayerNorm, MatMul+Add -> Gemm, attention, ...); ``all`` adds
  layout transforms (NCHWc convolutions) that tie the graph to this CPU.
* ``optimized_model_path``: save the optimized graph (to inspect its fusions, see
  :mod:`vitdeploy.runtime.backends.ort_fusions`; or to load it later with ``optimization="disable"`` and
  skip the optimizer at start-up).
* ``threads``: intra-op threads (one op's work split); inter-op threads stay 1 (sequential executor).
* ``memory_arena``: CPU memory arena (keeps freed blocks for reuse; faster, holds peak memory).
* ``memory_pattern``: ONNX Runtime traces the first run's allocations and from the next run on makes one
  big allocation per run laid out from that trace (static shapes). **Off by default on the CPU in
  vitdeploy** (ONNX Runtime's own default is on); see :func:`default_memory_pattern`.
* ``spinning``: idle pool threads spin waiting for work (lowest latency on an otherwise idle machine;
  on a shared or oversubscribed one, ``False`` gives the cores back).
* ``io_binding``: bind inputs and pre-allocated outputs instead of copying results into new arrays.
* ``disabled_optimizers``: graph transformers to skip, by name. Default (None): ``MatMulAddFusion``
  for INT8 Q/DQ graphs (vitdeploy metadata ``precision`` int8), nothing otherwise. Why: that fusion
  turns ``DQ -> MatMul -> Add(bias)`` into a float Gemm before the Q/DQ fusion can make the MatMul an
  integer ``MatMulIntegerToFloat``, so the graph runs fake-quantized (float math on dequantized
  values), slower than FP32.
  Measured (ONNX Runtime 1.31, this CPU, one 4096x768x3072 linear, 1 thread): 158 ms with the
  fusion, 24 ms without it, 134 ms in FP32.
* ``config``: further ``add_session_config_entry`` keys, passed through as given (they win over the
  INT8 kernel choice below).

INT8 kernels (:func:`int8_kernels`): on x86 ONNX Runtime runs a Q/DQ graph's GEMMs on u8 x s8
integer kernels. Without VNNI/AMX they add pairs of products in int16 and saturate, which ONNX
Runtime documents, with the session option ``session.x64quantprecision`` (u8u8 kernels) as the
remedy. Measured on an AMD EPYC (AVX2, no VNNI), onnxruntime 1.31.1 and 1.32.0 alike: the tiny test
encoder's INT8 graph gave worst cosine 0.98339 vs FP32 on the default kernels and 0.99820 with the
option, the same as the graph computed in float (what TensorRT computes); one 4096x768x3072 linear
took 270 ms either way (FP32: 291 ms). So vitdeploy sets it for Q/DQ graphs wherever
:class:`vitdeploy.cpu_features.CpuFeatures` says u8s8 saturates, and reports which kernels ran.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vitdeploy.cpu_features import CpuFeatures, cpu_features
from vitdeploy.errors import InputError

OPTIMIZATION_LEVELS = ("disable", "basic", "extended", "all")


@dataclass(frozen=True)
class OrtSettings:
    """Session settings of :class:`vitdeploy.runtime.backends.onnxruntime_runner.OnnxRuntimeRunner` (ONNX Runtime's defaults where None)."""

    threads: int | None = None
    optimization: str = "all"
    optimized_model_path: str | None = None
    memory_arena: bool = True
    memory_pattern: bool = field(default_factory=lambda: default_memory_pattern("cpu"))
    spinning: bool | None = None
    io_binding: bool = False
    disabled_optimizers: tuple[str, ...] | None = None
    config: dict[str, str] = field(default_factory=dict)
    profile_prefix: str | None = None  # ONNX Runtime's profiler on: trace written to <prefix>_<date>.json

    def __post_init__(self) -> None:
        if self.optimization not in OPTIMIZATION_LEVELS:
            raise InputError(f"unknown graph optimization level '{self.optimization}': use one of {', '.join(OPTIMIZATION_LEVELS)}")
        if self.threads is not None and self.threads < 1:
            raise InputError(f"threads must be at least 1, got {self.threads}")

    def session_options(self, quantized: bool = False) -> Any:
        """A configured ``onnxruntime.SessionOptions``; ``quantized``: for a Q/DQ graph (see :func:`int8_kernels`)."""
        import onnxruntime as ort

        options = ort.SessionOptions()
        if self.threads:
            options.intra_op_num_threads = int(self.threads)
            options.inter_op_num_threads = 1
        options.graph_optimization_level = {
            "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        }[self.optimization]
        if self.optimized_model_path is not None:
            Path(self.optimized_model_path).parent.mkdir(parents=True, exist_ok=True)
            options.optimized_model_filepath = str(self.optimized_model_path)
        options.enable_cpu_mem_arena = self.memory_arena
        if self.profile_prefix is not None:
            options.enable_profiling = True
            options.profile_file_prefix = str(self.profile_prefix)
        options.enable_mem_pattern = self.memory_pattern
        if self.spinning is not None:
            options.add_session_config_entry("session.intra_op.allow_spinning", "1" if self.spinning else "0")
        if quantized:
            for key, value in int8_kernels(overrides=self.config).config.items():
                options.add_session_config_entry(key, value)
        for key, value in self.config.items():
            options.add_session_config_entry(str(key), str(value))
        return options

    def to_dict(self) -> dict[str, Any]:
        return {
            "threads": self.threads, "optimization": self.optimization, "optimized_model_path": self.optimized_model_path,
            "memory_arena": self.memory_arena, "memory_pattern": self.memory_pattern, "spinning": self.spinning,
            "io_binding": self.io_binding, "disabled_optimizers": self.disabled_optimizers, "config": dict(self.config),
            "profile_prefix": self.profile_prefix,
        }

    def optimizers_to_disable(self, quantized: bool) -> list[str]:
        """The transformers to skip: the explicit list, or the default for a Q/DQ graph or not (see module docstring)."""
        if self.disabled_optimizers is not None:
            return list(self.disabled_optimizers)
        return list(INT8_DISABLED_OPTIMIZERS) if quantized else []


def default_memory_pattern(device: str) -> bool:
    """Whether ONNX Runtime's memory pattern is on when the caller does not say: off on the CPU, ONNX Runtime's
    default (on) on the GPU providers, where it has not been measured.

    Why off on the CPU, measured on the full-size SAM ViT-B encoder (AMD EPYC Zen 1, AVX2, 2 threads,
    onnxruntime 1.32.0, ``benchmarks/bench_encoder_speed.py`` with each ONNX Runtime row run both ways, each
    in fresh processes, alternated; the flag is ``--memory-pattern-twins``): the pattern's planned block held 6.9-7.0 GB for the plain and ``generic``
    graphs against 3.7 GB without it (4.9 against 3.6 GB for ``onnxruntime-cpu``, 4.4 against 2.9 GB for
    INT8), the run that lays it out (the second) took 3-5 s longer than the others, and no row was
    slower without it (``generic``: 15.2 against 18.4 s median). The small graphs neither lose nor gain
    time (``benchmarks/probe_ort_memory.py``, same CPU: SAM decoder 92-93 ms per prompt either way, 141
    against 167 MB; timm ViT-B/16 at 224: 508 ms either way, 513-524 against 539 MB).
    """
    return device != "cpu"


def is_int8_file(path: str | Path) -> bool:
    """Whether an ONNX file is an INT8 Q/DQ graph by its vitdeploy metadata (read without loading the graph)."""
    from vitdeploy.metadata import read_metadata_props

    return read_metadata_props(path).get("vitdeploy.precision", "").strip('"') == "int8"


#: Transformers skipped by default on INT8 Q/DQ graphs (see the module docstring).
INT8_DISABLED_OPTIMIZERS = ("MatMulAddFusion",)
#: ONNX Runtime session config key: u8u8 instead of u8s8 INT8 GEMMs on x64 CPUs without VNNI.
X64_QUANT_PRECISION = "session.x64quantprecision"


@dataclass(frozen=True)
class Int8Kernels:
    """Session config entries for a Q/DQ graph on this CPU, and a line saying which integer kernels run."""

    config: dict[str, str]
    description: str


def int8_kernels(cpu: CpuFeatures | None = None, overrides: dict[str, str] | None = None) -> Int8Kernels:
    """How ONNX Runtime should run a Q/DQ graph's integer GEMMs on ``cpu`` (this CPU by default).

    ``overrides`` are the caller's own session config entries: an explicit ``session.x64quantprecision``
    there wins, and the description says so.
    """
    cpu = cpu or cpu_features()
    if overrides and X64_QUANT_PRECISION in overrides:
        chosen = overrides[X64_QUANT_PRECISION] == "1"
        return Int8Kernels({}, f"{'u8u8' if chosen else 'u8s8'} integer GEMMs ({X64_QUANT_PRECISION}="
                               f"{overrides[X64_QUANT_PRECISION]} given by the caller)")
    if cpu.u8s8_saturates:
        return Int8Kernels({X64_QUANT_PRECISION: "1"},
                           "u8u8 integer GEMMs: this CPU has no VNNI/AMX, where ONNX Runtime's default u8s8 kernels "
                           f"saturate int16 pair sums ({X64_QUANT_PRECISION}=1)")
    if cpu.x86:
        return Int8Kernels({}, "u8s8 integer GEMMs with int32 accumulation (VNNI/AMX)")
    return Int8Kernels({}, "ONNX Runtime's integer GEMMs for this CPU")


__all__ = ["INT8_DISABLED_OPTIMIZERS", "OPTIMIZATION_LEVELS", "X64_QUANT_PRECISION", "Int8Kernels", "OrtSettings",
           "default_memory_pattern", "int8_kernels", "is_int8_file"]
