"""Deployment profiles: ``encoder.onnx`` -> ``encoder.profile.json``, written by ``vitdeploy tune``, read by ``auto``.

A profile is used only where it was measured: the same model file (SHA-256), the same CPU (model name, family/model,
the flags that pick kernels), the same core count and the same version of the chosen runtime; anything else is
refused in one line that says to run ``vitdeploy tune`` again (:func:`profile_problems`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vitdeploy.cpu_features import CpuFeatures
from vitdeploy.errors import InputError
from vitdeploy.runtime.backends.registry import RUNTIMES
from vitdeploy.runtime.deploy.identity import machine_fingerprint, model_digest, runtime_versions

#: The profile file's format tag (a reader refuses any other).
PROFILE_FORMAT = "vitdeploy-deployment-profile/1"
#: ``encoder.onnx`` -> ``encoder.profile.json``.
PROFILE_SUFFIX = ".profile.json"


def profile_path(model: str | Path) -> Path:
    """Where ``model``'s deployment profile lives: beside it, ``<stem>.profile.json``."""
    model = Path(model)
    return model.with_name(model.stem + PROFILE_SUFFIX)



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


__all__ = ["PROFILE_FORMAT", "PROFILE_SUFFIX", "profile_path", "profile_problems", "read_profile"]
