"""Dataset jobs (``vitdeploy embed``, ``segment-all --images``): the official model's numbers, sharded, resumable.

In-process runs here; the Ray runs (same outputs, a killed actor) are in ``test_dataset_ray.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from tests.cli_helpers import assert_user_error, run
from tests.sam_tiny import SEED, TinySamArtifacts, sample_image, tiny_official_sam
from vitdeploy.errors import InputError
from vitdeploy.runtime.apps.datasets.job import FAULT_SIGINT_AFTER, job_config, list_images, plan_job, run_in_process, run_job
from vitdeploy.runtime.deploy.loader import OpenOptions
from vitdeploy.runtime.apps.datasets.store import read_embedding_shard
from vitdeploy.parity import TOLERANCES, compare

pytest_plugins = ["tests.sam_tiny_fixtures"]

FP32 = TOLERANCES["fp32"]
#: The images of the job: sizes that resize up and down, wide and tall (SAM pads to a square).
SHAPES = [(48, 80), (90, 70), (64, 64), (30, 100), (77, 41)]


def make_images(folder: Path, broken: bool = True) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k, shape in enumerate(SHAPES):
        path = folder / f"img_{k}.{'png' if k % 2 else 'jpg'}"
        Image.fromarray(sample_image(*shape, seed=k)).save(path, quality=95)
        paths.append(path)
    if broken:
        (folder / "img_9_broken.jpg").write_bytes(b"not a jpeg")
    return paths


def embed_args(artifacts: TinySamArtifacts, images: Path, out: Path, *extra: str) -> list[str]:
    return ["embed", "-e", str(artifacts.encoder), "--images", str(images), "--out-dir", str(out),
            "--runtime", "onnxruntime", "--threads", "1", "--shard-size", "2", *extra]


def manifest(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]


def all_embeddings(out: Path) -> dict[str, np.ndarray]:
    found = {}
    for entry in manifest(out):
        if entry["shard"]:
            arrays = read_embedding_shard(out / entry["shard"])
            found.update(zip(arrays["image"].tolist(), arrays["embedding"]))
    return found


def test_list_images_reads_folders_globs_and_lists(tmp_path: Path) -> None:
    paths = make_images(tmp_path / "a" / "b", broken=False)
    (tmp_path / "a" / "notes.md").write_text("x")
    assert list_images(tmp_path / "a") == sorted(str(p) for p in paths)  # recursive, images only
    assert list_images(str(tmp_path / "a" / "**" / "*.png")) == sorted(str(p) for p in paths if p.suffix == ".png")
    listing = tmp_path / "a" / "list.txt"
    listing.write_text(f"# two images, one twice\nb/{paths[3].name}\n\n{paths[0]}\nb/{paths[3].name}\n")
    assert list_images(listing) == [str(paths[3]), str(paths[0])]  # relative to the list, given order, no duplicates
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"path": [str(paths[1]), str(paths[2])]}), tmp_path / "list.parquet")
    assert list_images(tmp_path / "list.parquet") == [str(paths[1]), str(paths[2])]
    for source, needle in ((tmp_path / "missing", "not found"), (tmp_path / "a" / "notes.md", "not a list"),
                           (str(tmp_path / "*.gif"), "matches no files")):
        with pytest.raises(InputError, match=needle):
            list_images(source)


def test_embeddings_are_the_official_predictors(tiny_sam_artifacts: TinySamArtifacts, tmp_path: Path) -> None:
    from segment_anything import SamPredictor as OfficialPredictor

    paths = make_images(tmp_path / "imgs")
    out = tmp_path / "emb"
    code, output = run(*embed_args(tiny_sam_artifacts, tmp_path / "imgs", out))
    assert code == 0, output
    assert "warning: 1 image(s) failed" in output
    found = all_embeddings(out)
    assert sorted(found) == sorted(str(p) for p in paths)
    official = OfficialPredictor(tiny_official_sam(SEED))
    for path in paths:
        official.set_image(np.asarray(Image.open(path).convert("RGB")))
        with torch.no_grad():
            reference = official.get_image_embedding()[0].numpy()
        result = compare(reference, found[str(path)], FP32, label=path.name)
        assert result, result.summary()
    first = read_embedding_shard(out / manifest(out)[0]["shard"])
    assert first["original_size"].tolist() == [list(SHAPES[0]), list(SHAPES[1])]
    assert first["resized_size"].tolist() == [[38, 64], [64, 50]]  # the longest side to the encoder's 64
    errors = [json.loads(line) for line in (out / "errors.jsonl").read_text().splitlines()]
    assert [e["image"] for e in errors] == [str(tmp_path / "imgs" / "img_9_broken.jpg")]
    assert "cannot be decoded" in errors[0]["error"]


def test_parquet_shards_hold_the_same_arrays(tiny_sam_artifacts: TinySamArtifacts, tmp_path: Path) -> None:
    make_images(tmp_path / "imgs", broken=False)
    assert run(*embed_args(tiny_sam_artifacts, tmp_path / "imgs", tmp_path / "npz"))[0] == 0
    assert run(*embed_args(tiny_sam_artifacts, tmp_path / "imgs", tmp_path / "pq", "--format", "parquet"))[0] == 0
    npz, parquet = all_embeddings(tmp_path / "npz"), all_embeddings(tmp_path / "pq")
    assert sorted(npz) == sorted(parquet) and len(npz) == len(SHAPES)
    for image in npz:
        np.testing.assert_array_equal(npz[image], parquet[image])
    assert [e["shard"] for e in manifest(tmp_path / "pq")][0] == "embeddings-00000.parquet"


def test_a_stopped_job_resumes_with_nothing_lost_or_repeated(tiny_sam_artifacts: TinySamArtifacts, tmp_path: Path) -> None:
    """A real SIGINT after the first shard (as Ctrl-C), then the same command: the result equals an unbroken run."""
    paths = make_images(tmp_path / "imgs")
    args = embed_args(tiny_sam_artifacts, tmp_path / "imgs", tmp_path / "stopped")
    env = {**os.environ, FAULT_SIGINT_AFTER: "1"}
    stopped = subprocess.run([sys.executable, "-m", "vitdeploy", *args], env=env, capture_output=True, text=True, timeout=120)
    assert stopped.returncode == 130, stopped.stderr
    assert "run the same command again to resume" in stopped.stderr and "Traceback" not in stopped.stderr
    assert len(manifest(tmp_path / "stopped")) == 1
    code, output = run(*args)
    assert code == 0, output
    assert "2 done before (skipped)" in output
    assert run(*embed_args(tiny_sam_artifacts, tmp_path / "imgs", tmp_path / "whole"))[0] == 0
    done = Counter(i["image"] for e in manifest(tmp_path / "stopped") for i in e["images"])
    assert sorted(done) == sorted(str(p) for p in paths) and set(done.values()) == {1}
    assert (tmp_path / "stopped" / "manifest.jsonl").read_bytes() == (tmp_path / "whole" / "manifest.jsonl").read_bytes()


def test_a_fixed_image_is_done_on_the_next_run(tiny_sam_artifacts: TinySamArtifacts, tmp_path: Path) -> None:
    make_images(tmp_path / "imgs")
    args = embed_args(tiny_sam_artifacts, tmp_path / "imgs", tmp_path / "out")
    assert run(*args)[0] == 0
    Image.fromarray(sample_image(40, 40, seed=9)).save(tmp_path / "imgs" / "img_9_broken.jpg")
    code, output = run(*args)
    assert code == 0 and "1 image(s) done" in output and "warning" not in output, output
    assert (tmp_path / "out" / "errors.jsonl").read_text() == ""
    assert len(all_embeddings(tmp_path / "out")) == len(SHAPES) + 1


def test_a_torn_manifest_line_is_dropped(tiny_sam_artifacts: TinySamArtifacts, tmp_path: Path) -> None:
    """A stop in the middle of appending a line leaves it without its newline: that shard is done again."""
    make_images(tmp_path / "imgs", broken=False)
    config = job_config("embed", {"encoder": str(tiny_sam_artifacts.encoder)}, OpenOptions(runtime="onnxruntime", threads=1))
    plan = plan_job(config, tmp_path / "imgs", tmp_path / "out", shard_size=2)
    run_job(plan, run_in_process(plan))
    text = (tmp_path / "out" / "manifest.jsonl").read_text()
    lines = text.splitlines(keepends=True)
    (tmp_path / "out" / "manifest.jsonl").write_text("".join(lines[:-1]) + lines[-1][:20])
    again = plan_job(config, tmp_path / "imgs", tmp_path / "out", shard_size=2)
    assert again.pending == len(lines[-1].split('"image":')) - 1 and again.skipped == len(SHAPES) - again.pending
    run_job(again, run_in_process(again))
    assert (tmp_path / "out" / "manifest.jsonl").read_text() == text


def test_masks_job_writes_the_generators_records(tiny_sam_artifacts: TinySamArtifacts, tmp_path: Path) -> None:
    """One JSON line per image with the official generator's records (COCO RLE); compared with the official one."""
    from segment_anything import SamAutomaticMaskGenerator as Official
    from pycocotools import mask as coco_mask

    paths = make_images(tmp_path / "imgs", broken=False)[:2]
    for extra in make_images(tmp_path / "imgs", broken=False)[2:]:
        extra.unlink()
    options = ["--points-per-side", "4", "--pred-iou-thresh", "0.1", "--stability-score-thresh", "0.1",
               "--stability-score-offset", "0.1"]
    code, output = run("segment-all", "-e", str(tiny_sam_artifacts.encoder), "-d", str(tiny_sam_artifacts.decoder),
                       "--images", str(tmp_path / "imgs"), "--out-dir", str(tmp_path / "masks"), "--runtime", "onnxruntime",
                       "--threads", "1", *options)
    assert code == 0, output
    lines = [json.loads(line) for line in (tmp_path / "masks" / "masks-00000.jsonl").read_text().splitlines()]
    assert [line["image"] for line in lines] == [str(p) for p in paths]
    for path, line in zip(paths, lines):
        picture = np.asarray(Image.open(path).convert("RGB"))
        torch.manual_seed(0)
        with torch.no_grad():
            theirs = Official(tiny_official_sam(SEED), points_per_side=4, pred_iou_thresh=0.1, stability_score_thresh=0.1,
                              stability_score_offset=0.1, output_mode="coco_rle").generate(picture)
        assert len(line["masks"]) == len(theirs) > 0
        for ours, official in zip(line["masks"], theirs):
            a, b = coco_mask.decode(ours["segmentation"]), coco_mask.decode(official["segmentation"])
            assert (a & b).sum() / max((a | b).sum(), 1) >= 0.99
            assert ours["predicted_iou"] == pytest.approx(official["predicted_iou"], abs=1e-4)


def test_bad_job_requests_are_refused_before_any_work(tiny_sam_artifacts: TinySamArtifacts, tmp_path: Path) -> None:
    make_images(tmp_path / "imgs", broken=False)
    out = tmp_path / "out"
    assert run(*embed_args(tiny_sam_artifacts, tmp_path / "imgs", out))[0] == 0
    before = sorted(p.name for p in out.iterdir())
    # another model into the same folder
    code, output = run("embed", "-e", str(tiny_sam_artifacts.decoder), "--images", str(tmp_path / "imgs"), "--out-dir", str(out))
    assert_user_error(code, output, "not a SAM image encoder")
    code, output = run(*embed_args(tiny_sam_artifacts, tmp_path / "imgs", out, "--format", "parquet"))
    assert_user_error(code, output, "holds another job", "embedding_format", "new --out-dir")
    assert sorted(p.name for p in out.iterdir()) == before
    (tmp_path / "stray").mkdir()
    (tmp_path / "stray" / "mine.txt").write_text("keep")
    code, output = run(*embed_args(tiny_sam_artifacts, tmp_path / "imgs", tmp_path / "stray"))
    assert_user_error(code, output, "not empty and holds no vitdeploy job")
    assert sorted(p.name for p in (tmp_path / "stray").iterdir()) == ["mine.txt"]
    code, output = run(*embed_args(tiny_sam_artifacts, tmp_path / "nothing", tmp_path / "o2"))
    assert_user_error(code, output, "not found")
    code, output = run(*embed_args(tiny_sam_artifacts, tmp_path / "imgs", tmp_path / "o3", "--workers", "2"))
    assert code == 2 and "--workers is for --ray" in output


def test_a_second_writer_and_another_shard_size_are_refused(tiny_sam_artifacts: TinySamArtifacts, tmp_path: Path) -> None:
    """A job owns its folder: while another live vitdeploy process holds it, a second job stops before any work; the
    shard size is part of the job (two sizes in one folder named shard files that held other images)."""
    make_images(tmp_path / "imgs", broken=False)
    out = tmp_path / "out"
    lock = tmp_path / ".out.vitdeploy-lock"
    lock.write_text(str(os.getppid()))  # a live process that is not this one
    code, output = run(*embed_args(tiny_sam_artifacts, tmp_path / "imgs", out))
    assert_user_error(code, output, "being written by another vitdeploy process", f"pid {os.getppid()}")
    assert not out.exists()
    lock.unlink()
    assert run(*embed_args(tiny_sam_artifacts, tmp_path / "imgs", out))[0] == 0
    assert not lock.exists()  # released when the verb ended
    before = (out / "manifest.jsonl").read_bytes()
    code, output = run(*[a if a != "2" else "3" for a in embed_args(tiny_sam_artifacts, tmp_path / "imgs", out)])
    assert_user_error(code, output, "holds another job", "shard_size: 2 there, 3 now")
    assert (out / "manifest.jsonl").read_bytes() == before


def test_resume_redoes_missing_and_damaged_shards_and_knows_an_image_by_its_path(
        tiny_sam_artifacts: TinySamArtifacts, tmp_path: Path) -> None:
    """A deleted shard and one overwritten with garbage are done again (said in one line each), and resuming with
    another spelling of the same folder does no image twice."""
    paths = make_images(tmp_path / "imgs", broken=False)
    out = tmp_path / "out"
    assert run(*embed_args(tiny_sam_artifacts, tmp_path / "imgs", out))[0] == 0
    whole = all_embeddings(out)
    first, second = [e["shard"] for e in manifest(out)][:2]
    (out / first).unlink()
    (out / second).write_bytes(b"garbage")
    other_spelling = tmp_path / "imgs" / ".." / "imgs"
    code, output = run(*embed_args(tiny_sam_artifacts, other_spelling, out))
    assert code == 0, output
    assert f"shard '{first}' is missing: its 2 image(s) are done again" in output
    assert f"shard '{second}' does not hold what the manifest recorded (SHA-256 differs)" in output
    assert "embedding 4 of 5 image(s), 1 done before (skipped)" in output, output
    done = Counter(i["image"] for e in manifest(out) for i in e["images"])
    assert set(done.values()) == {1} and len(done) == len(paths), done
    again = all_embeddings(out)
    for image, embedding in whole.items():
        key = next(k for k in again if os.path.realpath(k) == os.path.realpath(image))
        assert np.array_equal(again[key], embedding), image
    code, output = run(*embed_args(tiny_sam_artifacts, tmp_path / "imgs", out))
    assert code == 0 and "embedding 0 of 5 image(s), 5 done before (skipped)" in output, output


def test_a_job_resumed_from_another_folder_does_every_image_once_and_cleans_up(
        tiny_sam_artifacts: TinySamArtifacts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 76.5: started with a relative --images from one working directory and resumed with another spelling from
    another (it did 9 of 9 again and wrote each twice), every image is done once; a killed run's half-written
    '.tmp' file is removed, a damaged shard does not stay beside the one that replaces it, and a .gif is an image."""
    paths = make_images(tmp_path / "a" / "imgs", broken=False)
    gif = tmp_path / "a" / "imgs" / "img_5.gif"
    Image.fromarray(sample_image(40, 52, seed=5)).save(gif)
    (tmp_path / "b").mkdir()
    out = tmp_path / "out"
    monkeypatch.chdir(tmp_path / "a")
    code, output = run(*embed_args(tiny_sam_artifacts, Path("imgs/img_[0-3].*"), out))  # 4 images, 2 shards
    assert code == 0 and "embedding 4 of 4 image(s)" in output, output
    damaged = manifest(out)[0]["shard"]
    (out / damaged).write_bytes(b"garbage")
    (out / f".{damaged}.k1ll3d.tmp").write_bytes(b"half a shard")
    monkeypatch.chdir(tmp_path / "b")
    code, output = run(*embed_args(tiny_sam_artifacts, Path("..") / "a" / "imgs", out))
    assert code == 0, output
    assert "embedding 4 of 6 image(s), 2 done before (skipped)" in output, output  # the damaged shard's 2 again
    done = Counter(i["path"] for e in manifest(out) for i in e["images"])
    assert set(done.values()) == {1} and len(done) == len(paths) + 1, done
    assert os.path.realpath(gif) in done
    assert not (out / damaged).exists()  # its images went to a new shard (index 2: shard 1 is still there)
    assert damaged not in {e["shard"] for e in manifest(out)}
    assert not list(out.glob(".*.tmp"))


def test_a_moved_folder_is_known_by_content_and_a_copy_is_still_done(
        tiny_sam_artifacts: TinySamArtifacts, tmp_path: Path) -> None:
    """Issue 76.5, by content: the images folder moved after the job ran is recognised by the SHA-256 the manifest
    recorded (by path, all 5 were done again), while a second copy of one of its images, new in the folder, is done:
    a done record stands for one image."""
    import shutil

    make_images(tmp_path / "a" / "imgs", broken=False)
    out = tmp_path / "out"
    assert run(*embed_args(tiny_sam_artifacts, tmp_path / "a" / "imgs", out))[0] == 0
    (tmp_path / "c").mkdir()
    moved = Path(shutil.move(tmp_path / "a" / "imgs", tmp_path / "c" / "imgs"))
    shutil.copy(moved / "img_0.jpg", moved / "img_0_copy.jpg")
    code, output = run(*embed_args(tiny_sam_artifacts, moved, out))
    assert code == 0 and "embedding 1 of 6 image(s), 5 done before (skipped)" in output, output
    done = Counter(i["image"] for e in manifest(out) for i in e["images"])
    assert len(done) == 6 and set(done.values()) == {1} and str(moved / "img_0_copy.jpg") in done, done
    code, output = run(*embed_args(tiny_sam_artifacts, moved, out))
    assert code == 0 and "embedding 0 of 6 image(s), 6 done before (skipped)" in output, output


def test_a_manifest_that_is_not_utf8_is_one_line(tiny_sam_artifacts: TinySamArtifacts, tmp_path: Path) -> None:
    """A manifest with bytes that are not UTF-8 (it was a 'vitdeploy bug' line: UnicodeDecodeError) is refused in one
    line naming the file and the fix."""
    make_images(tmp_path / "imgs", broken=False)
    out = tmp_path / "out"
    assert run(*embed_args(tiny_sam_artifacts, tmp_path / "imgs" / "img_0.*", out))[0] == 0
    with open(out / "manifest.jsonl", "ab") as handle:
        handle.write(b'{"index": 9, "images": ["\xff\xfe"]}\n')
    code, output = run(*embed_args(tiny_sam_artifacts, tmp_path / "imgs", out))
    assert_user_error(code, output, "manifest.jsonl' is not UTF-8 text", "give a new --out-dir")


def test_a_job_that_did_no_work_does_not_block_the_next(tiny_sam_artifacts: TinySamArtifacts, tmp_path: Path) -> None:
    """A run that stopped before its first shard (a model that failed to open, say) leaves a folder the corrected
    run takes over, whatever its options; a folder with work done stays refused to another job."""
    make_images(tmp_path / "imgs", broken=False)
    out = tmp_path / "out"
    plan_job(job_config("embed", {"encoder": str(tiny_sam_artifacts.encoder)}, OpenOptions(runtime="onnxruntime"),
                        {"embedding_format": "parquet"}), tmp_path / "imgs", out)
    assert sorted(p.name for p in out.iterdir()) == ["job.json"]
    code, output = run(*embed_args(tiny_sam_artifacts, tmp_path / "imgs", out))
    assert code == 0 and "embedding 5 of 5 image(s)" in output, output


def test_every_image_source_problem_is_recorded_with_its_reason(tiny_sam_artifacts: TinySamArtifacts, tmp_path: Path) -> None:
    """Links to nothing, link loops, FIFOs and directories named like images, and a device or a directory in a list:
    one errors.jsonl line each with what it is (they were skipped, or called "not found"), nothing opened (a FIFO
    would hang the job), the good images done."""
    imgs = tmp_path / "imgs"
    make_images(imgs, broken=False)
    os.mkfifo(imgs / "pipe.jpg")
    (imgs / "dangling.png").symlink_to(tmp_path / "nowhere.png")
    (imgs / "loop.jpg").symlink_to(imgs / "loop.jpg")
    (imgs / "folder.jpg").mkdir()
    listing = tmp_path / "list.txt"
    listing.write_text(f"{imgs / 'img_0.jpg'}\n/dev/zero\n{imgs / 'folder.jpg'}\n")
    for source, out in ((imgs, tmp_path / "a"), (listing, tmp_path / "b")):
        done = subprocess.run([sys.executable, "-m", "vitdeploy", *embed_args(tiny_sam_artifacts, source, out)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        reasons = {Path(e["image"]).name: e["error"] for e in map(json.loads, (out / "errors.jsonl").read_text().splitlines())}
        expected = ({"pipe.jpg": "is a FIFO (named pipe), not an image file",
                     "dangling.png": "is a broken symbolic link", "loop.jpg": "is a symbolic link loop",
                     "folder.jpg": "is a directory, not an image"} if source == imgs else
                    {"zero": "is a character device, not an image file", "folder.jpg": "is a directory, not an image"})
        assert set(reasons) == set(expected), reasons
        for name, words in expected.items():
            assert words in reasons[name], (name, reasons[name])
        assert len(all_embeddings(out)) == (len(SHAPES) if source == imgs else 1)


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 64 KiB tmpfs (root only: skipped where this machine does not allow mounting one), unmounted after."""
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({made.stderr.strip() or 'mount failed'})")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_a_full_disk_is_said_in_one_line_and_the_rerun_resumes(tiny_sam_artifacts: TinySamArtifacts, tmp_path: Path,
                                                               small_disk: Path) -> None:
    """A disk that fills during 'embed' (it was 'No space left on device (a vitdeploy bug ...)'): one line naming the
    resource and the fix, exit 1; what was committed stays whole, and with room again the same command finishes
    the job with every image once."""
    images = tmp_path / "imgs"
    images.mkdir()
    for k in range(24):
        Image.fromarray(sample_image(40 + k, 60, seed=k)).save(images / f"i{k:02d}.png")
    out = small_disk / "out"
    code, output = run(*embed_args(tiny_sam_artifacts, images, out))
    assert_user_error(code, output, "no space left on the device", "free space there or write elsewhere")
    assert "vitdeploy bug" not in output
    before = manifest(out) if (out / "manifest.jsonl").is_file() else []
    subprocess.run(["mount", "-o", "remount,size=16m", str(small_disk)], check=True)
    code, output = run(*embed_args(tiny_sam_artifacts, images, out))
    assert code == 0, output
    names = Counter(Path(i["image"]).name for entry in manifest(out) for i in entry["images"])
    assert names == Counter(f"i{k:02d}.png" for k in range(24)), names  # each image once
    assert len(all_embeddings(out)) == 24 and len(manifest(out)) >= len(before)


def test_resource_errors_are_named_with_their_fix() -> None:
    """Disk full, too many open files and out of memory (Python's and a runtime's own words) each get their line;
    anything else is not one of them."""
    import errno

    from vitdeploy.errors import resource_problem

    assert "no space left on the device writing 'x.npz'" in resource_problem(OSError(errno.ENOSPC, "No space", "x.npz"))
    assert "ulimit -n" in resource_problem(OSError(errno.EMFILE, "Too many open files"))
    assert resource_problem(MemoryError()).startswith("out of memory")
    assert resource_problem(RuntimeError("onnxruntime: Failed to allocate memory for requested buffer")).startswith("out of memory")
    assert resource_problem(OSError(errno.ENOENT, "No such file")) is None
    assert resource_problem(ValueError("bad")) is None


def test_a_list_with_a_nul_byte_is_called_not_a_text_list(tmp_path: Path) -> None:
    """A NUL byte in a .txt list (the fuzz test found it: 'unexpected ValueError: embedded null byte') is refused in
    one line naming the line: no path holds one."""
    listing = tmp_path / "list.txt"
    listing.write_bytes(b"a.jpg\nb\x00c.jpg\n")
    with pytest.raises(InputError, match=r"--images '.*list.txt' line 2 holds a NUL byte, which no path can"):
        list_images(str(listing))


def test_every_registered_job_kind_keeps_the_contract() -> None:
    """The job kinds are registered classes (vitdeploy/runtime/apps/datasets/kinds.py), as the model families are: each
    names the files it takes (a model package's set, checked when the job is planned), shard files no other kind
    writes, a default shard size and options its header records as JSON; a name twice, or an unknown one, is refused."""
    from vitdeploy.errors import InputError
    from vitdeploy.runtime.apps.common.files import FileSet
    from vitdeploy.runtime.apps.datasets.kinds import JOB_KINDS, JobKind, JsonLinesJob, job_kind, register

    assert set(JOB_KINDS) >= {"embed", "masks", "concepts"}
    names = set()
    for name, kind in JOB_KINDS.items():
        assert issubclass(kind, JobKind) and kind.name == name and job_kind(name) is kind
        assert isinstance(kind.files, FileSet) and kind.files.roles, name
        shard = kind.shard_name(7, {})
        assert "00007" in shard and shard not in names, (name, shard)
        names.add(shard)
        assert kind.shard_size >= 1 and json.loads(json.dumps(kind.header_options({}))) == kind.header_options({})
        assert kind.payload is not JobKind.payload, name  # JSON lines (under a record key), or its own bytes
        assert kind.record_key or not issubclass(kind, JsonLinesJob), name
    with pytest.raises(RuntimeError, match="registered twice"):
        register(JOB_KINDS["embed"])
    with pytest.raises(InputError, match="job kind 'videos' is not one of embed, masks, concepts"):
        job_kind("videos")
