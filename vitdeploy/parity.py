"""One parity API: ``compare`` returns a result that is truthy when it passes and carries every metric.

The named budgets (:data:`TOLERANCES`) are facts of each precision, used at every layer that judges numbers: the
precision passes, ``validate`` (:mod:`vitdeploy.validation`), ``tune`` and the first-use probe of ``--runtime auto``.
Where a model's official implementation publishes running in a reduced precision (SAM 3's BF16 autocast), a reduced
policy on its files is judged against that practice instead (:func:`anchored`, :func:`budget_for`;
``official_precisions`` in ``vitdeploy/data/runtime_facts.json``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

import numpy as np

from vitdeploy.errors import ParityError
from vitdeploy.runtime_facts import official_precision


@dataclass(frozen=True)
class Tolerance:
    """Limits for one precision. ``max_abs_rel`` is max-abs error divided by max |reference|."""

    name: str
    cosine_min: float
    rel_l2_max: float
    max_abs_rel: float
    nonfinite_max: int = 0


#: Named tolerances per precision, used by tests, ``vitdeploy validate`` and the precision passes.
TOLERANCES: dict[str, Tolerance] = {
    # FP32 rewrite/export vs official eager: reordered float sums only.
    "fp32": Tolerance("fp32", cosine_min=0.99999, rel_l2_max=1e-4, max_abs_rel=1e-3),
    # Mixed FP16 with FP32 islands: ~3 decimal digits per op, accumulated over depth.
    "fp16": Tolerance("fp16", cosine_min=0.9999, rel_l2_max=2e-2, max_abs_rel=5e-2),
    # BF16 inference of an FP32 graph (OpenVINO's CPU plugin, --inference-precision bf16): 8 significant bits per
    # value, FP32 accumulation. Measured on an Intel Xeon with AMX, OpenVINO 2026.4.1, against the official eager
    # models: tiny SAM encoder cosine 0.999944-0.999965, relative L2 <= 1.06e-2, max-abs/max <= 1.52e-2 over 3 random
    # inputs and the 16 bundled images (vitdeploy validate tiny.onnx --runtime openvino --inference-precision bf16
    # --random-inputs 3 --images calibration/images --runs 0); DeiT-S (timm_deit_small_patch16_224, the same validate
    # with --random-inputs 3) cosine >= 0.999938, relative L2 <= 1.11e-2;
    # SAM ViT-B 0.999938 (benchmarks/bench_encoder_speed.py). The tiny SAM mask decoder misses it (the same validate
    # exits 1: mask logits cosine 0.99955-0.99985, max-abs/max up to 9.1e-2): SamPredictor keeps the decoder as written.
    "bf16": Tolerance("bf16", cosine_min=0.9999, rel_l2_max=2e-2, max_abs_rel=5e-2),
    # Explicit INT8 on GEMMs: judged by direction (cosine) more than by elementwise error.
    "int8": Tolerance("int8", cosine_min=0.99, rel_l2_max=0.15, max_abs_rel=0.5),
}


@dataclass
class ParityResult:
    """Metrics of ``candidate`` vs ``reference``; truthy when every limit holds."""

    label: str
    tolerance: Tolerance
    max_abs: float
    max_abs_rel: float
    rel_l2: float
    cosine: float
    nan_count: int
    inf_count: int
    shape: tuple[int, ...]
    failures: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return not self.failures

    @property
    def passed(self) -> bool:
        return not self.failures

    def summary(self) -> str:
        status = "ok" if self else "FAIL: " + "; ".join(self.failures)
        return (
            f"{self.label}: max_abs={self.max_abs:.3g} (rel {self.max_abs_rel:.3g}) rel_l2={self.rel_l2:.3g} "
            f"cosine={self.cosine:.8f} nan={self.nan_count} inf={self.inf_count} [{self.tolerance.name}] {status}"
        )

    def to_dict(self) -> dict:
        d = asdict(self)
        d["tolerance"] = asdict(self.tolerance)
        d["passed"] = self.passed
        d["shape"] = list(self.shape)
        return d


def _as_numpy(x: object) -> np.ndarray:
    if not isinstance(x, np.ndarray) and hasattr(x, "detach"):  # a NumPy subclass may answer detach() too
        x = x.detach().cpu().float().numpy()  # torch tensor, without importing torch here
    return np.asarray(x, dtype=np.float64)


def compare(reference: object, candidate: object, tolerance: Tolerance | str = "fp32", label: str = "output") -> ParityResult:
    """Compare two arrays (NumPy or torch) of the same shape against a named tolerance."""
    tol = TOLERANCES[tolerance] if isinstance(tolerance, str) else tolerance
    ref, cand = _as_numpy(reference), _as_numpy(candidate)
    if ref.shape != cand.shape:
        raise ParityError(f"{label}: shape {cand.shape} differs from the reference's {ref.shape}")
    shape = tuple(ref.shape)
    ref, cand = ref.reshape(-1), cand.reshape(-1)
    finite = np.isfinite(cand)
    if finite.all():  # the usual case, in fewer passes and without temporaries the size of the arrays (the probe
        nan_count = inf_count = 0  # compares SAM ViT-B's block outputs, 3.1 M values each: 40-106 ms a call, now 25)
        cand_f = cand
        diff = cand - ref
    else:
        nan_count = int(np.isnan(cand).sum())
        inf_count = int(np.isinf(cand).sum())
        cand_f = np.where(finite, cand, 0.0)
        diff = np.where(finite, cand - ref, 0.0)
    max_abs = max(float(diff.max()), -float(diff.min())) if diff.size else 0.0
    scale = max(float(ref.max()), -float(ref.min())) if ref.size else 0.0
    ref_norm = float(np.sqrt(np.dot(ref, ref)))
    diff_norm = float(np.sqrt(np.dot(diff, diff)))
    rel_l2 = diff_norm / ref_norm if ref_norm > 0 else diff_norm
    denom = ref_norm * float(np.sqrt(np.dot(cand_f, cand_f)))
    cosine = float(np.dot(ref, cand_f) / denom) if denom > 0 else (1.0 if ref_norm == 0 else 0.0)
    max_abs_rel = max_abs / scale if scale > 0 else max_abs
    failures = []
    if nan_count + inf_count > tol.nonfinite_max:
        failures.append(f"{nan_count} NaN and {inf_count} Inf values (allowed {tol.nonfinite_max})")
    if cosine < tol.cosine_min:
        failures.append(f"cosine {cosine:.8f} < {tol.cosine_min}")
    if rel_l2 > tol.rel_l2_max:
        failures.append(f"relative L2 {rel_l2:.3g} > {tol.rel_l2_max}")
    if max_abs_rel > tol.max_abs_rel:
        failures.append(f"max-abs/scale {max_abs_rel:.3g} > {tol.max_abs_rel}")
    return ParityResult(label, tol, max_abs, max_abs_rel, rel_l2, cosine, nan_count, inf_count, shape, failures)


def anchored(official_cosine: float, official_rel_l2: float, margin: float, rounding: float, guard: Tolerance,
             name: str) -> Tolerance:
    """The budget of a reduced precision judged against an official's own (``official_*``: the official autocast's
    distance from its FP32 on the same inputs): ``margin`` times its relative L2 and ``margin`` squared times its
    1 - cosine (a cosine's deficit grows as the square of a relative error), neither tighter than one ``rounding`` to
    the deployed format (its unit roundoff; half its square for 1 - cosine): an output the official computes exactly
    under autocast may still be rounded once. The largest single element's error is no distance two BF16
    implementations share (at full size SAM 3's image_embed had 2.07x the official's max-abs/scale at 1.89x its
    relative L2): it is held to the ``guard`` budget's (the policy's named one), which catches a broken op."""
    return Tolerance(name, cosine_min=1.0 - max(margin ** 2 * (1.0 - official_cosine), rounding ** 2 / 2),
                     rel_l2_max=max(margin * official_rel_l2, rounding), max_abs_rel=guard.max_abs_rel)


def budget_for(precision: str, family: str | None) -> Tolerance:
    """The budget a file of ``family`` is held to at ``precision`` (a file precision or a policy) where no official
    runs beside it (the first-use probe, ``tune``): where the family's official publishes a reduced precision and its
    own distance is recorded for the family, :func:`anchored` to that record; else :data:`TOLERANCES`."""
    official = official_precision(family)
    measured = official.measured.get(family or "") if official is not None else None
    if measured is None or precision not in official.rounding:
        return TOLERANCES[precision]
    return anchored(measured["cosine"], measured["rel_l2"], official.margin, official.rounding[precision],
                    TOLERANCES[precision], f"{precision} vs official {official.precision} x{official.margin:g}")


def raise_on_failures(results: Iterable[ParityResult]) -> None:
    """Collect every failed comparison and raise them together, with all measured values."""
    failed = [r for r in results if not r]
    if failed:
        raise ParityError("parity failed: " + " | ".join(r.summary() for r in failed))
