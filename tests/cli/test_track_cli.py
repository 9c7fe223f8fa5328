"""``vitdeploy track``: SAM 2's four graphs over a frame folder from clicks and boxes on chosen frames; what it writes
(palette PNGs, COCO RLE, the overlay) holds the masks the Python predictor gives, and bad input gets one line, exit 1,
and no output folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.cli_helpers import assert_user_error, run
from tests.sam2_video_fixtures import FRAMES, write_clip

pytest.importorskip("sam2", reason="the official sam2 package is not installed (scripts/test.sh installs it)")
pytest_plugins = ["tests.sam2_video_fixtures", "tests.sam_tiny_fixtures"]


def files_args(files: dict[str, Any], **replace: Path) -> list[str]:
    chosen = {k: replace.get(k, files[k]) for k in ("encoder", "decoder", "memory_encoder", "memory_attention")}
    return ["-e", str(chosen["encoder"]), "-d", str(chosen["decoder"]), "-m", str(chosen["memory_encoder"]),
            "-a", str(chosen["memory_attention"]), "--threads", "2"]


def test_track_writes_the_predictors_masks(sam2_video: dict[str, Any], tmp_path: Path) -> None:
    from pycocotools import mask as coco_mask
    from PIL import Image

    from vitdeploy.runtime.apps.sam2.video_predictor import Sam2VideoPredictor
    from vitdeploy.runtime.apps.verbs.tracking import FramePrompt, track

    out = tmp_path / "tracks"
    code, output = run("track", *files_args(sam2_video), "-i", str(sam2_video["clip"]), "--point", "0:1:25,45",
                       "--box", "10:2:100,25,130,50", "-o", str(out), "--report", str(tmp_path / "report.json"))
    assert code == 0, output
    assert f"tracked 2 object(s) over {FRAMES} frame(s)" in output
    assert sorted(p.name for p in out.iterdir()) == ["masks", "masks.json", "overlay.gif"]
    data = json.loads((out / "masks.json").read_text())
    assert data["object_ids"] == [1, 2] and data["frames_tracked"] == FRAMES and len(data["annotations"]) == 2 * FRAMES
    with Image.open(out / "overlay.gif") as gif:
        assert gif.n_frames == FRAMES

    predictor = Sam2VideoPredictor(sam2_video["encoder"], sam2_video["decoder"], sam2_video["memory_encoder"],
                                   sam2_video["memory_attention"], threads=2)
    state = predictor.init_state(sam2_video["clip"])
    prompts = [FramePrompt(0, 1, points=[(25.0, 45.0, 1)]), FramePrompt(10, 2, box=(100.0, 25.0, 130.0, 50.0))]
    expected = {frame: logits[:, 0] > 0 for frame, _, logits, _ in track(predictor, state, prompts)}
    assert sorted(expected) == list(range(FRAMES))
    for entry in data["annotations"]:
        mask = expected[entry["frame"]][entry["object_id"] - 1]
        decoded = coco_mask.decode({"size": entry["segmentation"]["size"],
                                    "counts": entry["segmentation"]["counts"].encode()}).astype(bool)
        assert np.array_equal(decoded, mask), entry["frame"]
        assert entry["area"] == int(mask.sum()) and entry["object_score"] > 0
    for frame, masks in expected.items():
        label = np.asarray(Image.open(out / "masks" / f"{frame:05d}.png"))
        assert np.array_equal(label > 0, masks.any(axis=0)) and set(np.unique(label)) <= {0, 1, 2}
        assert np.all(masks[0][label == 1]) and np.all(masks[1][label == 2])


def test_track_refuses_bad_input_and_writes_nothing(sam2_video: dict[str, Any], tiny_sam_artifacts, tmp_path: Path) -> None:
    from vitdeploy.pipeline import export_from_recipe

    out = tmp_path / "tracks"
    clip = sam2_video["clip"]
    cases = [
        (files_args(sam2_video, encoder=tiny_sam_artifacts.encoder), ["-i", str(clip), "-p", "0:1:25,45"],
         ("the image encoder is a 'sam_image_encoder' model", "SAM 1 has no video predictor")),
        (files_args(sam2_video), ["-i", str(clip), "-p", f"{FRAMES}:1:25,45"],
         (f"object 1 on frame {FRAMES}: there is no frame {FRAMES}", f"it has frames 0-{FRAMES - 1}")),
        (files_args(sam2_video), ["-i", str(clip), "-p", "3:1:500,45"], ("object 1 on frame 3", "outside")),
        (files_args(sam2_video), ["-i", str(clip), "-p", "0:300:25,45"], ("object id 300 is not in 1..255",)),
        (files_args(sam2_video), ["-i", str(tmp_path / "missing"), "-p", "0:1:25,45"], ("no video or frame folder at",)),
    ]
    export_from_recipe("sam2_tiny_memory_attention", tmp_path / "other_attention.onnx", random_weights=True, seed=11)
    cases.append((files_args(sam2_video, memory_attention=tmp_path / "other_attention.onnx"),
                  ["-i", str(clip), "-p", "0:1:25,45"], ("come from two different SAM 2 models",)))
    broken = write_clip(tmp_path / "broken", frames=6)
    (broken / "00003.jpg").write_bytes(b"\xff\xd8\xff not a frame")
    cases.append((files_args(sam2_video), ["-i", str(broken), "-p", "0:1:25,45"], ("frame 3 ('00003.jpg') cannot be read",)))
    for models, rest, needles in cases:
        code, output = run("track", *models, *rest, "-o", str(out))
        assert_user_error(code, output, *needles)
        assert not out.exists(), needles
        assert not any(p.name.startswith(".vitdeploy-track") for p in tmp_path.iterdir()), needles
    out.mkdir()
    code, output = run("track", *files_args(sam2_video), "-i", str(clip), "-p", "0:1:25,45", "-o", str(out))
    assert_user_error(code, output, "already exists", "--force")
    code, output = run("track", *files_args(sam2_video), "-i", str(clip), "-p", "0:1:25", "-o", str(tmp_path / "x"))
    assert code == 2 and "X,Y" in output


def test_sam1_and_sam2_files_are_not_mixed(sam2_video: dict[str, Any], tiny_sam_artifacts, tmp_path: Path) -> None:
    """A SAM 2 file where SAM 1 files are taken (and a SAM 2 decoder beside a SAM 1 encoder) says what takes it."""
    images = Path(__file__).resolve().parents[2] / "calibration" / "images"
    image = str(images / "calib_00_landscape.jpg")
    code, output = run("embed", "-e", str(sam2_video["encoder"]), "--images", str(images), "--out-dir", str(tmp_path / "emb"))
    assert_user_error(code, output, "a SAM 2 file", "embed and segment-all --images take SAM 1 files")
    code, output = run("predict", "-e", str(tiny_sam_artifacts.encoder), "-d", str(sam2_video["decoder"]), "-i", image,
                       "-p", "10,10", "-o", str(tmp_path / "m.png"))
    assert_user_error(code, output, "a SAM 2 decoder beside a SAM 1 encoder")
    assert not (tmp_path / "emb").exists() and not (tmp_path / "m.png").exists()


def test_a_gap_in_the_frame_numbers_keeps_every_mask_on_its_frame(sam2_video: dict[str, Any], tmp_path: Path) -> None:
    """Frames 0-7 without 00004.jpg (it tracked 7 frames and wrote masks/00004.png for 00005.jpg, and '--point 5:...'
    landed on 00006.jpg): masks are named after their frames, FRAME is the number in a frame's name, the gap is said
    in one line, and --strict refuses it; a frame that is not there is named with the frames that are."""
    from PIL import Image

    from vitdeploy.runtime.apps.sam2.video_predictor import Sam2VideoPredictor
    from vitdeploy.runtime.apps.verbs.tracking import FramePrompt, track

    clip = write_clip(tmp_path / "clip", frames=8)
    (clip / "00004.jpg").unlink()
    out = tmp_path / "tracks"
    code, output = run("track", *files_args(sam2_video), "-i", str(clip), "--point", "5:1:40,45", "-o", str(out),
                       "--no-overlay")
    assert code == 0, output
    assert "note: 'clip' skips frame(s) 4 of 0-7: tracking the 7 there are" in output
    assert sorted(p.stem for p in (out / "masks").iterdir()) == ["00000", "00001", "00002", "00003", "00005", "00006", "00007"]
    data = json.loads((out / "masks.json").read_text())
    assert {(a["frame"], a["file_name"]) for a in data["annotations"]} == {
        (n, f"{n:05d}.jpg") for n in (0, 1, 2, 3, 5, 6, 7)}
    # the click on frame 5 is the predictor's click on 00005.jpg, its 5th frame (position 4)
    predictor = Sam2VideoPredictor(sam2_video["encoder"], sam2_video["decoder"], sam2_video["memory_encoder"],
                                   sam2_video["memory_attention"], threads=2)
    state = predictor.init_state(str(clip))
    expected = {i: logits[0, 0] > 0 for i, _, logits, _ in track(predictor, state, [FramePrompt(4, 1, points=[(40.0, 45.0, 1)])])}
    label = np.asarray(Image.open(out / "masks" / "00005.png"))
    assert np.array_equal(label > 0, expected[4])

    code, output = run("track", *files_args(sam2_video), "-i", str(clip), "--point", "5:1:40,45", "-o",
                       str(tmp_path / "strict"), "--strict")
    assert_user_error(code, output, "'clip' skips frame(s) 4 of 0-7", "leave out --strict")
    assert not (tmp_path / "strict").exists()
    code, output = run("track", *files_args(sam2_video), "-i", str(clip), "--point", "4:1:40,45", "-o", str(tmp_path / "no4"))
    assert_user_error(code, output, "object 1 on frame 4: there is no frame 4 in 'clip' (it has frames 0-3, 5-7")


def test_a_killed_tracks_staging_folder_is_swept_and_a_bomb_frame_refused(sam2_video: dict[str, Any],
                                                                          tmp_path: Path) -> None:
    """A staging folder a SIGKILLed track left (its process gone) is removed by the next track there; a running
    one's is kept. A frame past Pillow's decompression-bomb limit is refused in one line, as other verbs refuse it."""
    import os

    from PIL import Image

    stale = tmp_path / ".vitdeploy-track-4194303-abcd"  # above pid_max's default: no such process
    live = tmp_path / f".vitdeploy-track-{os.getppid()}-efgh"
    stale.mkdir(), live.mkdir()
    (stale / "masks").mkdir()
    code, output = run("track", *files_args(sam2_video), "-i", str(sam2_video["clip"]), "--point", "0:1:25,45",
                       "-o", str(tmp_path / "tracks"), "--no-overlay", "--max-frames", "1", "--direction", "forward")
    assert code == 0, output
    assert not stale.exists() and live.exists()

    clip = write_clip(tmp_path / "bomb", frames=3)
    Image.new("L", (12000, 12000)).save(clip / "00001.jpg")  # 144 MP: past twice the limit set below
    old = Image.MAX_IMAGE_PIXELS
    Image.MAX_IMAGE_PIXELS = 10_000_000  # 144 MP is then past twice the limit: DecompressionBombError
    try:
        code, output = run("track", *files_args(sam2_video), "-i", str(clip), "--point", "0:1:25,45", "-o", str(tmp_path / "b"))
    finally:
        Image.MAX_IMAGE_PIXELS = old
    assert_user_error(code, output, "frame 1 ('00001.jpg') is larger than Pillow's decompression-bomb limit")
