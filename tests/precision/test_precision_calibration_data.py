"""Calibration loader: bundled set, model preprocessing, cache, skipped files, refusals."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vitdeploy.errors import InputError
from vitdeploy.precision.calibration_data import bundled_calibration_dir, load_calibration_set
from vitdeploy.runtime.processing.images import read_image_rgb
from vitdeploy.runtime.processing.images import expand_image_paths
from vitdeploy.runtime.processing.preprocess import SamPreprocessor

META = {"family": "sam_image_encoder", "input_size": [64, 64], "pixel_mean": [123.675, 116.28, 103.53],
        "pixel_std": [58.395, 57.12, 57.375]}
SHAPE = [1, 3, 64, 64]


def _folder(tmp_path: Path, count: int) -> Path:
    folder = tmp_path / "imgs"
    folder.mkdir()
    for f in expand_image_paths([bundled_calibration_dir()])[:count]:
        shutil.copy(f, folder / f.name)
    return folder


def test_bundled_set_is_license_clean_and_small():
    import json

    from vitdeploy.runtime.processing.images import IMAGE_SUFFIXES

    manifest = json.loads((Path(__file__).resolve().parents[2] / "calibration" / "MANIFEST.json").read_text())
    images = [p for p in bundled_calibration_dir().iterdir() if p.suffix.lower() in IMAGE_SUFFIXES]
    assert sorted(Path(e["file"]).name for e in manifest["images"]) == sorted(p.name for p in images)
    assert all(e["license"] and e["source"] for e in manifest["images"])
    assert sum(p.stat().st_size for p in images) < 2_000_000


def test_default_is_bundled_with_warning_and_second_run_hits_cache(tmp_path):
    warnings, steps = [], []
    first = load_calibration_set(None, META, "image", SHAPE, cache_dir=tmp_path, warn=warnings.append,
                                 progress=lambda d, t, n: steps.append((d, t)))
    assert first.bundled and not first.cache_hit and len(first) == 16
    assert warnings and "real deployment should calibrate on its own images" in warnings[0]
    assert steps[-1] == (16, 16)
    second = load_calibration_set(None, META, "image", SHAPE, cache_dir=tmp_path)
    assert second.cache_hit
    np.testing.assert_array_equal(first.inputs, second.inputs)
    # Exactly the model's own preprocessing.
    path = bundled_calibration_dir() / first.names[0]
    expected = SamPreprocessor(64, META["pixel_mean"], META["pixel_std"])(read_image_rgb(path))
    np.testing.assert_array_equal(first.inputs[0:1], expected)
    assert first.inputs.shape == (16, 3, 64, 64)
    cal, held = first.split(4)
    assert len(cal) == 12 and len(held) == 4 and not set(cal.names) & set(held.names)
    assert [b["image"].shape[0] for b in first.batches(5)] == [5, 5, 5]


def test_corrupt_and_gray_images_are_reported_and_skipped(tmp_path):
    folder = _folder(tmp_path, 9)
    (folder / "broken.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
    Image.fromarray(np.zeros((20, 30), np.uint8)).save(folder / "gray.png")
    result = load_calibration_set([folder], META, "image", SHAPE, use_cache=False)
    assert len(result) == 9
    reasons = {Path(s.path).name: s.reason for s in result.skipped}
    assert "cannot be decoded" in reasons["broken.jpg"]
    assert "1 channel" in reasons["gray.png"] and "convert it to RGB" in reasons["gray.png"]


def test_refusals(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("no images here")
    with pytest.raises(InputError, match="holds no images"):
        load_calibration_set([empty], META, "image", SHAPE, use_cache=False)
    with pytest.raises(InputError, match="only 3 usable calibration image"):
        load_calibration_set([_folder(tmp_path, 3)], META, "image", SHAPE, use_cache=False)
    with pytest.raises(InputError, match="takes 1 channel"):
        load_calibration_set(None, META, "image", [1, 1, 64, 64], use_cache=False)
    with pytest.raises(InputError, match="not supported for model family 'sam_mask_decoder'"):
        load_calibration_set(None, {**META, "family": "sam_mask_decoder"}, "image", SHAPE, use_cache=False)
    with pytest.raises(InputError, match="not found"):
        load_calibration_set([tmp_path / "missing"], META, "image", SHAPE, use_cache=False)
