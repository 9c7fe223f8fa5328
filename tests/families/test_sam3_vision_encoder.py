"""SAM 3's vision encoder (ViTDet trunk with 2-D rotary embeddings + dual neck) rewritten, exported and proven equal
to the official ``sam3`` package's ``SAM3VLBackbone.forward_image``, on the tiny seeded recipe ``sam3_tiny``."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.cli_helpers import assert_user_error, run
from vitdeploy.models.recipes import RECIPE_DIR
from vitdeploy.parity import TOLERANCES, compare
from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner

pytest.importorskip("sam3", reason="the official sam3 package is not installed (scripts/test.sh installs it)")

FP32 = TOLERANCES["fp32"]
SEED = 5
RECIPE = "sam3_tiny"


def tiny_arch(**changes):
    from vitdeploy.models.sam3_vision_encoder import Sam3VisionArch

    return Sam3VisionArch.from_dict({**tomllib.loads((RECIPE_DIR / f"{RECIPE}.toml").read_text())["architecture"],
                                     **changes})


def official(arch, seed: int = SEED):
    """The official backbone and interactive heads, wrapped to return ``forward_image``'s feature levels and the click
    predictor's features as a tuple."""
    from vitdeploy.models.sam3_vision_encoder import load_sam3_vision_parts
    from vitdeploy.rewrites.sam3_vision_encoder import Sam3VisionEncoder

    parts = load_sam3_vision_parts(arch, random_seed=seed)
    return Sam3VisionEncoder(parts.backbone, parts.heads)


def images(size: int, batch: int = 1, seed: int = 1) -> torch.Tensor:
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from vitdeploy.pipeline import export_from_recipe

    out = tmp_path_factory.mktemp("sam3") / "sam3_tiny.onnx"
    return export_from_recipe(RECIPE, out, random_weights=True, seed=SEED).path


@pytest.mark.parametrize(("changes", "batch"), [({}, 1), ({"img_size": 84}, 2), ({"add_sam2_neck": False, "scalp": 0}, 1)],
                         ids=["padded-windows", "unpadded-batch2", "one-neck-all-levels"])
def test_the_rewrite_computes_the_official_forward_image(changes: dict, batch: int) -> None:
    """Rope in real arithmetic on reordered q/k halves, static windows (112 px: an 8x8 grid padded to 9x9 windows of 3;
    84 px: 6x6, no padding), the tiled position table, the interactive heads' conv_s0/conv_s1 and no_mem_embed: the
    official numbers within the fp32 budget, every output."""
    from vitdeploy.rewrites.sam3_vision_encoder import rewrite_sam3_vision_encoder

    arch = tiny_arch(**changes)
    reference = official(arch)
    rewritten = rewrite_sam3_vision_encoder(reference.backbone, reference.heads)
    x = images(arch.img_size, batch)
    with torch.no_grad():
        want, got = reference(x), rewritten(x)
    levels = len(arch.scale_factors) - arch.scalp
    assert len(want) == len(got) == levels + (3 if arch.add_sam2_neck else 0)
    assert len(rewritten.output_names) == len(got)
    for name, a, b in zip(rewritten.output_names, want, got):
        assert a.shape == b.shape and a.shape[0] == batch
        result = compare(a.numpy(), b.numpy(), FP32, label=name)
        assert result, result.summary()


def test_the_rotary_tables_are_the_official_complex_rotation() -> None:
    """One attention block alone: ``view_as_complex(q) * freqs_cis`` (official) against ``[q1 c - q2 s, q1 s + q2 c]``
    on the reordered halves (ours), global and windowed."""
    from vitdeploy.rewrites.sam3_vision_encoder import RotaryAttention

    trunk = official(tiny_arch()).backbone.vision_backbone.trunk
    for block in (trunk.blocks[0], trunk.blocks[1]):  # windowed (3x3 tokens), global (8x8)
        side = int(block.attn.input_size[0])
        ours = RotaryAttention(block.attn, (side, side))
        x = images(side, 2).permute(0, 2, 3, 1).repeat(1, 1, 1, 11)[..., :32]  # B, h, w, C
        with torch.no_grad():
            want, got = block.attn(x), ours(x)
        assert float((want - got).abs().max()) < 1e-5


def test_another_input_size_and_a_dynamic_batch(exported: Path, tmp_path: Path) -> None:
    code, output = run("validate", str(exported), "--threads", "2", "--runs", "1")
    assert code == 0 and "parity: all comparisons within tolerance" in output, output
    other = tmp_path / "sam3_140.onnx"
    code, output = run("export", "-r", RECIPE, "--random-weights", "--seed", str(SEED), "--input-size", "140",
                       "--dynamic-batch", "-o", str(other))
    assert code == 0, output
    runner = OnnxRuntimeRunner(other, threads=2)
    assert runner.input_shapes()["image"][1:] == [3, 140, 140]
    x = images(140, 2)
    with torch.no_grad():
        want = official(tiny_arch(img_size=140))(x)
    got = runner.run({"image": x.numpy()})
    for name, reference in zip(runner.output_names, want):
        result = compare(reference.numpy(), got[name], FP32, label=name)
        assert result, result.summary()
    assert got["backbone_fpn_0"].shape == (2, 16, 40, 40)
    code, output = run("export", "-r", RECIPE, "--random-weights", "--input-size", "150", "-o", str(tmp_path / "x.onnx"))
    assert_user_error(code, output, "150", "14")
    assert not (tmp_path / "x.onnx").exists()


def test_an_official_checkpoint_loads_and_a_wrong_one_is_refused(exported: Path, tmp_path: Path) -> None:
    """A user's ``sam3.pt`` is ``{"model": {"detector.backbone.vision_backbone.*": ..., "detector.*": ...,
    "tracker.*": ...}}``: its vision keys and the tracker's SAM heads export to the same outputs as the weights they
    hold (its rotary tables are recomputed, not loaded); a checkpoint of another size is refused in one line,
    nothing written."""
    parts = official(tiny_arch())
    state = {f"detector.backbone.{k}": v for k, v in parts.backbone.state_dict().items()}
    state.update({f"tracker.{k}": v for k, v in parts.heads.state_dict().items()})
    state["detector.transformer.decoder.norm.weight"] = torch.ones(16)  # the rest of the image model is ignored
    state["tracker.maskmem_tpos_enc"] = torch.zeros(7, 1, 1, 64)
    checkpoint = tmp_path / "sam3.pt"
    torch.save({"model": state}, checkpoint)
    out = tmp_path / "from_checkpoint.onnx"
    code, output = run("export", "-r", RECIPE, "--checkpoint", str(checkpoint), "-o", str(out))
    assert code == 0, output
    x = np.random.default_rng(0).standard_normal((1, 3, 112, 112)).astype(np.float32)
    a, b = OnnxRuntimeRunner(exported, threads=2).run({"image": x}), OnnxRuntimeRunner(out, threads=2).run({"image": x})
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
    wide = official(tiny_arch(embed_dim=48, num_heads=3)).backbone
    torch.save({"model": {f"detector.backbone.{k}": v for k, v in wide.state_dict().items()}}, tmp_path / "other.pt")
    code, output = run("export", "-r", RECIPE, "--checkpoint", str(tmp_path / "other.pt"), "-o", str(tmp_path / "o.onnx"))
    assert_user_error(code, output, "does not fit")
    assert not (tmp_path / "o.onnx").exists()


def test_a_bad_architecture_is_refused_in_words(tmp_path: Path) -> None:
    recipe = tmp_path / "bad.toml"
    text = (RECIPE_DIR / f"{RECIPE}.toml").read_text()
    for old, new, words in (("num_heads = 2", "num_heads = 3", ("embed_dim 32", "multiple of 4")),
                            ("global_att_blocks = [1, 3]", "global_att_blocks = [1, 4]", ("global_att_blocks", "depth 4")),
                            ("d_model = 16", "d_model = 16\nrope = true", ("rope",))):
        recipe.write_text(text.replace(old, new))
        code, output = run("export", "-r", str(recipe), "--random-weights", "-o", str(tmp_path / "bad.onnx"))
        assert_user_error(code, output, *words)
        assert not (tmp_path / "bad.onnx").exists()


@pytest.mark.parametrize("shape", [(90, 120), (1500, 1100), (112, 112), (300, 60)])
def test_preprocessing_is_sam3_processors_transform_byte_for_byte(shape: tuple[int, int]) -> None:
    """The uint8 antialiased resize (width, then height, each rounded) + scale + normalize in NumPy against
    ``Sam3Processor.transform`` (torchvision on the uint8 image): up- and down-scaling, exactly equal."""
    from sam3.model.sam3_image_processor import Sam3Processor
    from torchvision.transforms import v2

    from tests.sam_tiny import sample_image
    from vitdeploy.runtime.processing.sam3_transforms import Sam3Preprocessor

    image = sample_image(*shape, seed=3)
    official_transform = Sam3Processor(None, resolution=112, device="cpu").transform
    with torch.no_grad():
        want = official_transform(v2.functional.to_image(image)).numpy()
    got = Sam3Preprocessor(112, (127.5,) * 3, (127.5,) * 3)(image)
    assert got.shape == (1, *want.shape) and got.dtype == np.float32
    np.testing.assert_array_equal(got[0], want)


def test_fp16_and_int8_calibrate_from_images_within_their_budgets(exported: Path, tmp_path: Path) -> None:
    from vitdeploy.precision.calibration_data import bundled_calibration_dir

    images = [str(p) for p in sorted(bundled_calibration_dir().glob("*.jpg"))[:3]]
    for precision in ("fp16", "int8"):
        code, output = run("calibrate", str(exported), "-p", precision, "-o", str(tmp_path / f"enc.{precision}.onnx"),
                           "--threads", "2", "--holdout", "2", *sum((["-i", p] for p in images), []), "--min-images", "3",
                           "--no-cache")
        assert code == 0 and f"within '{precision}'" in output, output
    code, output = run("validate", str(exported), "--images", images[0], "--runs", "1", "--threads", "2")
    assert code == 0 and "parity: all comparisons within tolerance" in output, output


def test_the_first_use_probe_cuts_one_windowed_and_one_global_block(exported: Path, tmp_path: Path) -> None:
    """A full-size file (1.8 GB) is probed on blocks the family names, cut from the real graph by the exporter's scopes:
    here the tiny file, as if it were large."""
    from vitdeploy.metadata import read_onnx_metadata
    from vitdeploy.runtime.deploy.graph_part import probe_part

    part = probe_part(exported, read_onnx_metadata(exported), tmp_path, whole_below=0)
    assert part.what == "blocks.0, blocks.1 of 4 blocks, at the file's shapes", part.what
    assert {k: v.shape for k, v in part.feeds.items()} == {k: (1, 8, 8, 32) for k in part.feeds}
    runner = OnnxRuntimeRunner(part.path, threads=1)
    out = runner.run(part.feeds)
    assert all(np.isfinite(v).all() for v in out.values())


def test_bf16_on_openvino_holds_the_bf16_budget_against_the_official_model(exported: Path) -> None:
    """OpenVINO's BF16 inference of the FP32 file (on a CPU with BF16 matrix units; elsewhere OpenVINO runs f32 and the
    budget holds trivially), judged against the official ``forward_image`` by the named 'bf16' budget, every level,
    on random inputs and the bundled images (Sam3Processor's preprocessing)."""
    pytest.importorskip("openvino")
    from vitdeploy.precision.calibration_data import bundled_calibration_dir
    from vitdeploy.validation.validate_model import ValidateOptions, validate_model

    images = tuple(str(p) for p in sorted(bundled_calibration_dir().glob("*.jpg"))[:2])
    report = validate_model(exported, ValidateOptions(runtime="openvino", inference_precision="bf16", runs=0,
                                                      random_inputs=2, images=images, threads=2))
    assert report.tolerance.name == "bf16"
    assert report, report.to_dict()


def test_a_sam3_file_where_a_sam_predictor_belongs_is_refused_before_it_is_opened(exported: Path, tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """predict, segment-all, embed and serve read the files' metadata first: a SAM 3 encoder is refused in one line
    naming what SAM 3 files are for, with nothing written and no first-use probe run (at full size a probe is a minute)."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("VITDEPLOY_PROBE", "1")
    monkeypatch.setenv("VITDEPLOY_CACHE_DIR", str(cache))
    decoder = tmp_path / "dec.onnx"
    assert run("export", "-r", "sam_tiny_decoder", "--random-weights", "-o", str(decoder))[0] == 0
    image = "calibration/images/calib_00_landscape.jpg"
    for args in (["predict", "-e", str(exported), "-d", str(decoder), "-i", image, "--point", "10,10",
                  "-o", str(tmp_path / "m.png")],
                 ["segment-all", "-e", str(exported), "-d", str(decoder), "-i", image, "-o", str(tmp_path / "m.json")],
                 ["embed", "-e", str(exported), "--images", "calibration/images", "--out-dir", str(tmp_path / "emb")],
                 ["serve", "-e", str(exported), "-d", str(decoder), "--port", "0"]):
        code, output = run(*args)
        assert_user_error(code, output, "SAM 3 file", "segment-concept", "Sam3Processor")
    assert sorted(p.name for p in tmp_path.iterdir() if p != cache) == ["dec.onnx"], "something was written"
    assert not list(cache.rglob("*.json")), "a probe ran before the refusal"


@pytest.mark.parametrize("blocked, needle", [("iopath", "needs the 'iopath' package"),
                                             ("sam3.model.vitdet", "needs the 'sam3' package")])
def test_a_missing_official_module_is_named_in_one_line(tmp_path, blocked, needle):
    """``pip install --no-deps sam3`` brings none of what the package imports: a missing one (iopath) is named as
    such, the package itself as the package, in one line with nothing written (it read 'a vitdeploy bug' before).
    A fresh interpreter, so that the official modules are imported anew."""
    import subprocess
    import sys

    out = tmp_path / "sam3.onnx"
    code = (f"import sys; sys.modules[{blocked!r}] = None\n"
            "from vitdeploy.cli import cli\n"
            f"cli(['export', '--recipe', {RECIPE!r}, '--random-weights', '-o', {str(out)!r}])")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert_user_error(result.returncode, result.stdout + result.stderr, needle)
    assert not out.exists()
