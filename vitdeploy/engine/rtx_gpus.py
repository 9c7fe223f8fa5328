"""The GPUs TensorRT for RTX builds for and runs on: its default targets, the compute capabilities it names, and the
one-line refusal for a GPU it runs nothing on. Read by the library type (:mod:`vitdeploy.engine.library`), the engine
checks (:mod:`vitdeploy.engine.compat`) and ``doctor``."""

from __future__ import annotations

#: Compute capabilities a TensorRT-RTX engine targets when none are named (its documented default).
RTX_DEFAULT_TARGETS = ("8.0", "8.6", "8.9", "12.0")
#: Compute capability -> ``trt.ComputeCapability`` member, for the ones TensorRT-RTX 1.7 names.
RTX_COMPUTE_CAPABILITIES = {"7.5": "SM75", "8.0": "SM80", "8.6": "SM86", "8.9": "SM89", "12.0": "SM120", "12.1": "SM121"}


def rtx_runs_on(compute_capability: str) -> bool:
    """Whether TensorRT-RTX runs engines on a GPU of this compute capability: the ones it names, and later than 12.0.

    "And later" is past 12.0, not past 8.0: on an NVIDIA H100 (9.0), TensorRT-RTX 1.7.1.116 refused every engine at
    load (2026-11-27, ``scripts/gpu-lease.sh``): "The engine cannot run on this GPU, which has compute capability 9.0.
    Supported compute capabilities: 8.0 8.6 8.9 12.0 12.1 >12.0. TensorRT-RTX does not support this compute
    capability, so the engine cannot be rebuilt for it." Hopper, datacenter Blackwell and Jetson (8.7) GPUs take
    classic TensorRT instead.
    """
    if compute_capability in RTX_COMPUTE_CAPABILITIES:
        return True
    try:
        major, minor = (int(part) for part in compute_capability.split("."))
    except ValueError:
        return False
    return (major, minor) > (12, 0)


def rtx_unsupported_gpu(gpu_name: str, compute_capability: str) -> str:
    """One line: TensorRT-RTX runs nothing on this GPU, and what to use on it instead."""
    return (f"TensorRT-RTX runs no engine on {gpu_name} (compute capability {compute_capability}): it runs on 8.0, 8.6, "
            "8.9, 12.0 and later (7.5 when built for it), and refused every engine on an H100 (9.0); on this GPU build "
            "with classic TensorRT ('pip install tensorrt', then 'vitdeploy build-engine --builder tensorrt') or run the "
            "ONNX file on ONNX Runtime's CUDA provider ('pip install onnxruntime-gpu', then --device cuda)")
