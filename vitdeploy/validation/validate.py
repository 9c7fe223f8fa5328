"""``validate``: the same inputs through the eager official model and a deployed model; parity + latency."""

from __future__ import annotations

import platform
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vitdeploy.runtime.processing.input_sets import InputSet
from vitdeploy.runtime.backends.base import Runner
from vitdeploy.validation.latency import LatencyStats, measure_latency
from vitdeploy.parity import ParityResult, Tolerance, compare
from vitdeploy.validation.official_practice import Beside, PracticeReport, judge


@dataclass
class ValidationReport:
    model: str
    tolerance: Tolerance
    parity: list[ParityResult]
    latency: list[LatencyStats] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)
    inputs: list[dict[str, Any]] = field(default_factory=list)
    practice: PracticeReport | None = None  # judged against the official's own reduced precision, measured beside it

    def __bool__(self) -> bool:
        return all(self.parity)

    @property
    def latency_ratio(self) -> float | None:
        """Candidate median / eager median (below 1: the deployed model is faster)."""
        if len(self.latency) < 2:
            return None
        return self.latency[1].median_ms / self.latency[0].median_ms

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "passed": bool(self),
            "tolerance": self.tolerance.__dict__,
            "parity": [p.to_dict() for p in self.parity],
            "latency": [lat.to_dict() for lat in self.latency],
            "latency_ratio_candidate_over_eager": self.latency_ratio,
            "environment": self.environment,
            "inputs": self.inputs,
            "official_practice": self.practice.to_dict() if self.practice is not None else None,
        }


def validate_runner(
    reference: Runner,
    candidate: Runner,
    input_sets: list[InputSet],
    tolerance: Tolerance,
    *,
    latency_runs: int = 5,
    latency_warmup: int = 1,
    threads: int | None = None,
    echo: Callable[[str], None] | None = None,
    beside: Beside | None = None,
) -> ValidationReport:
    """Run every input set through both runners, compare every output, then time both (same inputs).

    ``beside``: the official model under its published autocast: it runs the same inputs too, the candidate is
    judged against it instead (:mod:`vitdeploy.validation.official_practice`: per output, pooled over the inputs),
    and it is timed third."""
    from vitdeploy.metadata import tool_versions

    parity = []
    kept: tuple[list, list, list] = ([], [], [])
    for inputs in input_sets:
        ref_out = reference.run(inputs.feeds)
        cand_out = candidate.run(inputs.feeds)
        named = {name: ref_out[name if name in ref_out else reference.output_names[i]]
                 for i, name in enumerate(candidate.output_names)}
        if beside is not None:
            official = beside.runner.run(inputs.feeds)
            kept[0].append(named)
            kept[1].append({name: official[name if name in official else beside.runner.output_names[i]]
                            for i, name in enumerate(candidate.output_names)})
            kept[2].append(cand_out)
            continue
        for name in candidate.output_names:
            result = compare(named[name], cand_out[name], tolerance, label=f"{inputs.label}/{name}")
            parity.append(result)
            if echo:
                echo("  " + result.summary())
    practice = None
    if beside is not None and input_sets:
        practice = judge(beside.family, beside.policy, beside.practice, list(candidate.output_names), *kept)
        parity = [row.deployed for row in practice.rows]
        if echo:
            for row in practice.rows:
                echo("  " + row.line())
            echo("  " + practice.summary())
    latency = []
    if latency_runs > 0 and input_sets:
        feeds = input_sets[0].feeds
        for runner in (reference, candidate) + ((beside.runner,) if beside is not None else ()):
            if echo:
                echo(f"  timing {runner.name}: {latency_warmup} warm-up + {latency_runs} runs")
            latency.append(measure_latency(lambda r=runner: r.run(feeds), runner.name, latency_runs, latency_warmup))
    from vitdeploy.cpu_features import cpu_features

    env = {"machine": platform.machine(), "cpu": cpu_features().to_dict(), "threads": threads, "versions": tool_versions(),
           "int8_kernels": getattr(candidate, "int8_kernels", None), "provider": getattr(candidate, "provider", None)}
    return ValidationReport(
        model=getattr(candidate, "path", candidate.name).__str__(),
        tolerance=tolerance,
        parity=parity,
        latency=latency,
        environment=env,
        inputs=[{"label": s.label, "source": s.source, "shapes": {k: list(v.shape) for k, v in s.feeds.items()}} for s in input_sets],
        practice=practice,
    )
