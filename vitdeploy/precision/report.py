"""What a precision pass did: the metadata the converted file carries and the report for people and JSON."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx

from vitdeploy.metadata import PREFIX, encode, metadata_of
from vitdeploy.precisions import Precision
from vitdeploy.parity import ParityResult


def precision_metadata(
    source: dict[str, Any],
    *,
    precision: str,
    method: str,
    image_count: int,
    kept: dict[str, str],
    tool: str,
    calibration_source: str,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The source file's metadata extended with what the pass did (keys are added, never renamed)."""
    meta = dict(source)
    meta.update({
        "precision": precision,
        "calibration_method": method,
        "calibration_images": image_count,
        "calibration_source": calibration_source,
        "higher_precision_nodes": sorted(kept),
        "precision_tool": tool,
        "source_precision": Precision.of(source).value,
    })
    meta.update(extra or {})
    return meta


def stamp_metadata(model: onnx.ModelProto, meta: dict[str, Any]) -> None:
    """Replace ``model``'s vitdeploy metadata with ``meta`` (other keys are kept), in place."""
    others = [p for p in model.metadata_props if not p.key.startswith(PREFIX)]
    del model.metadata_props[:]
    model.metadata_props.extend(others)
    for key, value in encode(meta).items():
        model.metadata_props.append(onnx.StringStringEntryProto(key=key, value=value))


def read_metadata(model: onnx.ModelProto) -> dict[str, Any]:
    return metadata_of(model)


@dataclass
class PrecisionReport:
    """Everything ``vitdeploy calibrate`` measured, printable and JSON-serialisable."""

    model: str
    output: str
    precision: str
    method: str
    tool: str
    calibration: dict[str, Any]
    kept: dict[str, str]
    node_count: int
    parity_fp32: list[ParityResult]
    parity_eager: list[ParityResult] = field(default_factory=list)
    eager_note: str | None = None
    sensitivity: list[dict[str, Any]] = field(default_factory=list)
    budget: dict[str, Any] | None = None
    timings_s: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def kept_lines(self, limit: int = 40) -> list[str]:
        """``node: reason`` lines, grouped by reason (most common first)."""
        groups: dict[str, list[str]] = {}
        for name, reason in self.kept.items():
            groups.setdefault(reason.split(":")[0] if reason.startswith("accuracy budget") else reason, []).append(name)
        lines = []
        for reason, names in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            shown = ", ".join(names[:6]) + (f", ... (+{len(names) - 6})" if len(names) > 6 else "")
            lines.append(f"{len(names):4d} x {reason}: {shown}")
        return lines[:limit]

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "output": self.output, "precision": self.precision, "method": self.method,
            "tool": self.tool, "calibration": self.calibration, "node_count": self.node_count,
            "higher_precision_nodes": dict(sorted(self.kept.items())),
            "parity_vs_fp32_onnx": [p.to_dict() for p in self.parity_fp32],
            "parity_vs_eager": [p.to_dict() for p in self.parity_eager], "eager_note": self.eager_note,
            "sensitivity": self.sensitivity, "budget": self.budget, "timings_s": self.timings_s, **self.extra,
        }


def summarize(results: Sequence[ParityResult]) -> str:
    """One line: worst cosine, worst relative L2, NaN/Inf total, pass count."""
    if not results:
        return "no comparisons"
    cos = min(r.cosine for r in results)
    rel = max(r.rel_l2 for r in results)
    bad = sum(r.nan_count + r.inf_count for r in results)
    ok = sum(1 for r in results if r)
    return f"worst cosine {cos:.6f}, worst rel L2 {rel:.3g}, NaN/Inf {bad}, {ok}/{len(results)} within '{results[0].tolerance.name}'"
