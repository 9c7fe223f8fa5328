"""The C++ TensorRT backend on a GPU: build cpp/ with TensorRT, run sam_cli on engines, compare with Python.

Marked ``tensorrt`` and ``gpu``: skipped (with the reason) without TensorRT and a GPU, and skipped when
the TensorRT C++ SDK (NvInferRuntime.h, libnvinfer; the pip wheel ships only the libraries) is not found
by CMake. ``scripts/gpu-check.sh`` runs it through ``pytest -m "tensorrt or gpu"``; point CMake at a
TensorRT tar install with TENSORRT_ROOT=/path/to/TensorRT.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from cpp_build import run_build_sh
from sam_tiny import sample_image, tiny_sam_artifacts  # noqa: F401 (session fixture)
from vitdeploy.doctor import tensorrt_unavailable_reason
from vitdeploy.runtime.apps.sam.predictor import SamPredictor
from vitdeploy.validation.masks import compare_masks

TRT_REASON = tensorrt_unavailable_reason()
pytestmark = [pytest.mark.tensorrt, pytest.mark.gpu,
              pytest.mark.skipif(TRT_REASON is not None, reason=f"needs TensorRT and a GPU: {TRT_REASON}"),
              pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")]


@pytest.fixture(scope="module")
def trt_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """cpp/ built with the TensorRT backend (skips when CMake does not find the TensorRT C++ SDK)."""
    build = tmp_path_factory.mktemp("cpp_tensorrt")
    done = run_build_sh(build, timeout=1200)
    skipped = re.search(r"TensorRT backend: skipped \((.*)\)", done.stdout)
    if skipped:
        pytest.skip(f"CMake did not find the TensorRT C++ SDK: {skipped.group(1)}")
    assert done.returncode == 0, f"C++ build with TensorRT failed:\n{done.stdout[-6000:]}\n{done.stderr[-6000:]}"
    assert "TensorRT backend: on" in done.stdout
    ctest = subprocess.run(["ctest", "--test-dir", str(build), "--output-on-failure"], capture_output=True, text=True, timeout=600)
    assert ctest.returncode == 0, ctest.stdout[-6000:]
    return build


@pytest.fixture(scope="module")
def engines(tiny_sam_artifacts, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:  # noqa: F811
    from vitdeploy.engine.builder import build_engine

    root = tmp_path_factory.mktemp("cpp_engines")
    plans = {"encoder": root / "encoder.plan", "decoder": root / "decoder.plan"}
    build_engine(tiny_sam_artifacts.encoder, plans["encoder"])
    build_engine(tiny_sam_artifacts.decoder, plans["decoder"])
    return plans


def test_sam_cli_on_engines_matches_python_on_onnx(trt_build: Path, engines: dict[str, Path], tiny_sam_artifacts,  # noqa: F811
                                                     tmp_path: Path):
    image = sample_image(75, 110, seed=41)
    Image.fromarray(image).save(tmp_path / "in.png")
    done = subprocess.run([str(trt_build / "sam_cli"), "--encoder", str(engines["encoder"]), "--decoder", str(engines["decoder"]),
                           "--image", str(tmp_path / "in.png"), "--point", "70,30", "--out", str(tmp_path / "mask.png"), "--json"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["encoder_backend"] == "tensorrt" and summary["decoder_backend"] == "tensorrt"
    predictor = SamPredictor(tiny_sam_artifacts.encoder, tiny_sam_artifacts.decoder)
    predictor.set_image(image)
    masks, scores, _ = predictor.predict(np.array([[70.0, 30.0]]), np.array([1]))
    written = np.asarray(Image.open(tmp_path / "mask.png")) > 0
    parity = compare_masks(masks[summary["mask_index"]][None], written[None], "fp32", label="sam_cli tensorrt vs python onnx")
    print(parity)
    assert parity, parity
    np.testing.assert_allclose(summary["scores"], scores, atol=1e-3)


def test_sam_cli_rejects_a_sidecar_of_another_engine(trt_build: Path, engines: dict[str, Path], tmp_path: Path):
    Image.fromarray(sample_image(30, 40)).save(tmp_path / "in.png")
    done = subprocess.run([str(trt_build / "sam_cli"), "--encoder", str(engines["encoder"]), "--decoder", str(engines["decoder"]),
                           "--encoder-metadata", str(engines["decoder"]) + ".json", "--image", str(tmp_path / "in.png"),
                           "--point", "5,5", "--out", str(tmp_path / "mask.png")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("error: ") and ("sidecar records" in done.stderr or "SHA-256" in done.stderr), done.stderr
    assert not (tmp_path / "mask.png").exists()
