"""This CPU's measured rows: the choice ``auto`` makes without measuring, where the first-use probe is off or ran
nothing, and what an INT8 file measured against it (``doctor`` says so; ``auto`` never picks INT8).
"""

from __future__ import annotations

from dataclasses import dataclass

from vitdeploy.cpu_features import CpuFeatures, cpu_features
from vitdeploy.precisions import Precision
from vitdeploy.runtime.backends.registry import DEFAULT_RUNTIME, ONNX_RUNTIMES, RUNTIMES, FileNeeds, cpu_runtimes_for
from vitdeploy.runtime.deploy.deployment import Deployment
from vitdeploy.runtime_facts import CPU_DEFAULT_ROWS, CpuDefault, flag_condition

#: The measured per-CPU-feature defaults, first match wins, from the data file the C++ library reads too
#: (``vitdeploy/data/runtime_facts.json``, each row with its evidence). Only what was measured is there: BF16 on
#: AVX512-BF16 without AMX (AMD Zen 4, Intel Cooper Lake) has not been, nor FP32 on AVX-512 CPUs without AMX against
#: OpenVINO's f32 on the ``generic`` file, so those CPUs keep the exact default until a profile (``vitdeploy tune``)
#: proves otherwise. ``precision`` ``file`` on OpenVINO is the FP32 file's math as written (f32 pinned).
CPU_DEFAULTS: tuple[CpuDefault, ...] = CPU_DEFAULT_ROWS


@dataclass(frozen=True)
class Int8Measurement:
    """What vitdeploy's INT8 SAM ViT-B encoder measured against this CPU's FP32 default, on x86 CPUs with every one of
    ``flags`` and none of ``without``. ``auto`` never picks it (an INT8 file is another accuracy class, made by
    ``calibrate -p int8``); ``doctor`` says what it would buy.

    Attributes:
        runs: per CPU kind measured, ``(cpu, INT8 ms, FP32 default ms)``: SAM ViT-B@1024, 2 threads, medians from one
            alternated run of ``benchmarks/bench_encoder_speed.py`` (docs/benchmarks.md). The INT8 file is
            ``calibrate -p int8`` of the ``onnxruntime-cpu`` export on ONNX Runtime with the fused kernel; the default
            is the ``generic`` export as ``--runtime auto`` ran it there.
        default: the FP32 default in those runs, as :meth:`Deployment.label` names it (``openvino bf16``): what
            :func:`cpu_default` still chooses on such a CPU, or, where BF16 units make the probe's choice the default,
            the candidate it chose (a test holds the two together). The Zen 4 row with BF16 is against OpenVINO BF16,
            the probe's choice there (``benchmarks/bench_int8_vs_default.py``: three rotated rounds of fresh
            processes, 2026-11-28); the row without BF16 keeps the first run, taken on the same Zen 4 against ONNX
            Runtime FP32 before the probe existed.
    """

    flags: tuple[str, ...]
    runs: tuple[tuple[str, float, float], ...]
    default: str
    without: tuple[str, ...] = ()

    def applies(self, features: CpuFeatures) -> bool:
        return features.x86_with(self.flags, self.without)

    def describe(self) -> str:
        """``INT8 (...) took 0.86x (AMD EPYC Zen 3 ...: 6582 against 7656 ms) ... the time of the FP32 default ...``."""
        each = " and ".join(f"{int8 / fp32:.2f}x ({cpu}: {int8:.0f} against {fp32:.0f} ms)" for cpu, int8, fp32 in self.runs)
        return (f"INT8 (cosine >= 0.99 vs FP32: 'calibrate -p int8' of an onnxruntime-cpu export, with the fused kernel) "
                f"took {each} the time of the FP32 default ({self.default} on the generic export) on CPUs with "
                f"{flag_condition(self.flags, self.without)}, SAM ViT-B@1024, 2 threads")


#: What an INT8 file measured against the FP32 default, per CPU kind, first match wins (each run's command and
#: table are in docs/benchmarks.md). Not measured: x86 CPUs with AVX-512 and without VNNI, and other architectures.
INT8_MEASUREMENTS: tuple[Int8Measurement, ...] = (
    Int8Measurement(("amx_int8",), (("Intel Xeon with AMX, family 6 model 167", 2069, 1026),),
                    "openvino bf16"),
    Int8Measurement(("avx512f", "avx512_vnni", "avx512_bf16"), (("AMD EPYC Zen 4, family 25 model 17", 3106, 3119),),
                    "openvino bf16"),
    Int8Measurement(("avx512f", "avx512_vnni"), (("AMD EPYC Zen 4, family 25 model 17", 2925, 6549),),
                    "onnxruntime file", without=("avx512_bf16",)),
    Int8Measurement(("avx2",), (("AMD EPYC Zen 3, family 25 model 1", 6582, 7656),
                                ("AMD EPYC Zen 1, family 23 model 1", 14432, 15077)),
                    "openvino file", without=("avx512f",)),
)


def int8_measurement(features: CpuFeatures | None = None) -> Int8Measurement | None:
    """The :data:`INT8_MEASUREMENTS` row of this CPU kind (None: INT8 was not measured on one like it)."""
    features = features or cpu_features()
    return next((row for row in INT8_MEASUREMENTS if row.applies(features)), None)


def cpu_default(family: str | None, file_precision: str, features: CpuFeatures | None = None,
                installed: frozenset[str] | None = None, custom_ops: frozenset[str] = frozenset()) -> Deployment:
    """This CPU's measured default for a file of ``family`` whose graph is ``file_precision`` and holds ``custom_ops``
    (:data:`CPU_DEFAULTS`, whose rows were measured on FP32 files; a row applies only where its runtime runs the
    file, :meth:`~vitdeploy.runtime.backends.registry.RuntimeEntry.cpu_gap`). Where no row applies: the file as
    written on ONNX Runtime, or, where ONNX Runtime's CPU cannot run it, on the first installed runtime that can."""
    features = features or cpu_features()
    if installed is None:
        installed = frozenset(name for name in ONNX_RUNTIMES if RUNTIMES[name].installed())
    needs = FileNeeds(Precision.parse(file_precision), frozenset(custom_ops))
    runs = cpu_runtimes_for(needs)
    passed_over = ""
    if needs.precision is Precision.FP32:
        for row in CPU_DEFAULTS:
            if not row.applies(features, family):
                continue
            if row.runtime not in runs:  # e.g. a fused-kernel file on a CPU whose default is OpenVINO
                passed_over = f"this CPU's default is {row.runtime}, but the file {RUNTIMES[row.runtime].cpu_gap(needs)}"
                break
            if row.runtime in installed:
                return Deployment(row.runtime, row.precision, source=f"this CPU's default ({row.describe()})")
            return Deployment(DEFAULT_RUNTIME, source=f"this CPU's default ({row.describe()}) needs "
                              f"{row.runtime}, which is not installed: {RUNTIMES[row.runtime].install}")
    if DEFAULT_RUNTIME in runs:
        return Deployment(DEFAULT_RUNTIME, source=f"the file as written on {DEFAULT_RUNTIME} ({passed_over})" if passed_over
                          else f"this CPU's default (the file as written on {DEFAULT_RUNTIME})")
    gap = RUNTIMES[DEFAULT_RUNTIME].cpu_gap(needs)
    if not runs:  # the default runtime's runner refuses it in its own words
        return Deployment(DEFAULT_RUNTIME, source=f"no CPU runtime runs the file (it {gap})")
    able = [name for name in runs if name in installed]
    if not able:
        return Deployment(DEFAULT_RUNTIME, source=f"the file {gap}; it needs {runs[0]} on the CPU, which is not "
                          f"installed: {RUNTIMES[runs[0]].install}")
    slower = "" if needs.precision is not Precision.BF16 or features.bf16_units else (
        "; this CPU has no BF16 units, where the FP32 file it was made from ran faster (AMD EPYC Zen 3, "
        "SAM ViT-B on OpenVINO: 1.06x the FP32 file's time)")
    return Deployment(able[0], source=f"{able[0]} runs it on the CPU (the file {gap}){slower}")


__all__ = ["CPU_DEFAULTS", "INT8_MEASUREMENTS", "CpuDefault", "Int8Measurement", "cpu_default", "int8_measurement"]
