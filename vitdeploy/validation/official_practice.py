"""A reduced precision judged against the official's own practice, measured beside it.

Where a model's official implementation publishes running in a reduced precision (SAM 3's and SAM 2's notebooks
enter ``torch.autocast(..., dtype=torch.bfloat16)`` for the whole run; ``official_precisions`` in
``vitdeploy/data/runtime_facts.json`` says where), a fixed budget is the wrong judge of a deployed BF16 or FP16: it
can be stricter than the authors' own practice and leave the fast path unused. Here the same inputs go, in one run,
through the official model in FP32 (the reference), the official model under its published autocast, and the
deployed file; per output, pooled over the inputs, the deployed file's distance from the reference may be at most
the stated margin times the official autocast's (:func:`vitdeploy.parity.anchored`).

The verdict is per output: an output the deployed file computes a bit further from FP32 than the official's own
autocast does (more than one bit: the margin) fails, whatever the others do. :meth:`PracticeReport.measured` is the
official's own worst distance, what the data file records per family for the judges that run no official beside
them (the first-use probe, ``tune``: :func:`vitdeploy.parity.budget_for`).

Through a video pipeline the same reading holds for what the user receives (:func:`judge_clip`): a clip tracked with
some graphs reduced, against the same clip tracked by the official predictor under its autocast, each measured from
its own FP32 run (SAM 2: benchmarks/bf16_video_agreement.py at full size,
tests/runtime/apps/test_sam2_video_predictor.py on the tiny model).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from vitdeploy.parity import TOLERANCES, ParityResult, Tolerance, anchored, compare
from vitdeploy.runtime.backends.base import Runner
from vitdeploy.runtime_facts import OfficialPrecision
from vitdeploy.validation.masks import CLIP_MASKS, CLIP_SCORE_ATOL, compare_masks

#: The official autocast's own distance is measured, not judged.
MEASURED = Tolerance("measured", cosine_min=-1.0, rel_l2_max=math.inf, max_abs_rel=math.inf, nonfinite_max=2 ** 62)


@dataclass(frozen=True)
class Beside:
    """The official model under its published autocast (``runner``), run beside a file deployed at ``policy``."""

    runner: Runner
    practice: OfficialPrecision
    policy: str
    family: str


@dataclass(frozen=True)
class PracticeRow:
    """One output: the official autocast against the official FP32 (``official``), and the deployed file against the
    official FP32 (``deployed``, judged by the budget anchored to ``official``), each pooled over the inputs."""

    output: str
    official: ParityResult
    deployed: ParityResult

    @property
    def ratio(self) -> float:
        """The deployed file's relative L2 over the official autocast's (at most the margin, where that is not 0)."""
        return self.deployed.rel_l2 / self.official.rel_l2 if self.official.rel_l2 > 0 else math.inf

    def line(self) -> str:
        ratio = f"{self.ratio:.2f}x" if math.isfinite(self.ratio) else "n/a (official exact)"
        status = "ok" if self.deployed else "FAIL: " + "; ".join(self.deployed.failures)
        return (f"{self.output}: official autocast cosine {self.official.cosine:.8f} rel L2 {self.official.rel_l2:.3g}; "
                f"deployed cosine {self.deployed.cosine:.8f} rel L2 {self.deployed.rel_l2:.3g} ({ratio} the "
                f"official's) [{self.deployed.tolerance.name}] {status}")


@dataclass
class PracticeReport:
    """Every output of one file at one policy against the official practice (module docstring)."""

    family: str
    policy: str
    practice: OfficialPrecision
    inputs: int
    rows: list[PracticeRow]

    def __bool__(self) -> bool:
        return all(row.deployed for row in self.rows)

    def measured(self) -> dict[str, float]:
        """The official autocast's own worst distance over the outputs: what ``official_precisions`` records."""
        return {"cosine": min(r.official.cosine for r in self.rows), "rel_l2": max(r.official.rel_l2 for r in self.rows)}

    def summary(self) -> str:
        return (f"{self.family} at {self.policy} against the official {self.practice.precision} autocast "
                f"({self.inputs} input set(s), pooled; each output within {self.practice.margin:g}x the official's "
                f"distance from its FP32): {'holds' if self else 'misses'}")

    def to_dict(self) -> dict[str, Any]:
        return {"family": self.family, "policy": self.policy, "official_precision": self.practice.precision,
                "margin": self.practice.margin, "inputs": self.inputs, "passed": bool(self),
                "official_measured": self.measured(),
                "outputs": [{"output": r.output, "official": r.official.to_dict(), "deployed": r.deployed.to_dict(),
                             "ratio": r.ratio if math.isfinite(r.ratio) else None} for r in self.rows]}


def _pooled(outputs: list[dict[str, np.ndarray]], name: str) -> np.ndarray:
    return np.concatenate([np.asarray(out[name], np.float64).ravel() for out in outputs])


def judge(family: str, policy: str, practice: OfficialPrecision, names: list[str],
          reference: list[dict[str, np.ndarray]], official: list[dict[str, np.ndarray]],
          deployed: list[dict[str, np.ndarray]]) -> PracticeReport:
    """The report of ``deployed`` (one dict of outputs per input set) against ``practice``: ``reference`` is the
    official model in FP32 on the same inputs, ``official`` the official model under its autocast; ``names`` the
    outputs, as the deployed file names them (the official's dicts are keyed alike)."""
    if policy not in practice.rounding:
        raise ValueError(f"no rounding is recorded for {policy}: one of {', '.join(practice.rounding)}")
    rows = []
    for name in names:
        want = _pooled(reference, name)
        own = compare(want, _pooled(official, name), MEASURED, label=f"{name} (official {practice.precision} autocast)")
        budget = anchored(own.cosine, own.rel_l2, practice.margin, practice.rounding[policy], TOLERANCES[policy],
                          f"{policy} vs official {practice.precision} x{practice.margin:g}")
        rows.append(PracticeRow(name, own, compare(want, _pooled(deployed, name), budget, label=name)))
    return PracticeReport(family, policy, practice, len(reference), rows)


@dataclass(frozen=True)
class ClipRun:
    """One run of a clip: frame -> (objects, H, W) masks, (object, frame) -> object score logit."""

    masks: dict[int, np.ndarray]
    scores: dict[Any, float]


@dataclass(frozen=True)
class ClipDistance:
    """How far a tracked clip moved from the FP32 clip: the worst and the mean frame's mask distance (1 - IoU, each
    object on each frame) and the largest object score logit difference."""

    worst: float
    mean: float
    score: float

    @classmethod
    def between(cls, reference: ClipRun, other: ClipRun) -> ClipDistance:
        if sorted(reference.masks) != sorted(other.masks) or reference.scores.keys() != other.scores.keys():
            raise ValueError("the two clips differ in frames or objects: track the same prompts on the same clip")
        distances = [1.0 - iou for t in reference.masks
                     for iou in compare_masks(reference.masks[t], other.masks[t], CLIP_MASKS).iou]
        return cls(max(distances), float(np.mean(distances)),
                   max(abs(reference.scores[k] - other.scores[k]) for k in reference.scores))


@dataclass(frozen=True)
class ClipPractice:
    """A clip tracked with a reduced precision against the official's own autocast on the same clip and prompts, each
    measured from its FP32 (``official`` from the official FP32, ``deployed`` from the deployed FP32). Each distance
    of ``deployed`` may be at most ``margin`` times the official's, or within the fixed clip budget (``CLIP_MASKS``,
    ``CLIP_SCORE_ATOL``) where that is looser: never held tighter than a clip the budget alone passes."""

    official: ClipDistance
    deployed: ClipDistance
    margin: float

    def limits(self) -> ClipDistance:
        floor = 1.0 - CLIP_MASKS.iou_min
        return ClipDistance(max(self.margin * self.official.worst, floor), max(self.margin * self.official.mean, floor),
                            max(self.margin * self.official.score, CLIP_SCORE_ATOL))

    def failures(self) -> list[str]:
        limit = self.limits()
        return [f"{name} {got:.4g} > {most:.4g}" for name, got, most in (
            ("worst frame's 1 - IoU", self.deployed.worst, limit.worst),
            ("mean frame's 1 - IoU", self.deployed.mean, limit.mean),
            ("object score difference", self.deployed.score, limit.score)) if got > most]

    def __bool__(self) -> bool:
        return not self.failures()

    def summary(self) -> str:
        o, d = self.official, self.deployed
        return (f"clip: official autocast worst/mean 1 - IoU {o.worst:.4g}/{o.mean:.4g}, scores {o.score:.3g}; "
                f"deployed {d.worst:.4g}/{d.mean:.4g}, scores {d.score:.3g} (within {self.margin:g}x the official's or "
                f"the clip budget): " + ("holds" if self else "misses: " + "; ".join(self.failures())))


def judge_clip(official_fp32: ClipRun, official_reduced: ClipRun, deployed_fp32: ClipRun, deployed_reduced: ClipRun,
               margin: float) -> ClipPractice:
    """A tracked clip's masks and scores with a reduced precision against the official's own autocast (ClipPractice)."""
    return ClipPractice(ClipDistance.between(official_fp32, official_reduced),
                        ClipDistance.between(deployed_fp32, deployed_reduced), margin)


__all__ = ["Beside", "ClipDistance", "ClipPractice", "ClipRun", "PracticeReport", "PracticeRow", "judge", "judge_clip"]
