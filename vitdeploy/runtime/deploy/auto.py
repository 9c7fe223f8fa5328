"""``--runtime auto``: which runtime, precision policy, runner settings and threads run a file on this machine.

The choice comes from one of three places, in this order:

1. **A deployment profile** next to the model (``encoder.onnx`` -> ``encoder.profile.json``), written by
   ``vitdeploy tune`` (:mod:`vitdeploy.runtime.deploy.profiles` matches it to the file and the machine).
2. **The first-use probe** (:mod:`vitdeploy.runtime.deploy.probe`): the candidates whose numerics are proven for
   the file's family and whose units this CPU has, timed on a part of the real graph here, once per machine and
   model (the decision is cached in the user's cache folder).
3. **This CPU's measured rows** (:data:`~vitdeploy.runtime.deploy.cpu_rows.CPU_DEFAULTS`), where the probe is
   off (``VITDEPLOY_PROBE=0``) or ran nothing; where no row applies, the file runs as written on ONNX Runtime.

``--runtime onnxruntime|openvino`` (or ``SamPredictor(runtime=...)``) bypasses all three: what is asked is
what runs; so does an asked precision policy (``--inference-precision``). The choice is always said
(``Deployment.source``), by the CLI and in ``Runner.notes``; :func:`explain` says it for each family without a file,
for ``vitdeploy doctor``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from vitdeploy.cpu_features import CpuFeatures, available_cores
from vitdeploy.errors import InputError
from vitdeploy.runtime.backends.registry import DEFAULT_RUNTIME, FileNeeds, policy_runtime
from vitdeploy.runtime.deploy.candidates import eligible
from vitdeploy.runtime.deploy.cpu_rows import cpu_default
from vitdeploy.runtime.deploy.decisions import cached_decisions
from vitdeploy.runtime.deploy.deployment import Deployment
from vitdeploy.runtime.deploy.probe import PROBE_ENV, decide, probe_enabled
from vitdeploy.runtime.deploy.profiles import profile_path, profile_problems, read_profile


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


def explain(features: CpuFeatures, families: Any = None) -> tuple[str, list[str]]:
    """What :func:`resolve` decides here for a file without a profile, said without a file (``vitdeploy doctor``):
    one line for FP32 SAM and ViT encoders (the families with measured rows), and one per family of ``families``
    (default: every family) with where its choice comes from: a decision the probe cached for this machine, the probe
    on first use (its candidates, and what is left out and why), or, with the probe off, the measured rows."""
    from vitdeploy.families import FAMILIES

    families = list(FAMILIES.values()) if families is None else list(families)
    measured = [family for family in families if family.cpu_default_rows]  # SAM encoders, ViTs
    chosen_for = {family.title: cpu_default(family.name, "fp32", features) for family in measured}
    if len(set(chosen_for.values())) == 1:
        one = next(iter(chosen_for.values()))
        chosen = f"FP32 {' and '.join(chosen_for)} on {one.label()}, from {one.source}"
    else:
        chosen = "; ".join(f"FP32 {title} on {d.label()}, from {d.source}" for title, d in chosen_for.items())
    if probe_enabled():
        summary = ("measured here on first use of each model (the probe: the candidates below, timed on a part of the "
                   f"graph, cached per machine); with the probe off: {chosen}; 'vitdeploy tune MODEL' gates full "
                   "candidates")
    else:
        summary = (f"{chosen}; decoders and FP16/INT8 files as written on onnxruntime; 'vitdeploy tune MODEL' measures "
                   "this machine's own")
    cached: dict[str, dict[str, Any]] = {}
    for found in cached_decisions(features):  # newest first: the first one per family and precision is said
        meta = found["metadata"]
        cached.setdefault(f"{meta.get('family')} {meta.get('precision', 'fp32')}", found)
    lines = []
    for family in families:
        kind = f"{family.name} fp32"
        if not probe_enabled():
            row = cpu_default(family.name, "fp32", features)
            lines.append(f"{kind}: {row.label()}, from {row.source} ({PROBE_ENV}=0: the probe is off)")
        elif kind in cached:
            found = cached[kind]
            variant = found["metadata"].get("variant")
            lines.append(f"{kind}: {found['chosen']}{f' for {variant}' if variant else ''}, probed {found['created']} in "
                         f"{found['seconds']} s on {found['part']} (cached {found['path']})")
        else:
            choice = eligible({"family": family.name, "precision": "fp32"}, features)
            left = f"; left out: {'; '.join(choice.left_out)}" if choice.left_out else ""
            lines.append(f"{kind}: probe on first use among {', '.join(d.label() for d in choice.candidates) or 'none'}"
                         f"{left}")
    return summary, lines


__all__ = ["explain", "resolve"]
