"""Honest timing: warm-up, many timed runs, median and tail percentiles."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class LatencyStats:
    """Latency of one contender in milliseconds."""

    label: str
    runs: int
    warmup: int
    median_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    min_ms: float

    def to_dict(self) -> dict:
        return asdict(self)


def stats_from_samples(label: str, samples_ms: list[float], warmup: int) -> LatencyStats:
    arr = np.asarray(samples_ms, dtype=np.float64)
    return LatencyStats(
        label=label,
        runs=len(arr),
        warmup=warmup,
        median_ms=float(np.median(arr)),
        p90_ms=float(np.percentile(arr, 90)),
        p99_ms=float(np.percentile(arr, 99)),
        mean_ms=float(arr.mean()),
        min_ms=float(arr.min()),
    )


def measure_latency(
    fn: Callable[[], object],
    label: str,
    runs: int = 10,
    warmup: int = 2,
    synchronize: Callable[[], None] | None = None,
) -> LatencyStats:
    """Time ``fn()`` ``runs`` times after ``warmup`` untimed calls.

    ``synchronize`` is called before starting and after finishing each timed run; GPU runners pass a
    stream/device synchronisation so the time covers the work, not just its launch.
    """
    from vitdeploy.runtime.deploy.timing import timed_runs

    if runs < 1:
        raise ValueError("runs must be >= 1")
    for _ in range(warmup):
        fn()
    return stats_from_samples(label, timed_runs(fn, runs, synchronize=synchronize), warmup)
