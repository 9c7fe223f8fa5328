"""What this machine can do: the components vitdeploy uses, probed for real, and which verbs will work.

The runtimes a verb would load are loaded for real (no guessing from package lists): a TensorRT
wheel that is installed but cannot load its libraries is reported as unusable, a CUDA build of
PyTorch on a machine without a driver as "no GPU". The PyTorch-side packages are found and versioned
without importing them unless ``--deep`` (importing torch, segment_anything and timm took ~8 s of
the 10 s doctor used to take on a 2-core machine). The verb table is derived from those results by
:func:`verb_readiness`, a pure function of the component states.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Component:
    """One probed component: usable or not, its version, and a one-line detail."""

    name: str
    ok: bool
    version: str | None = None
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: What each verb needs (component names as in :func:`probe_components`). Verbs not listed need only
#: the core install. ``benchmark`` is partial: it works with ONNX Runtime and grows with the rest.
VERB_NEEDS: dict[str, tuple[str, ...]] = {
    "export": ("torch", "onnx", "segment_anything"),
    "validate": ("torch", "onnxruntime", "segment_anything"),
    "calibrate": ("onnx", "onnxruntime"),
    "benchmark": ("onnxruntime",),
    "tune": ("onnxruntime",),
    # engine-build: TensorRT-RTX (no GPU needed), or classic TensorRT with polygraphy, cuda-python and a GPU
    "build-engine": ("engine-build",),
}
#: Optional extras of a verb: (components, what they add).
VERB_EXTRAS: dict[str, list[tuple[tuple[str, ...], str]]] = {
    "benchmark": [(("torch",), "eager PyTorch baseline"), (("engine-run",), "TensorRT engines"),
                  (("torch-cuda",), "eager PyTorch on the GPU"), (("fused-attention",), "--fused-attention"),
                  (("openvino",), "--runtime openvino"), (("openvino-bf16",), "--inference-precision bf16")],
    "validate": [(("fused-attention",), "--fused-attention"), (("openvino",), "--runtime openvino"),
                 (("openvino-bf16",), "--inference-precision bf16")],
    "predict": [(("openvino",), "--runtime openvino"), (("openvino-bf16",), "--inference-precision bf16")],
    "tune": [(("openvino",), "OpenVINO candidates"), (("openvino-bf16",), "BF16 candidates")],
    "embed": [(("ray",), "--ray (Ray Data)"), (("openvino",), "--runtime openvino")],
    "segment-all": [(("ray",), "--images ... --ray (Ray Data)"), (("openvino",), "--runtime openvino")],
    "serve": [(("ray",), "--ray (Ray Serve)"), (("openvino",), "--runtime openvino")],
}


@dataclass
class VerbStatus:
    verb: str
    ready: bool
    missing: list[str] = field(default_factory=list)
    extras: list[str] = field(default_factory=list)  # "with X" / "without X (needs a, b)"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def verb_readiness(verbs: Iterable[str], components: dict[str, Component]) -> list[VerbStatus]:
    """For each verb: ready or which components are missing, and which optional parts work."""

    def ok(name: str) -> bool:
        return name in components and components[name].ok

    out = []
    for verb in sorted(verbs):
        missing = [n for n in VERB_NEEDS.get(verb, ()) if not ok(n)]
        extras = []
        for needs, what in VERB_EXTRAS.get(verb, []):
            lacking = [n for n in needs if not ok(n)]
            extras.append(f"with {what}" if not lacking else f"without {what} (needs {', '.join(lacking)})")
        out.append(VerbStatus(verb, not missing, missing, extras))
    return out


def _dist_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version as dist_version

    try:
        return dist_version(name.replace("_", "-"))
    except PackageNotFoundError:
        return "unknown"


def _module(name: str, import_name: str | None = None, deep: bool = True) -> Component:
    """Whether a package is there and its version: imported (``deep``), or found on the path and versioned from its
    installed metadata (fast: torch, segment_anything and timm alone take seconds to import)."""
    if not deep:
        import importlib.util

        try:
            spec = importlib.util.find_spec(import_name or name)
        except (ImportError, ValueError) as exc:
            return Component(name, False, None, f"not importable ({exc})")
        if spec is None:
            return Component(name, False, None, "not installed")
        return Component(name, True, _dist_version(name), "installed (not imported; 'vitdeploy doctor --deep' imports it)")
    try:
        module = __import__(import_name or name)
    except ImportError as exc:
        return Component(name, False, None, f"not installed ({exc})")
    version = getattr(module, "__version__", None)
    return Component(name, True, str(version if version is not None else _dist_version(name)))


def nvidia_device_present() -> bool:
    """An NVIDIA driver's device node exists (``/dev/nvidia0``, ``/dev/nvidiactl``): without one no CUDA call can see a GPU."""
    from pathlib import Path

    return any(Path("/dev").glob("nvidia[0-9]*")) or Path("/dev/nvidiactl").exists()


def _torch_version_file() -> tuple[str | None, str | None]:
    """(version with its local label, CUDA version or None) read from ``torch/version.py`` as text, without importing torch."""
    import importlib.util
    import re
    from pathlib import Path

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None, None
    try:
        text = (Path(list(spec.submodule_search_locations)[0]) / "version.py").read_text()
    except OSError:
        return None, None

    def value(key: str) -> str | None:
        match = re.search(rf"^{key}[^=\n]*=\s*['\"]([^'\"]+)['\"]", text, re.M)
        return match.group(1) if match else None

    return value("__version__"), value("cuda")


def _torch(deep: bool = True) -> tuple[Component, Component]:
    if not deep and not nvidia_device_present():
        comp = _module("torch", deep=False)
        if not comp.ok:
            return comp, Component("torch-cuda", False, None, "PyTorch not installed")
        version, cuda = _torch_version_file()
        comp.version = version or comp.version
        comp.detail = f"CUDA build {cuda}" if cuda else "CPU-only build"
        return comp, Component("torch-cuda", False, cuda, f"{comp.detail}; no NVIDIA device (/dev/nvidia*) on this machine")
    comp = _module("torch")
    if not comp.ok:
        return comp, Component("torch-cuda", False, None, "PyTorch not installed")
    import torch

    build = f"CUDA build {torch.version.cuda}" if torch.version.cuda else "CPU-only build"
    comp.detail = build
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        return comp, Component("torch-cuda", True, torch.version.cuda, f"{torch.cuda.device_count()} GPU(s), first: {name}")
    return comp, Component("torch-cuda", False, torch.version.cuda, f"{build}; torch.cuda.is_available() is False")


def _onnxruntime() -> Component:
    comp = _module("onnxruntime")
    if comp.ok:
        import onnxruntime

        comp.detail = "providers: " + ", ".join(onnxruntime.get_available_providers())
    return comp


def _tensorrt() -> Component:
    from vitdeploy.engine.versions import installed_tensorrt_version, weak_typing_available

    version, note = installed_tensorrt_version()
    if version is None:
        return Component("tensorrt", False, None, note)
    typing = "strongly typed builds; legacy weakly typed FP16 available" if weak_typing_available(version) else \
        "strongly typed builds only (weak typing removed in TensorRT 11)"
    return Component("tensorrt", True, version, typing)


def _tensorrt_rtx() -> Component:
    from vitdeploy.engine.library import RTX, RTX_DEFAULT_TARGETS, load_library
    from vitdeploy.errors import MissingDependencyError

    try:
        library = load_library(RTX, "TensorRT for RTX")
    except MissingDependencyError as exc:
        return Component(RTX, False, None, str(exc).replace(f"TensorRT for RTX needs the '{RTX}' package, which is ", ""))
    return Component(RTX, True, library.version,
                     f"builds engines on this machine without a GPU (ahead of time) for compute capability "
                     f"{', '.join(RTX_DEFAULT_TARGETS)} and later; they run on such an NVIDIA GPU")


def _engine_paths(comps: dict[str, Component]) -> list[Component]:
    """Which library ``build-engine`` takes here (``--builder auto``) and whether engines can run here."""
    from vitdeploy.engine.library import rtx_runs_on, rtx_unsupported_gpu

    classic_build = all(comps[n].ok for n in ("tensorrt", "polygraphy", "cuda-python", "gpu"))
    if classic_build:
        build = Component("engine-build", True, None, f"classic TensorRT {comps['tensorrt'].version} on {comps['gpu'].detail}")
    elif comps["tensorrt-rtx"].ok:
        build = Component("engine-build", True, None, f"TensorRT-RTX {comps['tensorrt-rtx'].version}, ahead of time on the CPU")
    else:
        build = Component("engine-build", False, None,
                          "needs tensorrt-rtx (any machine), or tensorrt + polygraphy + cuda-python + a GPU")
    libraries = [n for n in ("tensorrt", "tensorrt-rtx") if comps[n].ok]
    refused = ""  # TensorRT-RTX installed on a GPU it runs nothing on (an H100): its engines do not count
    if "tensorrt-rtx" in libraries and comps["gpu"].ok and not rtx_runs_on(str(comps["gpu"].version)):
        refused = rtx_unsupported_gpu(comps["gpu"].detail.split(",")[0], str(comps["gpu"].version))
        libraries.remove("tensorrt-rtx")
        if not libraries:
            return [build, Component("engine-run", False, None, refused)]
    if libraries and comps["cuda-python"].ok and comps["gpu"].ok:
        run = Component("engine-run", True, None, f"{' and '.join(libraries)} engines on {comps['gpu'].detail}"
                        + ("; not tensorrt-rtx engines: " + refused.split(": ")[0] if refused else ""))
    else:
        lacking = [n for n, ok in (("tensorrt or tensorrt-rtx", bool(libraries)), ("cuda-python", comps["cuda-python"].ok),
                                   ("an NVIDIA GPU", comps["gpu"].ok)) if not ok]
        run = Component("engine-run", False, None, f"engines cannot run here: needs {', '.join(lacking)}")
    return [build, run]


def _cuda_python_and_gpu() -> tuple[Component, Component]:
    from vitdeploy.errors import VitdeployError
    from vitdeploy.cuda import cuda_python_version, cudart, query_gpu

    version = cuda_python_version()
    try:
        cudart()
    except VitdeployError as exc:
        return Component("cuda-python", False, version, str(exc)), _gpu_without_cuda_python()
    comp = Component("cuda-python", True, version, "cuda.bindings.runtime importable")
    try:
        gpu = query_gpu(0)
    except VitdeployError as exc:
        return comp, Component("gpu", False, None, str(exc))
    return comp, Component("gpu", True, gpu.compute_capability,
                           f"{gpu.name}, compute capability {gpu.compute_capability}, {gpu.total_memory_mib} MiB, "
                           f"driver supports CUDA {gpu.driver_cuda_version}")


def _gpu_without_cuda_python() -> Component:
    """Best effort when cuda-python is absent: ``nvidia-smi -L`` if it is on PATH."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return Component("gpu", False, None, "cuda-python not installed and no nvidia-smi on PATH: no GPU seen")
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Component("gpu", False, None, f"nvidia-smi failed ({exc})")
    lines = [ln for ln in listed.stdout.splitlines() if ln.startswith("GPU ")]
    if not lines:
        return Component("gpu", False, None, f"nvidia-smi lists no GPU ({listed.stderr.strip() or 'empty output'})")
    return Component("gpu", False, None, f"{lines[0]} (seen by nvidia-smi; install cuda-python to use it)")


def _fused_attention() -> Component:
    """vitdeploy's fused rel-pos attention library: built, loadable, and on which path ViT-B's global blocks run."""
    from vitdeploy.runtime.forms import relpos_kernel

    path, why = relpos_kernel.usable_library()
    if why:  # not loadable, or a library without the probe symbol
        return Component("fused-attention", False, None, why)
    if path is None:
        return Component("fused-attention", False, None,
                         f"{relpos_kernel.LIBRARY_NAME} not built: 'bash cpp/build.sh' (or set {relpos_kernel.LIBRARY_ENV})")
    taken = relpos_kernel.kernel_path(4096, 64, path)
    how = (f"{taken} path (used by default for onnxruntime-cpu/tensorrt exports on the CPU)" if taken != "portable" else
           "portable path only (no AVX2/FMA here): the runner leaves attention to ONNX Runtime")
    return Component("fused-attention", taken != "portable", None, f"{path}; ViT-B global blocks: {how}")


def probe_components(deep: bool = False) -> dict[str, Component]:
    """Probe everything vitdeploy can use on this machine.

    By default in about a second: ONNX Runtime, TensorRT, cuda-python and the fused-attention library
    are loaded for real (what a verb would load); the PyTorch-side packages (torch, onnx, onnxscript,
    segment_anything, timm, polygraphy) are found and versioned from their installed metadata, and
    torch is imported to ask CUDA only when an NVIDIA device node exists. ``deep`` imports every one.
    """
    torch_comp, torch_cuda = _torch(deep)
    cuda_python, gpu = _cuda_python_and_gpu()
    comps = [
        Component("python", True, platform.python_version(), f"{platform.system()} {platform.machine()}"),
        torch_comp, torch_cuda,
        _module("onnx", deep=deep), _module("onnxscript", deep=deep), _onnxruntime(),
        _module("segment_anything", deep=deep), _module("timm", deep=deep),
        _module("polygraphy", deep=deep), _module("openvino", deep=deep), _tensorrt(), _tensorrt_rtx(), cuda_python, gpu,
        _fused_attention(), _module("ray", deep=False),
    ]
    found = {c.name: c for c in comps}
    found.update({c.name: c for c in _engine_paths(found)})
    found["openvino-bf16"] = _openvino_bf16(found["openvino"], deep)
    return found


def _openvino_bf16(openvino: Component, deep: bool) -> Component:
    """BF16 inference on OpenVINO's CPU plugin (``--inference-precision bf16``): OpenVINO installed and BF16 matrix
    instructions it uses (AMX, AVX512-BF16); ``deep`` asks OpenVINO itself (``OPTIMIZATION_CAPABILITIES``), else the
    CPU's flags decide."""
    if not openvino.ok:
        return Component("openvino-bf16", False, None, "needs OpenVINO (pip install 'vitdeploy[openvino]')")
    if deep:
        import openvino as ov

        has = "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
        how = "OpenVINO's CPU plugin lists BF16" if has else "OpenVINO's CPU plugin does not list BF16"
    else:
        from vitdeploy.cpu_features import cpu_features

        flags = cpu_features().bf16_units
        has = bool(flags)
        how = f"this CPU has {', '.join(flags)}" if has else "this CPU has neither AMX-BF16 nor AVX512-BF16"
    detail = (f"{how}: --runtime openvino --inference-precision bf16 runs FP32 files' layers in BF16, judged by the 'bf16' "
              "budget (figures: docs/benchmarks.md)" if has else f"{how}: BF16 would run as f32")
    return Component("openvino-bf16", has, openvino.version, detail)


@dataclass
class DoctorReport:
    vitdeploy_version: str
    components: dict[str, Component]
    verbs: list[VerbStatus]
    cpu: dict[str, Any] = field(default_factory=dict)
    version_drift: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"vitdeploy_version": self.vitdeploy_version, "cpu": self.cpu,
                "components": {k: v.to_dict() for k, v in self.components.items()},
                "versions_outside_tested_set": self.version_drift,
                "verbs": [v.to_dict() for v in self.verbs]}

    def text(self) -> str:
        lines = [f"vitdeploy {self.vitdeploy_version}", f"cpu: {self.cpu.get('summary', '?')}",
                 f"     kernels: {self.cpu.get('decisions', '?')}",
                 f"     best path (--runtime auto, no profile): {self.cpu.get('best_path', '?')}",
                 "     decisions (a profile beside a file comes first; --runtime onnxruntime|openvino forces one):",
                 *(f"       {line}" for line in self.cpu.get("auto_decisions", [])),
                 f"     at INT8 accuracy: {self.cpu.get('int8_path', '?')}",
                 f"     OpenVINO model cache: {self.cpu.get('model_cache', '?')}"]
        if self.version_drift:
            lines.append("versions: OUTSIDE the tested set (results may differ from the README's; "
                         "'pip install -c requirements.lock' restores them): " + "; ".join(self.version_drift))
        else:
            lines.append("versions: every installed package at a tested version")
        lines.append("components:")
        for c in self.components.values():
            lines.append(f"  {'ok' if c.ok else 'NO'}  {c.name:<17} {c.version or '-':<14} {c.detail}")
        lines.append("verbs:")
        for v in self.verbs:
            head = "ready" if v.ready else f"unavailable: needs {', '.join(v.missing)}"
            tail = f" ({'; '.join(v.extras)})" if v.extras else ""
            lines.append(f"  {v.verb:<14} {head}{tail}")
        if not all(self.components[name].ok for name in ("torch", "segment_anything") if name in self.components):
            from vitdeploy.optional_packages import TORCH_EXTRA_HINT

            lines.append(f"the PyTorch side (export, validate, eager rows): {TORCH_EXTRA_HINT}")
        return "\n".join(lines)


def int8_path(cpu: Any) -> str:
    """What an INT8 file measured against the FP32 default on CPUs like this one (``auto`` keeps the accuracy class
    of the file it is given, so this is the user's choice to make), or that it was not measured."""
    from vitdeploy.runtime.deploy.cpu_rows import int8_measurement

    row = int8_measurement(cpu)
    measured = row.describe() if row is not None else "not measured on a CPU like this one"
    return f"{measured}; 'vitdeploy tune' of each file measures this machine's own"


def diagnose(verbs: Iterable[str], deep: bool = False) -> DoctorReport:
    """Probe the machine (``deep``: import every package, see :func:`probe_components`) and judge ``verbs``
    (the CLI passes its registered verbs)."""
    import vitdeploy
    from vitdeploy.cpu_features import cpu_features
    from vitdeploy.runtime.backends.ort_settings import int8_kernels
    from vitdeploy.runtime.deploy.auto import explain
    from vitdeploy.tested_versions import version_drift

    components = probe_components(deep)
    cpu = cpu_features()
    best_path, auto_decisions = explain(cpu)  # auto says what it decides here, without a file
    cpu_info = {**cpu.to_dict(), "summary": cpu.summary(),
                "decisions": f"INT8 on ONNX Runtime: {int8_kernels(cpu).description}",
                "best_path": best_path, "auto_decisions": auto_decisions, "int8_path": int8_path(cpu),
                "model_cache": model_cache()}
    return DoctorReport(vitdeploy.__version__, components, verb_readiness(verbs, components), cpu_info,
                        [str(d) for d in version_drift()])


def model_cache() -> str:
    """Where OpenVINO's compiled models are kept (its model cache, turned on by the runner) and what is there."""
    from vitdeploy.fileio import CACHE_ENV, user_cache_dir
    from vitdeploy.runtime.backends.openvino_runner import openvino_version

    version = openvino_version()
    if version is None:
        return "none (OpenVINO is not installed)"
    folder = user_cache_dir(f"openvino/{version}", make=False)
    if folder is None:
        return f"off ({CACHE_ENV}=none): every process compiles each model again"
    files = [p for p in folder.rglob("*") if p.is_file()]  # one folder per inference precision (the runner's)
    held = f"{len(files)} file(s), {sum(p.stat().st_size for p in files) / 1e6:.0f} MB" if files else "empty"
    return f"{folder} ({held}; {CACHE_ENV} moves it, '{CACHE_ENV}=none' turns it off)"


def tensorrt_unavailable_reason(device: int = 0) -> str | None:
    """Why TensorRT engines cannot be built and run here (None when they can): GPU tests skip with this reason.

    Either library counts (``--builder auto``'s choice builds, the same library runs); running needs a GPU.
    """
    from vitdeploy.engine.library import load_library
    from vitdeploy.errors import VitdeployError
    from vitdeploy.cuda import query_gpu

    try:
        library = load_library("auto", "TensorRT")
    except VitdeployError as exc:
        return str(exc)
    if not library.builds_without_gpu and not _module("polygraphy").ok:  # classic TensorRT builds through Polygraphy
        return "polygraphy is not installed: pip install 'vitdeploy[tensorrt]'"
    try:
        gpu = query_gpu(device)
    except VitdeployError as exc:
        return str(exc)
    return library.gpu_refusal(gpu.name, gpu.compute_capability)
