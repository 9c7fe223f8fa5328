"""SAM 2's image encoder (trunk + FPN neck + no-memory embedding) exported and proven equal to the official ``sam2``
package: the features ``SAM2ImagePredictor.set_image`` keeps, on a tiny seeded SAM 2.1 (Hiera-T config, shrunk)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tests.cli_helpers import assert_user_error, run
from tests.sam2_tiny import PAIR_SEED, TINY_SAM2_RECIPE, sam2_tiny_pair
from tests.sam_tiny import sample_image
from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner
from vitdeploy.parity import TOLERANCES, compare

pytest.importorskip("sam2", reason="the official sam2 package is not installed (scripts/test.sh installs it)")

FP32 = TOLERANCES["fp32"]
SEED = PAIR_SEED
def official_model(seed: int = SEED):
    """The official ``SAM2Base`` of the tiny recipe, with the seeded weights the export uses."""
    import tomllib

    from vitdeploy.models.sam2 import Sam2Arch, load_sam2

    return load_sam2(Sam2Arch.from_dict(tomllib.loads(TINY_SAM2_RECIPE)["architecture"]), random_seed=seed)


@pytest.fixture(scope="module")
def recipe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sam2_recipe") / "tiny_sam2.toml"
    path.write_text(TINY_SAM2_RECIPE)
    return path


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny encoder, seed :data:`SEED` (tests/sam2_tiny.py: exported once per run, shared)."""
    return sam2_tiny_pair(tmp_path_factory)[0]


def test_split_qkv_attention_is_the_official_attention() -> None:
    """Each trunk block's attention as the export writes it (q, k, v sliced from the last axis) computes what the
    official ``MultiScaleAttention`` does, the query-pooling ones at stage changes included: the same numbers."""
    from vitdeploy.rewrites.sam2_image_encoder import SplitQkvAttention

    g = torch.Generator().manual_seed(0)
    pooled = 0
    with torch.no_grad():
        for block in official_model().image_encoder.trunk.blocks:
            x = torch.randn(2, 8, 8, block.dim, generator=g)  # two windows of 8 x 8
            theirs, mine = block.attn(x), SplitQkvAttention(block.attn)(x)
            pooled += block.attn.q_pool is not None
            assert mine.shape == theirs.shape
            assert float((mine - theirs).abs().max()) <= 1e-6 * float(theirs.abs().max())
    assert pooled == 3  # the three stage changes of the tiny trunk


@pytest.mark.parametrize("shape", [(90, 120), (300, 200)])
def test_features_are_the_official_image_predictors(exported: Path, shape: tuple[int, int]) -> None:
    from sam2.sam2_image_predictor import SAM2ImagePredictor

    predictor = SAM2ImagePredictor(official_model())
    image = sample_image(*shape, seed=7)
    with torch.no_grad():
        predictor.set_image(image)
        x = predictor._transforms(image)[None].numpy()  # the official preprocessing (square resize, normalize)
    runner = OnnxRuntimeRunner(exported, threads=2)
    assert runner.output_names == ["image_embed", "high_res_feats_0", "high_res_feats_1"]
    out = runner.run({"image": x})
    references = [predictor._features["image_embed"], *predictor._features["high_res_feats"]]
    for name, reference in zip(runner.output_names, references):
        result = compare(reference.numpy(), out[name], FP32, label=name)
        assert result, result.summary()
    assert out["image_embed"].shape == (1, 256, 64, 64) and out["high_res_feats_0"].shape == (1, 32, 256, 256)
    assert runner.metadata["family"] == "sam2_image_encoder" and runner.metadata["resize"] == "square"


def test_validate_and_another_input_size(exported: Path, recipe: Path, tmp_path: Path) -> None:
    code, output = run("validate", str(exported), "--threads", "2", "--runs", "1")
    assert code == 0 and "parity: all comparisons within tolerance" in output, output
    code, output = run("export", "-r", str(recipe), "--random-weights", "--seed", str(SEED), "--input-size", "512",
                       "-o", str(tmp_path / "enc512.onnx"))
    assert code == 0, output
    runner = OnnxRuntimeRunner(tmp_path / "enc512.onnx", threads=2)
    assert runner.input_shapes()["image"] == [1, 3, 512, 512]
    code, output = run("validate", str(tmp_path / "enc512.onnx"), "--threads", "2", "--runs", "1")
    assert code == 0 and "parity: all comparisons within tolerance" in output, output
    code, output = run("export", "-r", str(recipe), "--random-weights", "--input-size", "500", "-o", str(tmp_path / "x.onnx"))
    assert_user_error(code, output, "500", "32")
    assert not (tmp_path / "x.onnx").exists()


def test_an_official_checkpoint_loads_and_a_wrong_one_is_refused(exported: Path, recipe: Path, tmp_path: Path) -> None:
    """A user's ``sam2.1_hiera_*.pt`` is ``{"model": state_dict}``: it exports to the same graph outputs as the weights
    it holds; a checkpoint of another size is refused in one line, nothing written."""
    checkpoint = tmp_path / "sam2.1_tiny_test.pt"
    torch.save({"model": official_model().state_dict()}, checkpoint)
    out = tmp_path / "from_checkpoint.onnx"
    code, output = run("export", "-r", str(recipe), "--checkpoint", str(checkpoint), "-o", str(out))
    assert code == 0, output
    x = np.random.default_rng(0).standard_normal((1, 3, 1024, 1024)).astype(np.float32)
    a, b = OnnxRuntimeRunner(exported, threads=2).run({"image": x}), OnnxRuntimeRunner(out, threads=2).run({"image": x})
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
    state = official_model().state_dict()
    state["no_mem_embed"] = torch.zeros(1, 1, 128)
    torch.save({"model": state}, tmp_path / "other.pt")
    code, output = run("export", "-r", str(recipe), "--checkpoint", str(tmp_path / "other.pt"), "-o", str(tmp_path / "o.onnx"))
    assert_user_error(code, output, "does not fit", "no_mem_embed")
    assert not (tmp_path / "o.onnx").exists()


def test_preprocessing_is_the_official_transforms() -> None:
    """The square antialiased resize + normalize in NumPy against sam2's SAM2Transforms (torchvision), up- and down-scaling."""
    from sam2.utils.transforms import SAM2Transforms

    from vitdeploy.runtime.processing.sam2_transforms import Sam2Preprocessor

    ours = Sam2Preprocessor(1024, (123.675, 116.28, 103.53), (58.395, 57.12, 57.375))
    official = SAM2Transforms(1024, 0.0)
    for shape in ((90, 120), (1500, 1100)):
        image = sample_image(*shape, seed=4)
        assert float(np.abs(ours(image)[0] - official(image).numpy()).max()) < 1e-5


def test_fp16_through_calibrate_and_images_through_validate(exported: Path, tmp_path: Path) -> None:
    from vitdeploy.precision.calibration_data import bundled_calibration_dir

    images = [str(p) for p in sorted(bundled_calibration_dir().glob("*.jpg"))[:3]]
    code, output = run("calibrate", str(exported), "-p", "fp16", "-o", str(tmp_path / "enc.fp16.onnx"), "--threads", "2",
                       "--holdout", "2", *sum((["-i", p] for p in images), []), "--min-images", "3", "--no-cache")
    assert code == 0 and "within 'fp16'" in output, output
    code, output = run("validate", str(exported), "--images", images[0], "--runs", "1", "--threads", "2")
    assert code == 0 and "parity: all comparisons within tolerance" in output, output
