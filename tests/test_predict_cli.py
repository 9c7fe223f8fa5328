"""CLI: ``vitdeploy predict`` (mask PNG + overlay, bad input), and ``export``/``validate`` on the new families."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from tests.sam_tiny import TinySamArtifacts, sample_image
from vitdeploy.cli import cli
from vitdeploy.runtime import SamPredictor

TINY_TIMM_RECIPE = """\
[model]
family = "timm_vit"
variant = "tiny_vit"

[architecture]
img_size = 32
patch_size = 8
embed_dim = 32
depth = 2
num_heads = 2
num_classes = 10
class_token = false
global_pool = "avg"

[timm]
output = "logits"
"""

pytest_plugins = ["tests.sam_tiny_fixtures"]  # the session fixture tiny_sam_artifacts, shared by every file


def _invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def image_file(tmp_path: Path) -> Path:
    path = tmp_path / "photo.png"
    Image.fromarray(sample_image(48, 80, seed=3)).save(path)
    return path


def test_predict_writes_mask_and_overlay(tiny_sam_artifacts: TinySamArtifacts, image_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "mask.png"
    result = _invoke("predict", "-e", str(tiny_sam_artifacts.encoder), "-d", str(tiny_sam_artifacts.decoder),
                     "-i", str(image_file), "--point", "30,25", "--box", "6,5,70,40", "--point", "60,33,0",
                     "-o", str(out), "--report", str(tmp_path / "r.json"), "--threads", "1")
    assert result.exit_code == 0, result.output
    assert "1 mask(s)" in result.output and (tmp_path / "r.json").is_file()
    written = np.asarray(Image.open(out))
    overlay = np.asarray(Image.open(tmp_path / "mask.overlay.png"))
    assert written.shape == (48, 80) and set(np.unique(written)) <= {0, 255}
    assert overlay.shape == (48, 80, 3)
    predictor = SamPredictor(tiny_sam_artifacts.encoder, tiny_sam_artifacts.decoder, threads=1)
    predictor.set_image(sample_image(48, 80, seed=3))
    masks, _, _ = predictor.predict(np.array([[30.0, 25.0], [60.0, 33.0]]), np.array([1, 0]), np.array([6.0, 5, 70, 40]),
                                    multimask_output=False)
    assert np.array_equal(written == 255, masks[0])


def test_predict_single_point_writes_best_of_three(tiny_sam_artifacts: TinySamArtifacts, image_file: Path, tmp_path: Path) -> None:
    result = _invoke("predict", "-e", str(tiny_sam_artifacts.encoder), "-d", str(tiny_sam_artifacts.decoder),
                     "-i", str(image_file), "--point", "30,25", "-o", str(tmp_path / "m.png"), "--overlay", str(tmp_path / "o.png"))
    assert result.exit_code == 0, result.output
    assert "3 mask(s)" in result.output and (tmp_path / "o.png").is_file()


@pytest.mark.parametrize("extra,code,message", [
    (["--point", "300,20"], 1, "outside the 80x48 image"),
    (["--box", "0,0,10,90"], 1, "outside the 80x48 image"),
    ([], 1, "no prompt"),
    (["--point", "1,a"], 2, "is not X,Y or X,Y,LABEL"),
    (["--point", "1,2,5"], 2, "LABEL must be 1"),
    (["--box", "1,2,3"], 2, "is not X0,Y0,X1,Y1"),
])
def test_predict_bad_prompts(tiny_sam_artifacts: TinySamArtifacts, image_file: Path, tmp_path: Path, extra: list[str],
                             code: int, message: str) -> None:
    out = tmp_path / "mask.png"
    result = _invoke("predict", "-e", str(tiny_sam_artifacts.encoder), "-d", str(tiny_sam_artifacts.decoder),
                     "-i", str(image_file), "-o", str(out), *extra)
    assert result.exit_code == code and message in result.output, result.output
    assert "Traceback" not in result.output and not out.exists() and not (tmp_path / "mask.overlay.png").exists()
    if code == 1:
        assert len(result.output.strip().splitlines()) == 1


def test_predict_bad_files(tiny_sam_artifacts: TinySamArtifacts, image_file: Path, tmp_path: Path) -> None:
    enc, dec = str(tiny_sam_artifacts.encoder), str(tiny_sam_artifacts.decoder)
    cases = [
        (["-e", dec, "-d", dec, "-i", str(image_file), "-o", str(tmp_path / "m.png")], "not a SAM image encoder"),
        (["-e", enc, "-d", enc, "-i", str(image_file), "-o", str(tmp_path / "m.png")], "not a SAM mask decoder"),
        (["-e", enc, "-d", dec, "-i", str(tmp_path / "missing.png"), "-o", str(tmp_path / "m.png")], "not found"),
        (["-e", enc, "-d", dec, "-i", str(image_file), "-o", str(tmp_path / "m.jpg")], "must be a .png"),
        (["-e", enc, "-d", dec, "-i", str(image_file), "-o", str(tmp_path / "no_dir" / "m.png")], "does not exist"),
        (["-e", enc, "-d", dec, "-i", str(image_file), "-o", str(tmp_path / "m.png"), "--overlay", str(tmp_path / "m.png")],
         "same file"),
    ]
    for args, message in cases:
        result = _invoke("predict", *args, "--point", "3,4")
        assert result.exit_code == 1 and message in result.output, (args, result.output)
    assert sorted(tmp_path.glob("*.png")) == [image_file]


def test_export_and_validate_decoder_recipe(tiny_sam_artifacts: TinySamArtifacts, tmp_path: Path) -> None:
    """The decoder artifact the pipeline wrote validates against the official modules (multi-input feeds)."""
    result = _invoke("validate", str(tiny_sam_artifacts.decoder), "--random-inputs", "2", "--runs", "1", "--threads", "1")
    assert result.exit_code == 0, result.output
    assert "prompt0/low_res_masks" in result.output and "prompt1/iou_predictions" in result.output
    assert "all comparisons within tolerance" in result.output
    bad = _invoke("validate", str(tiny_sam_artifacts.decoder), "--images", str(tmp_path))
    assert bad.exit_code == 1 and "not images" in bad.output
    for extra, message in ((["--dynamic-batch"], "do not apply to the mask decoder"), (["--image-size", "60"], "multiple of the encoder patch size 8")):
        out = tmp_path / "d.onnx"
        result = _invoke("export", "-r", str(tiny_sam_artifacts.decoder_recipe), "--random-weights", "-o", str(out), *extra)
        assert result.exit_code == 1 and message in result.output and not out.exists(), result.output


def test_export_and_validate_timm_recipe_with_checkpoint(tmp_path: Path) -> None:
    import torch

    from vitdeploy.models.timm_vit import TimmVitArch, load_timm_vit

    recipe = tmp_path / "tiny_vit.toml"
    recipe.write_text(TINY_TIMM_RECIPE)
    arch = TimmVitArch(kwargs={"img_size": 32, "patch_size": 8, "embed_dim": 32, "depth": 2, "num_heads": 2,
                               "num_classes": 10, "class_token": False, "global_pool": "avg"})
    checkpoint = tmp_path / "tiny_vit.pth"
    torch.save({"model": load_timm_vit(arch, random_seed=4).state_dict()}, checkpoint)
    out = tmp_path / "vit.onnx"
    result = _invoke("export", "-r", str(recipe), "-c", str(checkpoint), "--image-size", "48", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert "'image': [1, 3, 48, 48]" in result.output and "'logits': [1, 10]" in result.output
    result = _invoke("validate", str(out), "-c", str(checkpoint), "--runs", "1", "--threads", "1")
    assert result.exit_code == 0 and "random1/logits" in result.output, result.output
    missing = _invoke("validate", str(out), "--runs", "0")
    assert missing.exit_code == 1 and "pass it with --checkpoint" in missing.output


def test_a_saved_embedding_gives_the_same_mask_without_the_encoder(tiny_sam_artifacts: TinySamArtifacts, image_file: Path,
                                                                   tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    enc, dec = str(tiny_sam_artifacts.encoder), str(tiny_sam_artifacts.decoder)
    emb = tmp_path / "photo.npz"
    first = _invoke("predict", "-e", enc, "-d", dec, "-i", str(image_file), "-p", "30,25", "-o", str(tmp_path / "a.png"),
                    "--save-embedding", str(emb))
    assert first.exit_code == 0 and emb.is_file(), first.output
    from vitdeploy.runtime.sam_predictor import SamPredictor as Predictor

    def no_encoder(*_a, **_k):
        raise AssertionError("the encoder ran although an embedding was given")

    monkeypatch.setattr(Predictor, "set_image", no_encoder)
    again = _invoke("predict", "-e", enc, "-d", dec, "-i", str(image_file), "-p", "30,25", "-o", str(tmp_path / "b.png"),
                    "--embedding", str(emb))
    assert again.exit_code == 0 and "encoder not run" in again.output, again.output
    assert np.array_equal(np.asarray(Image.open(tmp_path / "a.png")), np.asarray(Image.open(tmp_path / "b.png")))
    # another image, or an encoder of other weights: refused by name
    other = tmp_path / "other.png"
    Image.fromarray(sample_image(48, 80, seed=4)).save(other)
    wrong_image = CliRunner().invoke(cli, ["predict", "-e", enc, "-d", dec, "-i", str(other), "-p", "3,3", "-o",
                                           str(tmp_path / "c.png"), "--embedding", str(emb)])
    assert wrong_image.exit_code == 1 and "was computed for another image ('photo.png')" in wrong_image.output
    from vitdeploy.runtime.embeddings import load_embedding

    with pytest.raises(Exception, match="computed by another encoder"):
        load_embedding(emb, image_path=image_file, encoder_metadata={**Predictor(enc, dec).encoder.metadata, "random_seed": 99})


def test_validate_compares_on_saved_inputs_npz_and_polygraphy_json(tiny_sam_artifacts: TinySamArtifacts, tmp_path: Path) -> None:
    """validate --load-inputs, as Polygraphy's: the decoder on prompts a user saved (npz) or polygraphy wrote (json)."""
    from polygraphy.json import save_json

    from vitdeploy.validation.family_inputs import decoder_prompt_feeds
    from vitdeploy.metadata import read_onnx_metadata

    decoder = str(tiny_sam_artifacts.decoder)
    feeds = decoder_prompt_feeds(read_onnx_metadata(decoder), 4, seed=7)
    npz = tmp_path / "prompts.npz"
    np.savez(npz, **feeds)
    js = tmp_path / "prompts.json"
    save_json([feeds, decoder_prompt_feeds(read_onnx_metadata(decoder), 3, seed=8)], str(js))
    result = _invoke("validate", decoder, "--random-inputs", "0", "--load-inputs", str(npz), "--load-inputs", str(js),
                     "--runs", "0")
    assert result.exit_code == 0, result.output
    assert "prompts.npz/low_res_masks" in result.output and "prompts.json[1]/low_res_masks" in result.output
    assert "all comparisons within tolerance" in result.output
    np.savez(tmp_path / "wrong.npz", image=np.zeros((1, 3, 64, 64), np.float32))
    wrong = CliRunner().invoke(cli, ["validate", decoder, "--load-inputs", str(tmp_path / "wrong.npz"), "--runs", "0"])
    assert wrong.exit_code == 1 and "holds ['image'], the model takes" in wrong.output, wrong.output
