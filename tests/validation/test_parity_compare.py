"""parity.compare's metrics against their definitions, written out in float64, on finite and non-finite outputs."""

from __future__ import annotations

import numpy as np
import pytest

from vitdeploy.parity import compare


def _by_definition(ref: np.ndarray, cand: np.ndarray) -> dict[str, float]:
    ref, cand = ref.astype(np.float64).ravel(), cand.astype(np.float64).ravel()
    finite = np.isfinite(cand)
    diff = np.where(finite, cand - ref, 0.0)
    kept = np.where(finite, cand, 0.0)
    return {"max_abs": np.abs(diff).max(), "max_abs_rel": np.abs(diff).max() / np.abs(ref).max(),
            "rel_l2": np.linalg.norm(diff) / np.linalg.norm(ref),
            "cosine": ref @ kept / (np.linalg.norm(ref) * np.linalg.norm(kept)),
            "nan_count": np.isnan(cand).sum(), "inf_count": np.isinf(cand).sum()}


@pytest.mark.parametrize("spoiled", [0, 3])
def test_compare_measures_what_its_metrics_define(spoiled: int) -> None:
    rng = np.random.default_rng(4)
    ref = rng.standard_normal((2, 16, 24)).astype(np.float32)
    cand = ref + 1e-3 * rng.standard_normal(ref.shape).astype(np.float32)
    flat = cand.reshape(-1)
    flat[:spoiled] = [np.nan, np.inf, -np.inf][:spoiled]
    got = compare(ref, cand, "fp16")
    for name, want in _by_definition(ref, cand).items():
        assert getattr(got, name) == pytest.approx(want, rel=1e-12, abs=0), name
    assert got.shape == ref.shape
    assert bool(got) == (spoiled == 0), got.summary()  # fp16 allows no non-finite value
