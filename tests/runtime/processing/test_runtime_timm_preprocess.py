"""NumPy timm preprocessing equals timm's own eval transform (the reference), for several configs."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from vitdeploy.runtime.processing.preprocess import TimmPreprocessor

#: Max-abs difference on normalized inputs (float32 rounding of the same uint8 pixels).
PREPROCESS_MAX_ABS = 1e-5


@pytest.mark.parametrize(
    ("config", "hw"),
    [
        ({"input_size": (3, 224, 224), "interpolation": "bicubic", "crop_pct": 0.9, "crop_mode": "center",
          "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}, (300, 451)),
        ({"input_size": (3, 64, 64), "interpolation": "bilinear", "crop_pct": 0.875, "crop_mode": "center",
          "mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5)}, (97, 40)),
        ({"input_size": (3, 48, 48), "interpolation": "bicubic", "crop_pct": 1.0, "crop_mode": "center",
          "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}, (120, 80)),
    ],
)
def test_timm_preprocess_matches_timm_transform(config: dict, hw: tuple[int, int]) -> None:
    from timm.data import create_transform

    image = np.random.default_rng(0).integers(0, 256, (*hw, 3), dtype=np.uint8)
    expected = create_transform(**config).__call__(Image.fromarray(image)).numpy()[None]
    got = TimmPreprocessor({k: list(v) if isinstance(v, tuple) else v for k, v in config.items()})(image)
    assert got.shape == expected.shape
    err = float(np.abs(got - expected).max())
    assert err <= PREPROCESS_MAX_ABS, f"max-abs {err:.3g} > {PREPROCESS_MAX_ABS}"


def test_non_square_timm_size_is_refused() -> None:
    from vitdeploy.errors import InputError

    prep = TimmPreprocessor({"input_size": [3, 32, 48], "crop_pct": 1.0, "crop_mode": "center"})
    with pytest.raises(InputError, match="not square"):
        prep(np.zeros((10, 10, 3), dtype=np.uint8))
