"""Can this engine run here? The sidecar's TensorRT version and GPU against the running ones.

TensorRT's own check happens inside ``deserialize_cuda_engine`` and surfaces as a logged error and a
``None`` engine (or, across GPUs of one compute capability, only a warning and possibly wrong
performance). Checking the sidecar first turns that into a message that says what was built where
and what to do. The rules follow the TensorRT documentation ("Engine Compatibility" and the support
matrix's "Engine Portability"):

- By default an engine runs only with the TensorRT release that built it.
- A version-compatible engine (``BuilderFlag.VERSION_COMPATIBLE``) runs with the same or a later
  release of the same major version, and across exactly two major boundaries: 8 -> 10 and 10 -> 11.
  Never with an older runtime.
- Hardware compatibility ``none``: same compute capability (TensorRT also advises the same GPU model;
  another model of the same compute capability is reported as a warning). ``ampere_plus``: any GPU of
  compute capability 8.0 or newer. ``same_compute_capability``: any GPU of that compute capability.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vitdeploy.engine.versions import parse_version, release
from vitdeploy.errors import EngineError

#: (built major, running major) pairs that TensorRT supports for version-compatible engines.
CROSS_MAJOR_VERSION_COMPAT = frozenset({(8, 10), (10, 11)})
HARDWARE_LEVELS = ("none", "ampere_plus", "same_compute_capability")


@dataclass(frozen=True)
class RunningEnvironment:
    """What is here: the TensorRT version and the GPU an engine is about to run on."""

    tensorrt_version: str
    gpu_name: str
    compute_capability: str  # "8.9"


def version_can_run(built: str, running: str, version_compatible: bool) -> bool:
    """Whether TensorRT ``running`` can deserialize a plan built by TensorRT ``built``."""
    b, r = release(built), release(running)
    if not b or not r:
        return False
    if not version_compatible:
        return b == r
    if r < b:
        return False
    return b[0] == r[0] or (b[0], r[0]) in CROSS_MAJOR_VERSION_COMPAT


def _cc(text: str) -> tuple[int, ...]:
    return parse_version(text)[:2]


def check_engine_compat(sidecar: dict[str, Any], env: RunningEnvironment, plan_name: str = "engine") -> list[str]:
    """Raise EngineError when the engine cannot run in ``env``; return warnings for what may still run.

    Args:
        sidecar: the engine's sidecar (see :mod:`vitdeploy.engine.sidecar`).
        env: the running TensorRT version and GPU.
        plan_name: the plan's file name, for messages.
    """
    built_trt = str(sidecar.get("tensorrt", {}).get("version", ""))
    options = sidecar.get("build_options", {})
    version_compatible = bool(options.get("version_compatible", False))
    rebuild = f"rebuild it here with 'vitdeploy build-engine' from '{sidecar.get('onnx', {}).get('file', 'its ONNX file')}'"
    if not version_can_run(built_trt, env.tensorrt_version, version_compatible):
        if version_compatible:
            rule = "a version-compatible engine runs only with the same or a newer TensorRT of a supported major version"
        else:
            rule = "an engine runs only with the TensorRT release that built it (build with --version-compatible to relax this)"
        raise EngineError(
            f"'{plan_name}' was built with TensorRT {built_trt or 'unknown'} and this is TensorRT {env.tensorrt_version}: "
            f"{rule}; {rebuild}"
        )
    gpu = sidecar.get("gpu", {})
    built_name = str(gpu.get("name", "unknown GPU"))
    built_cc = str(gpu.get("compute_capability", ""))
    level = str(options.get("hardware_compatibility", "none"))
    here = f"this GPU is {env.gpu_name} (compute capability {env.compute_capability})"
    built = f"'{plan_name}' was built on {built_name} (compute capability {built_cc or 'unknown'})"
    if level not in HARDWARE_LEVELS:
        raise EngineError(f"'{plan_name}' has an unknown hardware compatibility level '{level}' in its sidecar; {rebuild}")
    if level == "ampere_plus":
        if _cc(env.compute_capability) < (8, 0):
            raise EngineError(f"{built} for Ampere and newer GPUs, but {here}: {rebuild}")
        return []
    if _cc(built_cc) != _cc(env.compute_capability) or not _cc(built_cc):
        hint = "" if level == "same_compute_capability" else " (or build with --hardware-compatibility ampere_plus)"
        raise EngineError(f"{built} and {here}: TensorRT engines do not move between GPU architectures; {rebuild}{hint}")
    if level == "none" and built_name != env.gpu_name:
        return [
            f"{built} and {here}: TensorRT advises against moving engines between GPU models "
            "(it may run slower or fail); rebuild on this GPU for best results"
        ]
    return []


def check_rtx_engine_compat(sidecar: dict[str, Any], env: RunningEnvironment, plan_name: str = "engine") -> list[str]:
    """The same judgement for a TensorRT-RTX engine: same release, and a GPU among the compute capabilities it targets.

    TensorRT-RTX engines are built for a set of compute capabilities (``gpu.targets`` in the sidecar;
    default 8.0, 8.6, 8.9, 12.0 "and later"), not for the GPU they were built on. "And later" means past
    12.0: a GPU TensorRT-RTX runs nothing on (9.0 to 11.x, 8.7; :func:`rtx_runs_on`) is refused before the plan is
    read, naming what runs there instead; a GPU below 8.0 that the build did not name is refused too.
    """
    from vitdeploy.engine.rtx_gpus import RTX_DEFAULT_TARGETS, rtx_runs_on, rtx_unsupported_gpu

    built = str(sidecar.get("tensorrt", {}).get("version", ""))
    rebuild = f"rebuild it with 'vitdeploy build-engine --builder tensorrt-rtx' from '{sidecar.get('onnx', {}).get('file', 'its ONNX file')}'"
    if not version_can_run(built, env.tensorrt_version, False):
        raise EngineError(f"'{plan_name}' was built with TensorRT-RTX {built or 'unknown'} and this is TensorRT-RTX "
                          f"{env.tensorrt_version}: an engine runs only with the release that built it; {rebuild}")
    if not rtx_runs_on(env.compute_capability):
        raise EngineError(f"'{plan_name}' is a TensorRT-RTX engine and {rtx_unsupported_gpu(env.gpu_name, env.compute_capability)}")
    targets = [str(t) for t in (sidecar.get("gpu") or {}).get("targets") or RTX_DEFAULT_TARGETS]
    here = _cc(env.compute_capability)
    if any(_cc(t) == here for t in targets):
        return []
    listed = ", ".join(targets)
    default = sorted(targets, key=_cc) == sorted(RTX_DEFAULT_TARGETS, key=_cc)
    if default and here > (12, 0):  # "and later"
        return []
    raise EngineError(f"'{plan_name}' was built for compute capability {listed} and this GPU is {env.gpu_name} "
                      f"(compute capability {env.compute_capability}): {rebuild} --compute-capability {env.compute_capability}")
