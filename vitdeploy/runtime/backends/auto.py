"""``--runtime auto``: which runtime, precision policy, runner settings and threads run a file on this machine.

The choice comes from one of three places, in this order:

1. **A deployment profile** next to the model (``encoder.onnx`` -> ``encoder.profile.json``), written by
   ``vitdeploy tune`` (:mod:`vitdeploy.runtime.backends.deployment` matches it to the file and the machine).
2. **The first-use probe** (:mod:`vitdeploy.runtime.backends.probe`): the candidates whose numerics are proven for
   the file's family and whose units this CPU has, timed on a part of the real graph here, once per machine and
   model (the decision is cached in the user's cache folder).
3. **This CPU's measured rows** (:data:`~vitdeploy.runtime.backends.deployment.CPU_DEFAULTS`), where the probe is
   off (``VITDEPLOY_PROBE=0``) or ran nothing; where no row applies, the file runs as written on ONNX Runtime.

``--runtime onnxruntime|openvino`` (or ``SamPredictor(runtime=...)``) bypasses all three: what is asked is
what runs; so does an asked precision policy (``--inference-precision``). The choice is always said
(``Deployment.source``), by the CLI and in ``Runner.notes``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from vitdeploy.cpu_features import available_cores
from vitdeploy.errors import InputError
from vitdeploy.runtime.backends.deployment import (Deployment, cpu_default, profile_path, profile_problems,
                                                   read_profile)
from vitdeploy.runtime.backends.probe import decide, probe_enabled
from vitdeploy.runtime.backends.registry import DEFAULT_RUNTIME, FileNeeds, policy_runtime


def resolve(model: str | Path, *, precision: str | None = None, threads: int | None = None, device: str = "cpu",
            profile: str | Path | None = None) -> Deployment:
    """The deployment ``--runtime auto`` opens ``model`` with (module docstring). ``precision`` (a policy) narrows
    the choice to deployments with that policy; ``threads`` overrides the profile's. ``profile``: an explicit
    profile (refused with an error when it does not fit); by default the one beside the model, which is ignored
    with its reason in ``source`` when it does not fit. Files not on the CPU, and engines, are not chosen for."""
    from vitdeploy.metadata import read_onnx_metadata

    model = Path(model)
    if device != "cpu" or model.suffix.lower() != ".onnx":
        return Deployment(DEFAULT_RUNTIME, precision or "file", threads,
                          source=f"--device {device}: the file as written (auto chooses among CPU runtimes only)")
    explicit = profile is not None
    found = Path(profile) if explicit else profile_path(model)
    refused = ""
    if found.is_file():
        data = read_profile(found)
        problems = profile_problems(data, model)
        if problems and explicit:
            raise InputError(f"the deployment profile '{found}' does not fit: {'; '.join(problems)}: run "
                             f"'vitdeploy tune {model}' on this machine")
        if problems:
            refused = f"; {found.name} ignored: {problems[0]}"
        else:  # the choice, or (a precision asked for) the fastest candidate that passed at that precision
            offered = [data["chosen"]] + [c.get("deployment") for c in data.get("candidates", []) if c.get("passed")]
            fitting = [d for d in offered if precision is None or (isinstance(d, dict) and d.get("precision") == precision)]
            if fitting:
                best = Deployment.from_dict(fitting[0], f"'{found}'")
                how = "" if fitting[0] is data["chosen"] else f" (fastest passing {precision})"
                return replace(best, threads=threads or best.threads or available_cores(), source=f"profile {found.name}{how}")
            refused = f"; {found.name} has no passing {precision} candidate"
    elif explicit:
        raise InputError(f"no deployment profile at '{found}': write one with 'vitdeploy tune {model}'")
    try:
        meta = read_onnx_metadata(model)
        needs = FileNeeds.of(meta)
    except InputError:  # a damaged file: the runner that opens it next says so in its own words
        meta, needs = {}, FileNeeds()
    if precision is None and meta.get("family"):
        if probe_enabled():
            try:
                chosen = decide(model, meta, threads)
                return replace(chosen, threads=threads or chosen.threads,
                               source=chosen.source + refused)
            except InputError as exc:  # no candidate ran: the measured rows below, and why
                refused += f"; the probe ran nothing ({str(exc)[:200]})"
        else:
            refused += "; probe off (VITDEPLOY_PROBE=0)"
    chosen = cpu_default(meta.get("family"), needs.precision, custom_ops=needs.custom_ops)
    if precision is not None and chosen.precision != precision:
        chosen = Deployment(DEFAULT_RUNTIME if precision == "file" else policy_runtime(precision), precision,
                            source=f"asked (--inference-precision {precision})")
    return replace(chosen, threads=threads or available_cores(), source=chosen.source + refused)


__all__ = ["resolve"]
