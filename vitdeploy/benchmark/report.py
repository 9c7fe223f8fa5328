"""The benchmark report: settings, environment (device, threads, precision, versions), rows; table and JSON."""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from vitdeploy.benchmark.contenders import Contender
from vitdeploy.benchmark.harness import BenchmarkRow

TIMING = "host-to-host wall clock: inputs copied in, outputs copied back, every run synchronized with the device"


def environment(threads: int | None, contenders: Sequence[Contender]) -> dict[str, Any]:
    """Machine, thread count, devices used and the versions of every tool that ran."""
    from vitdeploy.metadata import tool_versions

    versions = tool_versions()
    for contender in contenders:  # the library that ran each (classic TensorRT or TensorRT-RTX, OpenVINO, ...)
        versions.setdefault(contender.runner.backend, contender.runner.version)
    if any(c.backend == "tensorrt" for c in contenders):
        from vitdeploy.cuda import cuda_python_version

        versions["cuda-python"] = str(cuda_python_version())
    from vitdeploy.cpu_features import cpu_features

    providers, plans, int8 = {}, {}, {}
    for c in contenders:
        session = getattr(c.runner, "session", None)
        if session is not None:
            providers[c.label] = session.get_providers()
        if c.backend in ("onnxruntime", "openvino"):
            plans[c.label] = c.runner.provider
        if getattr(c.runner, "int8_kernels", None):
            int8[c.label] = c.runner.int8_kernels
    return {
        "machine": platform.machine(),
        "cpu": cpu_features().to_dict(),
        "int8_kernels": int8,
        "cpu_count": os.cpu_count(),
        "threads": threads,
        "devices": sorted({c.device for c in contenders}),
        "onnxruntime_providers": providers,
        "onnxruntime_provider_plans": plans,
        "versions": versions,
    }


@dataclass
class BenchmarkReport:
    rows: list[BenchmarkRow]
    settings: dict[str, Any]
    environment: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"settings": self.settings, "environment": self.environment, "rows": [r.to_dict() for r in self.rows]}

    def table(self) -> str:
        """A fixed-width table: one line per contender and batch, skipped ones with their reason."""
        baseline = {r.batch: r.label for r in reversed(self.rows) if r.latency is not None}
        width = max([len("contender")] + [len(r.label) for r in self.rows])
        head = f"{'contender':<{width}}  batch  median ms    p90 ms    p99 ms     items/s  speed-up"
        lines = [head, "-" * len(head)]
        for r in self.rows:
            if r.latency is None:
                lines.append(f"{r.label:<{width}}  {r.batch:>5}  skipped: {r.skipped}")
                continue
            lat = r.latency
            speed = f"{r.speedup:8.2f}x" if r.speedup is not None else ""
            lines.append(f"{r.label:<{width}}  {r.batch:>5}  {lat.median_ms:9.2f} {lat.p90_ms:9.2f} {lat.p99_ms:9.2f} "
                         f"{r.throughput:11.1f}  {speed}")
        if baseline:
            lines.append(f"speed-up: median latency of the first timed contender at that batch / this one's "
                         f"({', '.join(f'batch {b}: {label}' for b, label in sorted(baseline.items()))})")
        return "\n".join(lines)
