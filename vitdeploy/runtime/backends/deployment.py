"""What a deployment is and where ``--runtime auto`` may take one from without measuring: profiles and the rows.

A :class:`Deployment` is how one file runs: runtime, precision policy, runner settings, threads, and why. This module
reads **deployment profiles** (``encoder.onnx`` -> ``encoder.profile.json``, written by ``vitdeploy tune``; used only
where they were measured: the same model file (SHA-256), the same CPU (model name, family/model, the flags that pick
kernels), the same core count and the same version of the chosen runtime; anything else is refused in one line that
says to run ``vitdeploy tune`` again) and holds **this CPU's measured rows** (:data:`CPU_DEFAULTS`, each with the
measurement that put it there), the choice where the first-use probe is off. The order in which ``auto`` consults
them and the probe is :func:`vitdeploy.runtime.backends.auto.resolve`'s.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vitdeploy.cpu_features import REPORTED, CpuFeatures, available_cores, cpu_features
from vitdeploy.errors import InputError
from vitdeploy.fileio import sha256_file
from vitdeploy.precisions import PRECISION_POLICIES, Precision
from vitdeploy.runtime.backends.registry import DEFAULT_RUNTIME, ONNX_RUNTIMES, RUNTIMES, FileNeeds, cpu_runtimes_for
from vitdeploy.runtime_facts import CPU_DEFAULT_ROWS, PROFILE_SETTINGS, CpuDefault, flag_condition, x86_with

#: The ``--runtime`` value that asks for this module's choice.
AUTO = "auto"
#: The profile file's format tag (a reader refuses any other).
PROFILE_FORMAT = "vitdeploy-deployment-profile/1"
#: ``encoder.onnx`` -> ``encoder.profile.json``.
PROFILE_SUFFIX = ".profile.json"
#: The PyPI distribution whose version a runtime's results depend on.
RUNTIME_DISTRIBUTIONS = {"onnxruntime": ("onnxruntime", "onnxruntime-gpu"), "openvino": ("openvino",)}


@dataclass(frozen=True)
class Deployment:
    """How one file runs: the runtime, its precision policy, the runner's own settings and the threads.

    Attributes:
        runtime: a name in :data:`~vitdeploy.runtime.backends.registry.RUNTIMES`.
        precision: a policy in :data:`~vitdeploy.precisions.PRECISION_POLICIES`.
        threads: intra-op threads (None: the caller's or the runtime's default).
        settings: the runner's own keyword settings (ONNX Runtime's attention forms), as ``(key, value)`` pairs.
        source: why this deployment, in one line (the profile's path, the CPU default's row, or "asked").
    """

    runtime: str
    precision: str = "file"
    threads: int | None = None
    settings: tuple[tuple[str, Any], ...] = ()
    source: str = "asked"

    def label(self) -> str:
        """``openvino bf16``, ``onnxruntime file fused_attention=False``: the candidate's name in tables."""
        parts = [self.runtime, self.precision, *(f"{k}={v}" for k, v in self.settings)]
        return " ".join(parts)

    def describe(self) -> str:
        """``openvino bf16, 2 thread(s): profile x.profile.json``: what runs, and why (the verbs' note line)."""
        return f"{self.label()}, {self.threads or 'default'} thread(s): {self.source}"

    def to_dict(self) -> dict[str, Any]:
        return {"runtime": self.runtime, "precision": self.precision, "threads": self.threads,
                "settings": dict(self.settings)}

    @classmethod
    def from_dict(cls, data: Any, source: str, features: CpuFeatures | None = None) -> Deployment:
        """A deployment a profile names, held to what ``vitdeploy tune`` writes (a hand-edited profile is not
        trusted further): a known runtime and a policy it takes, whole threads from 1 to this machine's cores, only
        the runner settings tune tries (:data:`~vitdeploy.runtime_facts.PROFILE_SETTINGS`, true or false), and a reduced
        policy (BF16, FP16) only on a CPU with its units. Anything else is refused in one line."""
        def refuse(why: str) -> InputError:
            return InputError(f"{source}: {why}: run 'vitdeploy tune' again")

        if not isinstance(data, dict) or data.get("runtime") not in ONNX_RUNTIMES \
                or data.get("precision", "file") not in PRECISION_POLICIES \
                or not isinstance(data.get("settings", {}), dict):
            raise refuse(f"the chosen deployment is damaged ({json.dumps(data)[:120]})")
        if data.get("precision", "file") not in RUNTIMES[data["runtime"]].policies:
            raise refuse(f"{data['runtime']} does not take precision {data['precision']}")
        threads, cores = data.get("threads"), available_cores()
        if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or not 1 <= threads <= cores):
            raise refuse(f"threads is {json.dumps(threads)}, expected a whole number from 1 to this machine's {cores} cores")
        settings = tuple(sorted(data.get("settings", {}).items()))
        unknown = sorted({k for k, _ in settings} - RUNTIMES[data["runtime"]].settings)
        if unknown:
            raise refuse(f"{', '.join(unknown)} is not a setting of {data['runtime']}")
        untuned = sorted(k for k, _ in settings if k not in PROFILE_SETTINGS)
        if untuned:
            raise refuse(f"{', '.join(untuned)} is not a setting 'vitdeploy tune' writes (it writes {', '.join(PROFILE_SETTINGS)})")
        not_bool = [f"{k} is {json.dumps(v)}" for k, v in settings if not isinstance(v, bool)]
        if not_bool:
            raise refuse(f"{', '.join(not_bool)}, expected true or false")
        policy = data.get("precision", "file")
        if policy != "file" and not (features or cpu_features()).policy_units(policy):
            raise refuse(f"it runs {policy.upper()}, and this CPU has no {policy.upper()} units")
        return cls(data["runtime"], data.get("precision", "file"), threads, settings, source)


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
        return x86_with(features, self.flags, self.without)

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


def profile_path(model: str | Path) -> Path:
    """Where ``model``'s deployment profile lives: beside it, ``<stem>.profile.json``."""
    model = Path(model)
    return model.with_name(model.stem + PROFILE_SUFFIX)


_DIGESTS: dict[tuple[str, int, int], str] = {}


def model_digest(model: str | Path) -> str:
    """SHA-256 of the model file and of its external data file (``<name>.data``) where there is one, cached per
    (path, size, mtime) in this process: a profile belongs to these bytes, wherever they were copied."""
    model = Path(model)
    files = [model] + [p for p in (model.with_name(model.name + ".data"),) if p.is_file()]
    stats = [f.stat() for f in files]
    key = (str(model.resolve()), sum(s.st_size for s in stats), max(s.st_mtime_ns for s in stats))
    if key not in _DIGESTS:
        digests = [sha256_file(f) for f in files]
        _DIGESTS[key] = digests[0] if len(digests) == 1 else hashlib.sha256(" ".join(digests).encode()).hexdigest()
    return _DIGESTS[key]


def runtime_versions() -> dict[str, str]:
    """The installed version of each ONNX runtime (``{}`` entries missing where not installed)."""
    from importlib import metadata

    versions = {}
    for runtime, distributions in RUNTIME_DISTRIBUTIONS.items():
        for distribution in distributions:
            try:
                versions[runtime] = metadata.version(distribution)
                break
            except metadata.PackageNotFoundError:
                continue
    return versions


def machine_fingerprint(features: CpuFeatures | None = None) -> dict[str, Any]:
    """What a profile's measurements depend on: the CPU (model name, family/model, the reported flags after
    ``VITDEPLOY_CPU_MASK``) and the cores this process may use."""
    features = features or cpu_features()
    return {"cpu": features.model, "family_model": features.family_model, "machine": features.machine,
            "flags": [f for f in REPORTED if f in features.flags], "cores": available_cores()}


def read_profile(path: str | Path) -> dict[str, Any]:
    """The profile at ``path``, its format checked (not yet matched to a model or machine: :func:`profile_problems`)."""
    path = Path(path)
    try:
        profile = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read the deployment profile '{path}' ({type(exc).__name__}): delete it or run "
                         "'vitdeploy tune' again") from None
    if not isinstance(profile, dict) or profile.get("format") != PROFILE_FORMAT:
        raise InputError(f"'{path}' is not a vitdeploy deployment profile (format {PROFILE_FORMAT}): delete it or run "
                         "'vitdeploy tune' again")
    for key in ("model_sha256", "machine", "runtime_versions", "chosen"):
        if key not in profile:
            raise InputError(f"the deployment profile '{path}' lacks '{key}': run 'vitdeploy tune' again")
    for key, kind, name in (("machine", dict, "an object"), ("runtime_versions", dict, "an object"),
                            ("chosen", dict, "an object"), ("candidates", list, "a list"), ("model_sha256", str, "a string")):
        if key in profile and not isinstance(profile[key], kind):
            raise InputError(f"the deployment profile '{path}' has a '{key}' that is not {name}: run 'vitdeploy tune' again")
    candidates = profile.get("candidates", [])
    if not all(isinstance(c, dict) and isinstance(c.get("deployment"), dict) for c in candidates):
        raise InputError(f"the deployment profile '{path}' has a candidate without its deployment: run 'vitdeploy tune' again")
    passed = [c["deployment"] for c in candidates if c.get("passed") is True]
    if candidates and not any(_same_choice(profile["chosen"], d) for d in passed):
        raise InputError(f"the deployment profile '{path}' chooses a deployment that is not one of its passing candidates "
                         "(the profile's own verdicts): run 'vitdeploy tune' again")
    return profile


def _same_choice(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two deployments a profile writes are the same choice (runtime, policy, settings, threads)."""
    keys = ("runtime", "precision", "settings", "threads")
    return all(a.get(k) == b.get(k) for k in keys)


def profile_problems(profile: dict[str, Any], model: str | Path, features: CpuFeatures | None = None) -> list[str]:
    """Why ``profile`` does not describe running ``model`` here (empty: it does), each one phrase. The machine and the
    runtime version are checked first; the model file is hashed only when they fit (a foreign profile costs no I/O)."""
    problems = []
    tuned, here = profile["machine"], machine_fingerprint(features)
    for key, what in (("cpu", "CPU"), ("family_model", "CPU family/model"), ("flags", "CPU flags"), ("cores", "core count")):
        if tuned.get(key) != here[key]:
            problems.append(f"it was tuned on another {what} ({tuned.get(key)!r}; here {here[key]!r})")
    chosen = profile["chosen"]
    runtime = chosen.get("runtime") if isinstance(chosen, dict) else None
    if runtime is not None:
        was, now = profile["runtime_versions"].get(runtime), runtime_versions().get(runtime)
        if now is None:
            problems.append(f"its runtime {runtime} is not installed here ({RUNTIMES[runtime].install})"
                            if runtime in RUNTIMES else f"its runtime '{runtime}' is unknown")
        elif was != now:
            problems.append(f"it was tuned with {runtime} {was}, here {now}")
    if not problems and profile["model_sha256"] != model_digest(model):
        problems.append(f"it was tuned for another file than '{Path(model).name}' (its SHA-256 differs)")
    return problems


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


__all__ = ["AUTO", "CPU_DEFAULTS", "INT8_MEASUREMENTS", "PROFILE_FORMAT", "PROFILE_SUFFIX", "CpuDefault", "Deployment",
           "Int8Measurement", "cpu_default", "int8_measurement",
           "machine_fingerprint", "model_digest", "profile_path", "profile_problems", "read_profile", "runtime_versions"]
