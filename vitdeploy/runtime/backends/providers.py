"""Which ONNX Runtime execution providers a vitdeploy graph may run on, and with what math.

A graph runs only where it has been verified against the official model, or where the user says
"I know" (``allow_unverified``). Decided from the file's metadata alone, before ONNX Runtime is asked
for anything, so the refusal is the same on a machine without a GPU.

* CPU (``CPUExecutionProvider``): every family, target and precision vitdeploy writes is tested
  against the official model by the test suite.
* CUDA (``CUDAExecutionProvider``), measured on an NVIDIA H100 with onnxruntime-gpu 1.31.1, SAM ViT-B
  at 1024, random weights, against the official model in FP32 on the CPU:
  - 2026-11-23: the ``generic`` and ``tensorrt`` encoder graphs in FP32 (relative L2 7.2e-4 with ONNX
    Runtime's default TF32 math). The ``onnxruntime-cpu`` graph does not match: its contrib
    ``MultiHeadAttention`` in FP32 gave cosine 0.9935, relative L2 0.114. That target is refused on
    every GPU provider.
  - 2026-11-24 (``scripts/gpu-check.sh``, 3 bundled images + 2 random inputs, TF32 off): the ``generic``
    encoder in FP32 (relative L2 1.5e-6), its ``vitdeploy calibrate`` FP16 (cosine 0.999999, relative
    L2 1.4e-3) and INT8 (cosine 0.99724, relative L2 0.074) files, and the mask decoder in FP32
    (relative L2 9.2e-7). ``tests/runtime/backends/test_runtime_cuda.py`` repeats each on tiny models on any GPU.
* TF32: ONNX Runtime's CUDA provider does FP32 GEMMs and convolutions in TF32 by default
  (documented provider option ``use_tf32``, default 1). vitdeploy passes ``use_tf32=0`` unless the
  caller asks for TF32 (``tf32=True``, ``--tf32``): "fp32" means FP32.
* ONNX Runtime's TensorRT provider (``device='tensorrt'``) has no per-session TF32 switch and was not
  verified: it needs ``allow_unverified``. vitdeploy's own TensorRT path is ``build-engine`` + the
  engine runner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vitdeploy.errors import InputError
from vitdeploy.families import FAMILIES
from vitdeploy.precisions import Precision
from vitdeploy.runtime.backends.base import DEVICES
from vitdeploy.runtime.forms.cpu_form import read_cpu_form
from vitdeploy.targets import target_of

PROVIDERS = {
    "cpu": ["CPUExecutionProvider"],
    "cuda": ["CUDAExecutionProvider", "CPUExecutionProvider"],
    "tensorrt": ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"],
}
#: (family, export target, precision) -> what was measured on CUDA (the ``generic`` target is the default when a
#: file records none): each family's own ``verified_on_cuda``.
VERIFIED_ON_CUDA: dict[tuple[str, str, str], str] = {
    (family.name, target, precision): evidence
    for family in FAMILIES.values() for (target, precision), evidence in family.verified_on_cuda
}


@dataclass(frozen=True)
class ProviderPlan:
    """The providers (with options) to hand ONNX Runtime, and one line for reports."""

    device: str
    providers: list[Any]
    tf32: bool | None  # None on the CPU
    verified: str

    def describe(self) -> str:
        math = "" if self.tf32 is None else (", TF32 on (--tf32)" if self.tf32 else ", TF32 off (exact FP32 GEMMs)")
        return f"{self.providers_names()[0]}{math}; {self.verified}"

    def providers_names(self) -> list[str]:
        return [p[0] if isinstance(p, tuple) else p for p in self.providers]


def plan_providers(metadata: dict[str, Any], device: str, *, tf32: bool = False, allow_unverified: bool = False,
                   name: str = "the model") -> ProviderPlan:
    """Providers for a graph with vitdeploy ``metadata`` on ``device``; InputError where it must not run.

    Raises:
        InputError: an unknown device, a CPU-only export target on a GPU provider, or (without
            ``allow_unverified``) a combination never verified on that provider.
    """
    if device not in DEVICES:
        raise InputError(f"unknown device '{device}': use one of {', '.join(DEVICES)}")
    if device == "cpu":
        if tf32:
            raise InputError("--tf32 applies to CUDA (TF32 is an NVIDIA GPU math mode): drop it for --device cpu")
        return ProviderPlan("cpu", list(PROVIDERS["cpu"]), None, "verified by vitdeploy's test suite")
    form = read_cpu_form(metadata, name)
    if form is not None:
        raise InputError(f"{name} is a CPU form written by 'vitdeploy optimize' (ONNX Runtime contrib ops for its CPU "
                         f"provider): run the exported file{f' {form.source!r}' if form.source else ''} on {device}")
    family = str(metadata.get("family", "unknown"))
    spec = target_of(metadata)
    target = spec.name if spec is not None else str(metadata.get("target"))
    precision = Precision.of(metadata)
    if spec is not None and spec.cpu_only:
        raise InputError(f"{name} was exported with --target {target}, which runs on the CPU only: "
                         f"{spec.cpu_only}; export with --target generic or tensorrt for {device}")
    evidence = VERIFIED_ON_CUDA.get((family, target, precision)) if device == "cuda" else None
    if evidence is None and not allow_unverified:
        verified = "; ".join(f"{f} --target {t} {p}" for f, t, p in VERIFIED_ON_CUDA)
        raise InputError(f"{name} ({family}, target {target}, {precision}) has not been verified on ONNX Runtime's "
                         f"{PROVIDERS[device][0]} (verified there: {verified}): run it on the CPU, or pass "
                         "--allow-unverified (allow_unverified=True) and check it with 'vitdeploy validate'")
    options = {"use_tf32": "1" if tf32 else "0"}
    providers: list[Any] = [(p, dict(options)) if p == "CUDAExecutionProvider" else p for p in PROVIDERS[device]]
    return ProviderPlan(device, providers, tf32, evidence or "NOT verified (allowed by the caller)")


__all__ = ["DEVICES", "PROVIDERS", "VERIFIED_ON_CUDA", "ProviderPlan", "plan_providers"]
