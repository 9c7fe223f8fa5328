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


@dataclass
class ValidationReport:
    model: str
    tolerance: Tolerance
    parity: list[ParityResult]
    latency: list[LatencyStats] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)
    inputs: list[dict[str, Any]] = field(default_factory=list)

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
) -> ValidationReport:
    """Run every input set through both runners, compare every output, then time both (same inputs)."""
    from vitdeploy.metadata import tool_versions

    parity = []
    for inputs in input_sets:
        ref_out = reference.run(inputs.feeds)
        cand_out = candidate.run(inputs.feeds)
        for name in candidate.output_names:
            ref_name = name if name in ref_out else reference.output_names[candidate.output_names.index(name)]
            result = compare(ref_out[ref_name], cand_out[name], tolerance, label=f"{inputs.label}/{name}")
            parity.append(result)
            if echo:
                echo("  " + result.summary())
    latency = []
    if latency_runs > 0 and input_sets:
        feeds = input_sets[0].feeds
        for runner in (reference, candidate):
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
    )
