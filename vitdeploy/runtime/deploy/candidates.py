"""Which deployments of a file are candidates on this machine: a question of numerics and units, answered without
timing anything. One list serves the first-use probe (:func:`eligible`) and ``vitdeploy tune`` (the same walk with
its grid on top: :class:`Grid`).

Every CPU runtime installed here that runs the file (the registry's ``cpu_gap``), the file's own math on each,
ONNX Runtime's attention forms where the file's target folds attention, and a reduced precision policy only where
this CPU has the units for it (BF16: AMX or AVX512-BF16) and, for the probe, where its parity budget is proven for
the file's family (``proven_policies`` in ``vitdeploy/data/runtime_facts.json``, each with the measurement that
proves it). What is left out is said, with why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vitdeploy.cpu_features import CpuFeatures, available_cores, cpu_features
from vitdeploy.precisions import Precision
from vitdeploy.runtime.backends.registry import DEFAULT_RUNTIME, ONNX_RUNTIMES, RUNTIMES, FileNeeds
from vitdeploy.runtime.deploy.deployment import Deployment
from vitdeploy.runtime_facts import PROVEN_POLICIES


#: A runner-setting form: ``(key, value)`` pairs (``(("fused_attention", False),)``; ``()`` the file as written).
Form = tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class Eligible:
    """The candidates for a file on this CPU, and what was left out, each with why."""

    candidates: tuple[Deployment, ...]
    left_out: tuple[str, ...] = ()


@dataclass(frozen=True)
class Grid:
    """What ``vitdeploy tune`` adds on top of the probe's candidates: the runtimes it was asked for (empty: every
    installed one), more runner-setting forms (OpenVINO's GELU form), each candidate at every thread count of
    ``threads``, and a reduced policy wherever the CPU has its units (tune judges it in full, where the probe offers
    only what is proven for the family). Its candidates keep the walk's order (runtime, form, policy, threads)."""

    runtimes: tuple[str, ...] = ()
    forms: tuple[Form, ...] = ()
    threads: tuple[int, ...] = ()
    source: str = "tune"


def eligible(metadata: dict[str, Any], features: CpuFeatures | None = None, installed: frozenset[str] | None = None,
             threads: int | None = None, grid: Grid | None = None) -> Eligible:
    """The deployments to try for a file with ``metadata`` (module docstring). Without a ``grid`` (the probe's): at
    ``threads`` (default every core), proven policies only, most likely fastest first (a reduced policy, then
    OpenVINO, then ONNX Runtime: the order only makes the warm-up cutoff bite sooner). With one: tune's (:class:`Grid`)."""
    features = features or cpu_features()
    if installed is None:
        installed = frozenset(name for name in ONNX_RUNTIMES if RUNTIMES[name].installed())
    counts = (grid.threads if grid is not None and grid.threads else None) or (threads or available_cores(),)
    source = grid.source if grid is not None else "probe"
    needs = FileNeeds.of(metadata)
    family = metadata.get("family")
    forms = attention_forms(metadata) + list(grid.forms if grid is not None else ())
    found, left_out = [], []
    for name in (grid.runtimes if grid is not None and grid.runtimes else ONNX_RUNTIMES):
        entry = RUNTIMES[name]
        gap = entry.cpu_gap(needs)
        if name not in installed:
            left_out.append(f"{name}: not installed ({entry.install})")
            continue
        if gap:
            left_out.append(f"{name}: the file {gap}")
            continue
        kinds = [("file", form) for form in forms if all(key in entry.settings for key, _ in form)]
        for policy in entry.policies:
            if policy == "file":
                continue
            why = policy_gap(policy, family, needs, features, proven_only=grid is None)
            if why:
                left_out.append(f"{name} {policy}: {why}")
            else:
                kinds.append((policy, ()))
        found += [Deployment(name, precision, n, form, source=source) for precision, form in kinds for n in counts]
    if grid is None:
        found.sort(key=lambda d: (d.precision == "file", d.runtime == DEFAULT_RUNTIME))
    return Eligible(tuple(found), tuple(left_out))


def attention_forms(metadata: dict[str, Any]) -> list[Form]:
    """The runner settings of each attention form a file may run in: as written, and, where its target folds
    attention, ONNX Runtime's unfused and folded forms (a runtime takes the forms whose settings it has)."""
    from vitdeploy.targets import target_of

    target = target_of(metadata)
    forms: list[Form] = [()]
    if target is not None and target.folded_attention:
        forms += [(("fused_attention", False),), (("folded_attention", True),)]
    return forms


def policy_gap(policy: str, family: str | None, needs: FileNeeds, features: CpuFeatures,
               proven_only: bool = True) -> str | None:
    """Why ``policy`` is not a candidate for a file of ``family`` on this CPU (None: it is): the file's precision,
    then the CPU's units, then (``proven_only``) the family's proof."""
    if needs.precision is not Precision.FP32:
        return f"the file is {needs.precision}, and a policy reduces FP32 files only"
    proof = PROVEN_POLICIES[policy]
    units = features.policy_units(policy)
    if not units:
        return f"this CPU has no {policy.upper()} units ({' or '.join(proof['units'])})"
    if proven_only and family not in proof["families"]:
        proven = ", ".join(proof["families"]) or "no family yet"
        return f"this CPU has {' and '.join(units)}, but its parity budget is proven for {proven}, " \
               f"not for {family or 'a file without a family'}"
    return None


__all__ = ["Eligible", "Form", "Grid", "attention_forms", "eligible", "policy_gap"]
