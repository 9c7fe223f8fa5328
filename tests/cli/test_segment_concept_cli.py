"""``vitdeploy segment-concept`` on the tiny SAM 3 model: the files it writes hold what ``Sam3Processor`` found, and every
bad input is refused in one line with nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.cli_helpers import assert_user_error, run
from tests.sam3_fixtures import sam3_tiny_files_with_vocab

pytest.importorskip("sam3", reason="the official sam3 package is not installed (scripts/test.sh installs it)")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return sam3_tiny_files_with_vocab(tmp_path_factory)


def image_path(name: str = "calib_06_shapes.jpg") -> Path:
    from vitdeploy.precision.calibration_data import bundled_calibration_dir

    return bundled_calibration_dir() / name


def model_args(files) -> list[str]:
    return ["-V", str(files[0]), "-T", str(files[1]), "-D", str(files[2]), "--runtime", "onnxruntime"]


def test_one_image_writes_the_processors_instances(files, tmp_path: Path) -> None:
    """The JSON's instances are Sam3Processor's (scores, boxes), their RLE decodes to its masks; the label PNG holds
    each instance's number where its mask is (the higher score on top)."""
    from PIL import Image

    from pycocotools import mask as coco

    from vitdeploy.runtime.apps.sam3.processor import Sam3ImageModel, Sam3Processor
    from vitdeploy.runtime.processing.images import read_image_rgb

    out = tmp_path / "shapes.json"
    code, output = run("segment-concept", *model_args(files), "-i", str(image_path()), "--text", "a shape",
                       "--box", "10,20,90,100", "--threshold", "0", "-o", str(out))
    assert code == 0, output
    data = json.loads(out.read_text())
    picture = read_image_rgb(image_path())
    processor = Sam3Processor(Sam3ImageModel(*files, runtime="onnxruntime"), confidence_threshold=0.0)
    state = processor.set_image(picture)
    state = processor.set_text_prompt(state=state, prompt="a shape")
    h, w = picture.shape[:2]
    state = processor.add_geometric_prompt([50 / w, 60 / h, 80 / w, 80 / h], True, state)
    assert len(data["instances"]) == len(state["scores"]) > 0
    assert data["prompt"] == {"text": "a shape", "boxes": [[10.0, 20.0, 90.0, 100.0]], "labels": [True]}
    labels = np.asarray(Image.open(out.with_name("shapes.masks.png")))
    for k, record in enumerate(data["instances"]):
        assert record["score"] == pytest.approx(float(state["scores"][k]), abs=1e-6)
        np.testing.assert_allclose(record["bbox_xyxy"], state["boxes"][k], atol=1e-3)
        decoded = coco.decode({"size": record["segmentation"]["size"],
                               "counts": record["segmentation"]["counts"].encode()}).astype(bool)
        np.testing.assert_array_equal(decoded, state["masks"][k, 0])
        assert record["area"] == int(decoded.sum())
        top = int(np.argmax(state["scores"]))
        if k == top:
            assert np.all(labels[decoded] == k + 1)
    assert Image.open(out.with_name("shapes.overlay.png")).size == (w, h)


def test_a_folder_writes_one_set_per_image(files, tmp_path: Path) -> None:
    folder = tmp_path / "photos"
    folder.mkdir()
    for name in ("calib_00_landscape.jpg", "calib_06_shapes.jpg"):
        (folder / name).write_bytes(image_path(name).read_bytes())
    out = tmp_path / "found"
    code, output = run("segment-concept", *model_args(files), "-i", str(folder), "--text", "dog", "--threshold", "0",
                       "-o", str(out))
    assert code == 0, output
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"{stem}{suffix}" for stem in ("calib_00_landscape", "calib_06_shapes")
        for suffix in (".json", ".masks.png", ".overlay.png"))
    assert len(json.loads((out / "calib_00_landscape.json").read_text())["instances"]) == 8  # threshold 0: every query


@pytest.mark.parametrize(("extra", "message"), [
    ([], "no prompt: give --text"),
    (["--text", "   "], "the text prompt is empty"),
    (["--text", "word " * 40], "takes 42 tokens but SAM 3's text encoder reads 32"),
    (["--box", "10,10,5,40"], "is not inside 'calib_06_shapes.jpg'"),
    (["--text", "dog", "--negative-box", "0,0,99999,10"], "is not inside 'calib_06_shapes.jpg'"),
], ids=["no-prompt", "empty-text", "long-text", "inverted-box", "box-outside"])
def test_bad_prompts_are_refused_with_nothing_written(files, tmp_path: Path, extra: list[str], message: str) -> None:
    out = tmp_path / "x.json"
    code, output = run("segment-concept", *model_args(files), "-i", str(image_path()), *extra, "-o", str(out))
    assert_user_error(code, output, message)
    assert list(tmp_path.iterdir()) == []


def test_files_that_are_not_one_sam3_model_are_refused(files, tmp_path: Path) -> None:
    vision, text, detector = files
    out = tmp_path / "x.json"
    code, output = run("segment-concept", "-V", str(detector), "-T", str(text), "-D", str(vision), "-i",
                       str(image_path()), "--text", "dog", "-o", str(out), "--runtime", "onnxruntime")
    assert_user_error(code, output, "the vision encoder is SAM 3's detector, not SAM 3's vision encoder")
    code, output = run("segment-concept", *model_args(files), "-i", str(image_path()), "--text", "dog",
                       "-o", str(tmp_path / "x.png"))
    assert_user_error(code, output, "must be a .json file")
    assert list(tmp_path.iterdir()) == []


def test_a_folder_takes_a_prompt_per_image_from_a_prompts_file(files, tmp_path: Path) -> None:
    """``-i FOLDER --prompts FILE``: each named image with its own boxes (the text from --text where the entry has
    none), written as one image with the same prompt writes it; images without an entry left out; --prompts with one
    image or beside --box refused (exit 2, nothing written)."""
    folder = tmp_path / "imgs"
    folder.mkdir()
    for name in ("calib_00_landscape.jpg", "calib_06_shapes.jpg", "calib_02_texture.jpg"):
        (folder / name).write_bytes(image_path(name).read_bytes())
    (tmp_path / "p.json").write_text(json.dumps({"calib_06_shapes.jpg": {"boxes": [[10, 20, 90, 100]]},
                                                 "calib_00_landscape.jpg": {"text": "a tree", "negative_boxes": [[5, 5, 40, 40]]}}))
    code, output = run("segment-concept", *model_args(files), "-i", str(folder), "--prompts", str(tmp_path / "p.json"),
                       "--text", "a shape", "--threshold", "0", "-o", str(tmp_path / "out"))
    assert code == 0 and "1 image(s) without an entry in p.json left out" in output, output
    assert sorted(p.name for p in (tmp_path / "out").glob("*.json")) == ["calib_00_landscape.json", "calib_06_shapes.json"]
    code, output = run("segment-concept", *model_args(files), "-i", str(folder / "calib_06_shapes.jpg"), "--text",
                       "a shape", "--box", "10,20,90,100", "--threshold", "0", "-o", str(tmp_path / "one.json"))
    assert code == 0, output
    one, from_file = (json.loads(p.read_text()) for p in (tmp_path / "one.json", tmp_path / "out" / "calib_06_shapes.json"))
    assert from_file["prompt"] == one["prompt"]
    assert [r["score"] for r in from_file["instances"]] == [r["score"] for r in one["instances"]]
    landscape = json.loads((tmp_path / "out" / "calib_00_landscape.json").read_text())["prompt"]
    assert landscape == {"text": "a tree", "boxes": [[5.0, 5.0, 40.0, 40.0]], "labels": [False]}
    for extra in (["-i", str(folder / "calib_06_shapes.jpg"), "-o", str(tmp_path / "x.json")],
                  ["-i", str(folder), "--box", "1,1,9,9", "-o", str(tmp_path / "y")]):
        code, output = run("segment-concept", *model_args(files), "--prompts", str(tmp_path / "p.json"), *extra)
        assert code == 2 and "--prompts" in output and "Traceback" not in output, output
    assert not (tmp_path / "x.json").exists() and not (tmp_path / "y").exists()
