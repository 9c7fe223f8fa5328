"""Tiny FP32 ONNX exports and calibration feeds shared by the precision tests (built once per session)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from vitdeploy.metadata import decode
from vitdeploy.models.sam_encoder import SamEncoderArch, load_sam_image_encoder
from vitdeploy.onnx_export.sam_encoder import export_sam_image_encoder, sam_encoder_metadata
from vitdeploy.precision.calibration_data import bundled_calibration_dir, load_calibration_set

TINY = SamEncoderArch(img_size=64, patch_size=8, embed_dim=32, depth=3, num_heads=2, out_chans=16,
                      window_size=3, global_attn_indexes=(1,))
MEAN, STD = (123.675, 116.28, 103.53), (58.395, 57.12, 57.375)


def export_tiny(path: Path, *, seed: int = 0, layernorm2d: str = "matmul", overflow: float | None = None) -> Path:
    """Export the tiny encoder; ``overflow`` scales block 0's MLP so its hidden activations exceed FP16's range.

    lin1 (weights and bias) is multiplied by ``overflow`` and lin2's weights divided by it: in FP32 the
    block computes nearly the same function (GELU(kx)/k ~ ReLU(x) for large k), in FP16 lin1's output
    overflows 65504.
    """
    encoder = load_sam_image_encoder(TINY, random_seed=seed)
    if overflow is not None:
        with torch.no_grad():
            mlp = encoder.blocks[0].mlp
            mlp.lin1.weight.mul_(overflow)
            mlp.lin1.bias.mul_(overflow)
            mlp.lin2.weight.div_(overflow)
    meta = sam_encoder_metadata(variant="tiny", input_size=TINY.img_size, pixel_mean=MEAN, pixel_std=STD,
                                architecture=TINY.to_dict(), random_seed=seed, layernorm2d=layernorm2d)
    if overflow is not None:
        meta["random_weights"] = False  # no eager rebuild from the seed: the weights were edited
        meta["random_seed"] = None
    export_sam_image_encoder(encoder, path, metadata=meta, input_size=TINY.img_size, layernorm2d=layernorm2d)
    return path


@pytest.fixture(scope="session")
def tiny_exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny encoder in three forms (once per test run): matmul LayerNorm2d, native LayerNorm2d, FP16-overflowing."""
    from tests.once_per_run import once_per_run

    return once_per_run(tmp_path_factory, "precision_models", lambda root: {
        "matmul": export_tiny(root / "tiny_matmul.onnx"),
        "native": export_tiny(root / "tiny_native.onnx", seed=1, layernorm2d="native"),
        "overflow": export_tiny(root / "tiny_overflow.onnx", overflow=20000.0),
    })


@pytest.fixture(scope="session")
def calib_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("calib_cache")


def calibration_feeds(model_path: Path, cache: Path, holdout: int = 4):
    """(calibration feeds, held-out feeds) from the bundled image set through the model's preprocessing."""
    model = onnx.load(str(model_path), load_external_data=False)
    meta = decode({p.key: p.value for p in model.metadata_props})
    cal_set = load_calibration_set([bundled_calibration_dir()], meta, "image", [1, 3, 64, 64], cache_dir=cache)
    cal, held = cal_set.split(holdout)
    return cal.feeds(), held.feeds()


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a64 @ b64 / (np.linalg.norm(a64) * np.linalg.norm(b64)))
