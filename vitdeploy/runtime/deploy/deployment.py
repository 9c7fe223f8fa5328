"""What a deployment is: how one file runs (runtime, precision policy, runner settings, threads) and why.

A :class:`Deployment` is plain data: :mod:`~vitdeploy.runtime.deploy.auto` decides one per file, a
:mod:`~vitdeploy.runtime.deploy.plan` holds one per file of a model, and :func:`~vitdeploy.runtime.deploy.loader.
open_deployed` turns one into a runner. :meth:`Deployment.from_dict` holds what a profile, a cached decision or a
plan sent to a worker names to what ``vitdeploy tune`` writes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from vitdeploy.cpu_features import CpuFeatures, available_cores, cpu_features
from vitdeploy.errors import InputError
from vitdeploy.precisions import PRECISION_POLICIES
from vitdeploy.runtime.backends.registry import ONNX_RUNTIMES, RUNTIMES
from vitdeploy.runtime_facts import PROFILE_SETTINGS

#: The ``--runtime`` value that asks for :func:`vitdeploy.runtime.deploy.auto.resolve`'s choice.
AUTO = "auto"
#: The order ``auto`` follows, in words: the one telling of it (the ``--runtime`` help and ``doctor`` say it from here;
#: :func:`~vitdeploy.runtime.deploy.auto.resolve` is its code).
AUTO_ORDER = ("the deployment profile 'vitdeploy tune' wrote beside the file; else the first-use probe (the deployments "
              "whose numerics are proven for the file's family and whose units this CPU has, timed here on a part of "
              "the graph in seconds, cached per machine and model; VITDEPLOY_PROBE=0 turns it off); else this CPU's "
              "measured rows; else the file as written on ONNX Runtime ('vitdeploy doctor' says which, per model)")


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




__all__ = ["AUTO", "AUTO_ORDER", "Deployment"]
