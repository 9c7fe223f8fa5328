"""CLI: ``vitdeploy predict`` (mask PNG + overlay, bad input), and ``export``/``validate`` on the new families."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from tests.conftest import TINY_TIMM_RECIPE
from tests.sam_tiny import TinySamArtifacts, sample_image
from vitdeploy.cli import cli
from vitdeploy.runtime import SamPredictor

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
    for extra, message in ((["--dynamic-batch"], "do not apply to the mask decoder"), (["--input-size", "60"], "multiple of the encoder patch size 8")):
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
    result = _invoke("export", "-r", str(recipe), "-c", str(checkpoint), "--input-size", "48", "-o", str(out))
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
    from vitdeploy.runtime.apps.sam.predictor import SamPredictor as Predictor

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
    from vitdeploy.runtime.apps.sam.embeddings import load_embedding

    with pytest.raises(Exception, match="computed by another encoder"):
        load_embedding(emb, image_path=image_file, encoder_metadata={**Predictor(enc, dec).encoder.metadata, "random_seed": 99})


def test_validate_compares_on_saved_inputs_npz_and_polygraphy_json(tiny_sam_artifacts: TinySamArtifacts, tmp_path: Path) -> None:
    """validate --load-inputs, as Polygraphy's: the decoder on prompts a user saved (npz) or polygraphy wrote (json)."""
    from polygraphy.json import save_json

    from vitdeploy.runtime.processing.input_sets import decoder_prompt_feeds
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


@pytest.fixture
def image_folder(tmp_path: Path) -> Path:
    """Three images of different sizes (a 16-bit grey PNG among them)."""
    folder = tmp_path / "photos"
    folder.mkdir()
    Image.fromarray(sample_image(48, 80, seed=3)).save(folder / "a.png")
    Image.fromarray(sample_image(64, 40, seed=4)).save(folder / "b.jpg", quality=95)
    grey = (np.linspace(0, 4000, 50 * 60).reshape(50, 60)).astype(np.uint16)
    Image.fromarray(grey).save(folder / "c.png")
    (folder / "notes.txt").write_text("not an image")
    return folder


def _expected_mask(artifacts: TinySamArtifacts, image: Path, points: list, box: list | None, multimask: bool) -> np.ndarray:
    from vitdeploy.runtime.processing.images import read_image_rgb

    predictor = SamPredictor(artifacts.encoder, artifacts.decoder, threads=1)
    predictor.set_image(read_image_rgb(image))
    coords = np.array([p[:2] for p in points], dtype=np.float64) if points else None
    labels = np.array([p[2] if len(p) == 3 else 1 for p in points]) if points else None
    masks, scores, _ = predictor.predict(coords, labels, np.array(box, dtype=np.float64) if box else None, multimask_output=multimask)
    return masks[int(np.argmax(scores))]


def test_predict_folder_same_box_for_every_image(tiny_sam_artifacts: TinySamArtifacts, image_folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "masks"  # created by predict
    result = _invoke("predict", "-e", str(tiny_sam_artifacts.encoder), "-d", str(tiny_sam_artifacts.decoder),
                     "-i", str(image_folder), "--box", "5,6,38,40", "-o", str(out), "--report", str(tmp_path / "r.json"))
    assert result.exit_code == 0, result.output
    assert "3 image(s): 3 mask(s)" in result.output and "c.png: " in result.output
    assert sorted(p.name for p in out.iterdir()) == ["a.overlay.png", "a.png", "b.overlay.png", "b.png", "c.overlay.png", "c.png"]
    for name in ("a.png", "b.jpg", "c.png"):
        written = np.asarray(Image.open(out / (Path(name).stem + ".png"))) == 255
        assert np.array_equal(written, _expected_mask(tiny_sam_artifacts, image_folder / name, [], [5, 6, 38, 40], False)), name
    report = json.loads((tmp_path / "r.json").read_text())
    assert [Path(r["image"]).name for r in report["images"]] == ["a.png", "b.jpg", "c.png"]
    assert all(r["prompt"]["box"] == [5, 6, 38, 40] and len(r["scores"]) == 1 for r in report["images"])


def test_record_inputs_keeps_the_decoders_inputs_for_calibrate(tiny_sam_artifacts: TinySamArtifacts, image_folder: Path,
                                                               tmp_path: Path) -> None:
    """``predict --record-inputs FILE``: the decoder's input set of each prompt (one per image here), what ``calibrate
    --feeds`` takes; refused without a prompt, nothing written."""
    from vitdeploy.runtime.processing.recorded_inputs import load_recorded_inputs

    recorded = tmp_path / "decoder_inputs.npz"
    result = _invoke("predict", "-e", str(tiny_sam_artifacts.encoder), "-d", str(tiny_sam_artifacts.decoder),
                     "-i", str(image_folder), "--box", "5,6,38,40", "-o", str(tmp_path / "masks"),
                     "--record-inputs", str(recorded))
    assert result.exit_code == 0, result.output
    assert "recorded 3 of 3 mask_decoder input set(s)" in result.output, result.output
    samples, meta = load_recorded_inputs(recorded)
    assert len(samples) == 3 and meta["graph"] == "mask_decoder" and meta["file"] == str(tiny_sam_artifacts.decoder)
    predictor = SamPredictor(tiny_sam_artifacts.encoder, tiny_sam_artifacts.decoder, threads=1)
    predictor.set_image(np.asarray(Image.open(image_folder / "a.png").convert("RGB")))
    assert sorted(samples[0]) == sorted(predictor.decoder.input_names)
    np.testing.assert_array_equal(samples[0]["image_embeddings"], predictor.get_image_embedding())
    result = _invoke("calibrate", str(tiny_sam_artifacts.decoder), "-p", "fp16", "--feeds", str(recorded), "--holdout", "1",
                     "-o", str(tmp_path / "decoder.fp16.onnx"))
    assert result.exit_code == 0 and (tmp_path / "decoder.fp16.onnx").is_file(), result.output
    result = _invoke("predict", "-e", str(tiny_sam_artifacts.encoder), "-d", str(tiny_sam_artifacts.decoder),
                     "-i", str(image_folder / "a.png"), "--save-embedding", str(tmp_path / "a.npz"),
                     "--record-inputs", str(tmp_path / "none.npz"))
    assert result.exit_code == 1 and "--record-inputs keeps the decoder's inputs: give a prompt" in result.output
    assert not (tmp_path / "none.npz").exists() and not (tmp_path / "a.npz").exists()


def test_predict_folder_with_a_prompts_file_and_saved_embeddings(tiny_sam_artifacts: TinySamArtifacts, image_folder: Path,
                                                                 tmp_path: Path) -> None:
    enc, dec = str(tiny_sam_artifacts.encoder), str(tiny_sam_artifacts.decoder)
    # Encode only (no prompt): one embedding per image.
    result = _invoke("predict", "-e", enc, "-d", dec, "-i", str(image_folder), "--save-embedding", str(tmp_path / "emb"))
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "emb").iterdir()) == ["a.npz", "b.npz", "c.npz"]
    prompts = {"a.png": {"points": [[30, 25], [60, 33, 0]]}, "c.png": {"points": [[20, 20]], "box": [2, 3, 50, 45]}}
    (tmp_path / "clicks.json").write_text(json.dumps(prompts))
    result = _invoke("predict", "-e", enc, "-d", dec, "-i", str(image_folder), "--prompts", str(tmp_path / "clicks.json"),
                     "--embedding", str(tmp_path / "emb"), "-o", str(tmp_path / "masks"))
    assert result.exit_code == 0, result.output
    assert "1 image(s) without an entry in clicks.json left out: b.jpg" in result.output
    assert result.output.count("(encoder not run)") == 2
    assert sorted(p.name for p in (tmp_path / "masks").glob("?.png")) == ["a.png", "c.png"]
    for name, entry in prompts.items():
        written = np.asarray(Image.open(tmp_path / "masks" / name)) == 255
        expected = _expected_mask(tiny_sam_artifacts, image_folder / name, entry["points"], entry.get("box"), False)
        assert np.array_equal(written, expected), name


@pytest.mark.parametrize("case,message", [
    ("corrupt", "cannot be decoded"),
    ("outside", "b.jpg: point (65, 10) is outside the 40x64 image"),
    ("unknown", "names 1 image(s) not in"),
    ("collision", "would write the same outputs"),
    ("existing", "already exists: pass --force"),
    ("output_png", "looks like a file"),
])
def test_predict_folder_checks_everything_before_encoding(tiny_sam_artifacts: TinySamArtifacts, image_folder: Path,
                                                         tmp_path: Path, case: str, message: str) -> None:
    out = tmp_path / "masks"
    args = ["--point", "65,10"] if case == "outside" else ["--point", "5,5"]
    if case == "corrupt":
        (image_folder / "d.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
    if case == "unknown":
        (tmp_path / "p.json").write_text(json.dumps({"a.png": {"points": [[5, 5]]}, "zz.png": {"points": [[1, 1]]}}))
        args = ["--prompts", str(tmp_path / "p.json")]
    if case == "collision":
        Image.fromarray(sample_image(20, 20, seed=5)).save(image_folder / "a.jpg")
    if case == "existing":
        out.mkdir()
        (out / "b.png").write_bytes(b"keep me")
    result = _invoke("predict", "-e", str(tiny_sam_artifacts.encoder), "-d", str(tiny_sam_artifacts.decoder),
                     "-i", str(image_folder), *args, "-o", str(out / "x.png") if case == "output_png" else str(out))
    assert result.exit_code == 1 and message in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1 and "encoding" not in result.output
    written = sorted(p.name for p in out.iterdir()) if out.exists() else []
    assert written == (["b.png"] if case == "existing" else [])
    if case == "existing":
        assert (out / "b.png").read_bytes() == b"keep me"
