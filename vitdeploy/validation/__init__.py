"""Stage 7: parity (numbers) and latency (time) of every stage against the eager model."""

from vitdeploy.validation.latency import LatencyStats, measure_latency
from vitdeploy.parity import TOLERANCES, ParityResult, Tolerance, compare, raise_on_failures

__all__ = ["TOLERANCES", "LatencyStats", "ParityResult", "Tolerance", "compare", "measure_latency", "raise_on_failures"]
