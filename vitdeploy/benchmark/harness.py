"""Warm-up, N timed runs per contender and batch size; median/p90/p99 latency, throughput, speed-up.

Timing itself is :func:`vitdeploy.validation.latency.measure_latency` (the same code ``validate``
uses); a GPU contender passes its synchronization so every timed run ends with the device idle.
Every contender gets the same inputs for a batch size (seeded standard-normal arrays: the scale of
normalized images), and the contenders run one after another in one process, so the speed-ups are
ratios measured side by side.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vitdeploy.echo import Echo, quiet
from vitdeploy.benchmark.contenders import Contender
from vitdeploy.errors import InputError
from vitdeploy.validation.latency import LatencyStats, measure_latency


@dataclass
class BenchmarkRow:
    """One contender at one batch size: its latency, or why it was skipped."""

    label: str
    backend: str
    precision: str
    device: str
    batch: int
    latency: LatencyStats | None = None
    skipped: str | None = None
    speedup: float | None = None  # baseline median / this median, same batch

    @property
    def throughput(self) -> float | None:
        """Items (images) per second at the median latency."""
        if self.latency is None or self.latency.median_ms <= 0:
            return None
        return self.batch * 1000.0 / self.latency.median_ms

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label, "backend": self.backend, "precision": self.precision, "device": self.device,
            "batch": self.batch, "latency": self.latency.to_dict() if self.latency else None,
            "throughput_per_s": self.throughput, "speedup_vs_baseline": self.speedup, "skipped": self.skipped,
        }


def make_feeds(template: dict[str, list[int | str]], batch: int, seed: int = 0,
               metadata: dict[str, Any] | None = None) -> dict[str, np.ndarray]:
    """Seeded standard-normal float32 inputs with the batch axis (``"batch"`` or axis 0) set to ``batch``; for a
    family whose inputs are not plain tensors (``metadata``: the SAM decoder's prompts), its own
    (:meth:`vitdeploy.families.ModelFamily.template_feeds`)."""
    from vitdeploy.families import recorded_family

    family = recorded_family(metadata or {})
    special = family.template_feeds(metadata or {}, template, seed) if family else None
    if special is not None:
        return special
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, dims in template.items():
        shape = [batch, *dims[1:]]
        if any(not isinstance(d, int) for d in shape):
            raise InputError(f"input '{name}' has a symbolic axis besides the batch ({dims}): cannot make benchmark inputs")
        feeds[name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def run_benchmark(
    contenders: Sequence[Contender],
    template: dict[str, list[int | str]],
    batches: Sequence[int],
    *,
    runs: int = 20,
    warmup: int = 3,
    seed: int = 0,
    echo: Echo = quiet,
    metadata: dict[str, Any] | None = None,
) -> list[BenchmarkRow]:
    """Time every contender at every batch size; the first contender timed at a batch is the speed-up baseline."""
    if runs < 1:
        raise InputError("--runs must be at least 1")
    if not contenders:
        raise InputError("nothing to benchmark: give a model file, or keep the eager baseline")
    rows: list[BenchmarkRow] = []
    for batch in batches:
        feeds = make_feeds(template, batch, seed + batch, metadata)
        batch_rows = []
        for c in contenders:
            row = BenchmarkRow(c.label, c.backend, c.precision, c.device, batch)
            row.skipped = c.skip_reason(batch)
            if row.skipped is None:
                echo(f"timing {c.label}, batch {batch}: {warmup} warm-up + {runs} runs")
                row.latency = measure_latency(lambda r=c.runner: r.run(feeds), f"{c.label} b{batch}", runs, warmup,
                                              synchronize=c.synchronize)
            batch_rows.append(row)
        timed = [r for r in batch_rows if r.latency is not None]
        if timed:
            base = timed[0].latency.median_ms  # type: ignore[union-attr]
            for r in timed:
                r.speedup = base / r.latency.median_ms if r.latency.median_ms > 0 else None  # type: ignore[union-attr]
        rows += batch_rows
    return rows
