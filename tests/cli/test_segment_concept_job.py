"""``vitdeploy segment-concept --images --out-dir``: a text prompt over a dataset, in shards with a manifest, each image's
instances those ``Sam3Processor`` finds; resumable; the options of one image refused for a job."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_helpers import assert_user_error, run
from tests.sam3_fixtures import sam3_tiny_files_with_vocab

pytest.importorskip("sam3", reason="the official sam3 package is not installed (scripts/test.sh installs it)")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return sam3_tiny_files_with_vocab(tmp_path_factory)


def photos(folder: Path) -> list[Path]:
    from vitdeploy.precision.calibration_data import bundled_calibration_dir

    folder.mkdir()
    for source in sorted(bundled_calibration_dir().glob("calib_0[0-4]*")):
        (folder / source.name).write_bytes(source.read_bytes())
    (folder / "broken.jpg").write_bytes(b"not an image")
    return sorted(folder.iterdir())


def job_args(files, images: Path, out: Path, *extra: str) -> list[str]:
    return ["segment-concept", "-V", str(files[0]), "-T", str(files[1]), "-D", str(files[2]), "--images", str(images),
            "--out-dir", str(out), "--text", "dog", "--threshold", "0.1", "--runtime", "onnxruntime", "--threads", "1",
            *extra]


def test_a_job_writes_each_images_instances_and_resumes(files, tmp_path: Path) -> None:
    from vitdeploy.runtime.apps.sam3.processor import Sam3ImageModel, Sam3Processor
    from vitdeploy.runtime.processing.images import read_image_rgb

    paths = photos(tmp_path / "imgs")
    code, output = run(*job_args(files, tmp_path / "imgs", tmp_path / "out", "--shard-size", "2"))
    assert code == 0, output
    lines = [json.loads(line) for shard in sorted((tmp_path / "out").glob("concepts-*.jsonl"))
             for line in shard.read_text().splitlines()]
    assert sorted(line["image"] for line in lines) == sorted(str(p) for p in paths if p.name != "broken.jpg")
    errors = (tmp_path / "out" / "errors.jsonl").read_text()
    assert "broken.jpg" in errors
    processor = Sam3Processor(Sam3ImageModel(*files, runtime="onnxruntime", threads=1), confidence_threshold=0.1)
    for line in lines:
        state = processor.set_text_prompt(state=processor.set_image(read_image_rgb(line["image"])), prompt="dog")
        assert [r["score"] for r in line["instances"]] == pytest.approx(state["scores"].tolist(), abs=1e-6)
    again = run(*job_args(files, tmp_path / "imgs", tmp_path / "out", "--shard-size", "2"))
    assert again[0] == 0 and "finding instances in 1 of 6 image(s), 5 done before (skipped)" in again[1], again[1]


@pytest.mark.parametrize(("extra", "code", "message"), [
    (["--box", "1,1,20,20"], 2, "--box and --record-inputs are for --image"),
    (["-o", "x.json"], 2, "give either --image and --output"),
    (["--text", "  "], 1, "the text prompt is empty"),
], ids=["box", "output", "empty-text"])
def test_what_a_job_does_not_take_is_refused(files, tmp_path: Path, extra: list[str], code: int, message: str) -> None:
    """A combination the command line cannot take is a usage error (exit 2, as every verb's); a bad prompt exit 1."""
    photos(tmp_path / "imgs")
    got, output = run(*job_args(files, tmp_path / "imgs", tmp_path / "out"), *extra)
    if code == 1:
        assert_user_error(got, output, message)
    else:
        assert got == 2 and message in output and "Traceback" not in output, output
    assert not (tmp_path / "out").exists()


def test_a_job_takes_exemplar_boxes_per_image_from_a_prompts_file(files, tmp_path: Path) -> None:
    """``--prompts FILE``: each named image's boxes (and text, or --text), the same instances Sam3Processor finds
    with them; an image without an entry is left out; a box outside its image is that image's recorded error, and the
    job goes on."""
    from vitdeploy.runtime.apps.sam3.concept import ConceptPrompt, find_instances
    from vitdeploy.runtime.apps.sam3.processor import Sam3ImageModel, Sam3Processor
    from vitdeploy.runtime.processing.images import read_image_rgb

    paths = [p for p in photos(tmp_path / "imgs") if p.name != "broken.jpg"]
    entries = {paths[0].name: {"boxes": [[10, 20, 90, 100]]},
               paths[1].name: {"text": "a shape", "boxes": [[5, 5, 60, 50]], "negative_boxes": [[70, 60, 100, 90]]},
               paths[2].name: {"boxes": [[10, 10, 99999, 20]]}}
    (tmp_path / "prompts.json").write_text(json.dumps(entries))
    code, output = run(*job_args(files, tmp_path / "imgs", tmp_path / "out", "--prompts", str(tmp_path / "prompts.json"),
                                 "--threshold", "0"))
    assert code == 0, output
    assert f"{len(paths) + 1 - 3} image(s) without an entry in prompts.json left out" in output, output
    lines = {Path(json.loads(line)["image"]).name: json.loads(line) for shard in (tmp_path / "out").glob("concepts-*.jsonl")
             for line in shard.read_text().splitlines()}
    assert sorted(lines) == sorted([paths[0].name, paths[1].name])
    assert paths[2].name in (tmp_path / "out" / "errors.jsonl").read_text()
    processor = Sam3Processor(Sam3ImageModel(*files, runtime="onnxruntime", threads=1), confidence_threshold=0.0)
    wanted = {paths[0].name: ConceptPrompt("dog", ((10, 20, 90, 100),), (True,)),
              paths[1].name: ConceptPrompt("a shape", ((5, 5, 60, 50), (70, 60, 100, 90)), (True, False))}
    for name, prompt in wanted.items():
        state = find_instances(processor, read_image_rgb(tmp_path / "imgs" / name), prompt)
        got = [r["score"] for r in lines[name]["instances"]]
        assert len(got) == 8 and got == pytest.approx(state["scores"].tolist(), abs=1e-6)  # every query (threshold 0)
    text_only = find_instances(processor, read_image_rgb(paths[0]), ConceptPrompt("dog"))["scores"]
    boxed = [r["score"] for r in lines[paths[0].name]["instances"]]
    assert max(abs(a - b) for a, b in zip(text_only, boxed)) > 1e-3  # the box reached the detector


@pytest.mark.parametrize(("entries", "message"), [
    ({"nowhere.jpg": {"boxes": [[1, 1, 5, 5]]}}, "names 'nowhere.jpg', which is not one of the images"),
    ({"calib_00_landscape.jpg": {"box": [1, 1, 5, 5]}}, "must be an object with 'text', 'boxes'"),
    ({"calib_00_landscape.jpg": {"boxes": [[1, 1, 5]]}}, "'boxes' must be a list of [x0, y0, x1, y1]"),
    ({"calib_00_landscape.jpg": {"negative_boxes": []}}, "has no text and no box"),
], ids=["unknown-image", "unknown-key", "short-box", "empty"])
def test_a_bad_prompts_file_is_refused_before_the_job(files, tmp_path: Path, entries: dict, message: str) -> None:
    photos(tmp_path / "imgs")
    (tmp_path / "prompts.json").write_text(json.dumps(entries))
    args = job_args(files, tmp_path / "imgs", tmp_path / "out", "--prompts", str(tmp_path / "prompts.json"))
    args.remove("--text"), args.remove("dog")
    code, output = run(*args)
    assert_user_error(code, output, message)
    assert not (tmp_path / "out").exists()
