"""SAM 2.1's video path per frame: the official SAM2VideoPredictor (eager PyTorch) against vitdeploy's Sam2VideoPredictor
on the four exported graphs, each contender in a fresh process, rounds alternated (issue 37).

Per frame = one frame of ``propagate_in_video`` for one object after a click on frame 0: the image encoder, memory
attention over the bank (up to 6 recent frames and the prompted one, up to 16 object pointers), the mask decoder and
the memory encoder. Each contender process loads its model, reads the clip, adds the click, propagates through the
clip, and reports the median time of the frames after ``--skip`` (the bank fills during the first 7), the first frame's
time, its load time, its peak RSS and how its RSS grew per 100 tracked frames after the skipped ones (a long clip,
``--frames 500``, shows what a long video costs in memory: issue 74); the masks of the two are compared frame by frame
(IoU). ``--sizes test`` is the tests' 256 px model (``sam2_tiny``), for long clips in minutes.

The weights are seeded random ones with the object-score head's bias raised by 1.5 (as the tests do), saved as an
official checkpoint: with plain random weights every object is scored absent and every mask is the no-object fill.
``--checkpoint`` takes an official checkpoint instead (one size per run; its files, clip and results go into a folder
of --out named after it, apart from the seeded ones).
The official predictor runs with one shim, the tests' (``tests/sam2_video_fixtures.py``: a memory without object
pointers read as float32, where the official code stops on the CPU); hole filling is off on both sides (the official
one needs its CUDA extension).

Usage (the files and the clip are made once into --out):
    PYTHONPATH=. .venv/bin/python benchmarks/bench_sam2_video.py --sizes tiny base_plus --rounds 2 --frames 12 --threads 2
    PYTHONPATH=. .venv/bin/python benchmarks/bench_sam2_video.py --sizes tiny --checkpoint sam2.1_hiera_tiny.pt
    PYTHONPATH=. .venv/bin/python benchmarks/bench_sam2_video.py --sizes test --frames 500 --rounds 1 --threads 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench_sam2 import SIZES as FULL_SIZES
from benchmarks.bench_sam2 import peak_rss_mb, rss_mb
from benchmarks.options import parsed, timing_options

SIZES = {**FULL_SIZES, "test": "sam2_tiny"}  # the tests' 256 px recipes (tests/sam2_video_fixtures.py)
ROLES = ("", "_decoder", "_memory_encoder", "_memory_attention")
CLICK = [[40.0, 75.0]]  # on the red disc of frame 0 (tests.sam2_video_fixtures.write_clip, 240 x 320)


def prepare(recipe: str, out: Path, frames: int, checkpoint: Path | None = None) -> tuple[Path, Path]:
    """(checkpoint, clip folder): ``checkpoint`` (default: the present-object checkpoint, made once) and the four
    files exported from it, the clip."""
    import torch

    from tests.sam2_video_fixtures import write_clip
    from vitdeploy.models.recipes import load_recipe
    from vitdeploy.models.sam2 import Sam2Arch, load_sam2
    from vitdeploy.pipeline import export_from_recipe

    if checkpoint is None:
        checkpoint = seeded_checkpoint(recipe, out)
        if not checkpoint.is_file():
            model = load_sam2(Sam2Arch.from_dict(load_recipe(recipe).architecture), random_seed=0)
            with torch.no_grad():
                model.sam_mask_decoder.pred_obj_score_head.layers[-1].bias += 1.5
            torch.save({"model": model.state_dict()}, checkpoint)
    for suffix in ROLES:
        path = out / f"{recipe}{suffix}.onnx"
        if not path.is_file():
            export_from_recipe(recipe + suffix, path, checkpoint=str(checkpoint))
    clip = out / f"clip_{frames}"
    if not clip.is_dir():
        write_clip(clip, frames=frames, size=(240, 320))
    return checkpoint, clip


def track_click(predictor: Any, clip: Path, rss: list[float] | None = None,
                keep: Any = None) -> tuple[dict, list[np.ndarray], list[float]]:
    """:data:`CLICK` on frame 0 of ``clip``, then ``propagate_in_video`` by either predictor (the official one or
    vitdeploy's): the state, each frame's mask logits of the object ((H, W) float32, or what ``keep`` makes of them)
    and each frame's seconds (and the RSS after each frame appended to ``rss``)."""
    state = predictor.init_state(str(clip))
    predictor.add_new_points_or_box(state, frame_idx=0, obj_id=1, points=np.array(CLICK, np.float32),
                                    labels=np.array([1], np.int32))
    logits, times = [], []
    t0 = time.perf_counter()
    for _, _, frame_logits in predictor.propagate_in_video(state):
        now = time.perf_counter()
        times.append(now - t0)
        t0 = now
        as_float = frame_logits.float().numpy() if hasattr(frame_logits, "float") else frame_logits  # torch: BF16 too
        frame = np.asarray(as_float, np.float32)[0, 0]
        logits.append(frame if keep is None else keep(frame))
        if rss is not None:
            rss.append(rss_mb())
    return state, logits, times


def seeded_checkpoint(recipe: str, out: Path) -> Path:
    """Where :func:`prepare` keeps the present-object checkpoint of seeded weights."""
    return out / f"{recipe}_present.pt"


def official_checkpoint(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Path | None:
    """``--checkpoint`` checked (a file, one size), and ``args.out`` moved to its own folder; None without it."""
    if args.checkpoint is None:
        return None
    if not args.checkpoint.is_file():
        parser.error(f"--checkpoint {args.checkpoint}: no such file (an official SAM 2.1 checkpoint, .pt)")
    if len(args.sizes) != 1:
        parser.error("--checkpoint is one size's weights: give that size alone with --sizes")
    args.out = args.out / args.checkpoint.stem
    args.out.mkdir(parents=True, exist_ok=True)
    return args.checkpoint.resolve()


def contender(kind: str, recipe: str, out: Path, frames: int, skip: int, threads: int, runtime: str,
              checkpoint: Path | None = None) -> dict:
    """Runs in a fresh process: load, read the clip, click, propagate; per-frame times and the masks."""
    start = time.perf_counter()
    clip = out / f"clip_{frames}"
    if kind == "official":
        import torch

        from tests.sam2_video_fixtures import official_video_predictor
        from vitdeploy.models.recipes import load_recipe
        from vitdeploy.models.sam2 import Sam2Arch

        torch.set_num_threads(threads)
        arch = Sam2Arch.from_dict(load_recipe(recipe).architecture)
        predictor = official_video_predictor(checkpoint or seeded_checkpoint(recipe, out), arch=arch)
        predictor.fill_hole_area = 0
        context = torch.inference_mode
        label = "official eager (PyTorch)"
    else:
        import contextlib

        from vitdeploy.runtime.apps.sam2.video_predictor import Sam2VideoPredictor

        predictor = Sam2VideoPredictor(*(out / f"{recipe}{s}.onnx" for s in ROLES), threads=threads, runtime=runtime,
                                       fill_hole_area=0)
        context = contextlib.nullcontext
        graphs = ("image_encoder", "decoder", "memory_encoder", "memory_attention")
        label = "vitdeploy (" + ", ".join(
            f"{g}: {r.deployment.label() if r.deployment else r.name}"
            for g, r in ((g, getattr(predictor, g)) for g in graphs)) + ")"
    load_s = time.perf_counter() - start
    with context():
        rss: list[float] = []
        # each frame's mask kept as packed bits (10 KB a frame), so that what the benchmark keeps barely moves the RSS
        _, masks, times = track_click(predictor, clip, rss, keep=lambda frame: np.packbits(frame > 0))
    np.save(out / f"masks_{kind}_{recipe}.npy", np.stack(masks))
    first = 1 + skip  # frame 0 is the prompted one (no tracking); the bank fills over the first frames
    growth = (rss[-1] - rss[first]) / max(len(rss) - 1 - first, 1) * 100
    tracked = times[first:]
    return {"contender": label, "load_s": round(load_s, 2), "median_ms": round(1e3 * statistics.median(tracked), 1),
            "first_tracked_ms": round(1e3 * times[1], 1), "frames_timed": len(tracked),
            "runs_ms": [round(1e3 * t, 1) for t in times], "peak_rss_mb": peak_rss_mb(),
            "rss_growth_mb_per_100_frames": round(growth, 1), "rss_after_skip_mb": round(rss[first], 1),
            "rss_last_mb": round(rss[-1], 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["tiny", "base_plus"], choices=list(SIZES))
    timing_options(parser, out="out/sam2_video_bench", rounds=2, child=("KIND", "RECIPE"))
    parser.add_argument("--frames", type=int, default=12, help="clip length (frame 0 is prompted, the rest tracked)")
    parser.add_argument("--skip", type=int, default=6, help="tracked frames left out of the median (the bank filling)")
    parser.add_argument("--checkpoint", type=Path, help="an official SAM 2.1 checkpoint of the one size given, "
                        "instead of the seeded weights")
    args = parsed(parser)
    if args.contender:
        print(json.dumps(contender(*args.contender, args.out, args.frames, args.skip, args.threads, args.runtime,
                                   args.checkpoint)))
        return
    checkpoint = official_checkpoint(parser, args)
    from vitdeploy.cpu_features import cpu_features

    print(f"CPU: {cpu_features().summary()}; {args.threads} thread(s); {args.frames}-frame clip", flush=True)
    report = {"cpu": cpu_features().summary(), "threads": args.threads, "frames": args.frames, "rows": {}}
    for size in args.sizes:
        recipe = SIZES[size]
        prepare(recipe, args.out, args.frames, checkpoint)
        rows: dict[str, list[dict]] = {"official": [], "vitdeploy": []}
        for _ in range(args.rounds):
            for kind in ("official", "vitdeploy"):
                done = subprocess.run([sys.executable, __file__, "--contender", kind, recipe, "--out", str(args.out),
                                       "--frames", str(args.frames), "--skip", str(args.skip), "--threads",
                                       str(args.threads), "--runtime", args.runtime,
                                       *(["--checkpoint", str(checkpoint)] if checkpoint else [])],
                                      capture_output=True, text=True, check=True)
                rows[kind].append(json.loads(done.stdout.strip().splitlines()[-1]))
        a, b = (np.unpackbits(np.load(args.out / f"masks_{kind}_{recipe}.npy"), axis=1).astype(bool)
                for kind in ("official", "vitdeploy"))
        ious = [float((x & y).sum() / max((x | y).sum(), 1)) for x, y in zip(a, b)]
        eager = statistics.median(r["median_ms"] for r in rows["official"])
        for kind, results in rows.items():
            median = statistics.median(r["median_ms"] for r in results)
            line = {"size": size, "contender": results[0]["contender"], "median_ms_per_frame": median,
                    "x_eager": round(median / eager, 3),
                    "first_tracked_ms": statistics.median(r["first_tracked_ms"] for r in results),
                    "peak_rss_mb": max(r["peak_rss_mb"] for r in results),
                    "rss_growth_mb_per_100_frames": max(r["rss_growth_mb_per_100_frames"] for r in results),
                    "load_s": statistics.median(r["load_s"] for r in results), "min_mask_iou": round(min(ious), 5),
                    "round_medians_ms": [r["median_ms"] for r in results],
                    "fg_fraction_official": round(float(a.mean()), 3)}
            report["rows"].setdefault(size, []).append(line)
            print(json.dumps(line), flush=True)
    (args.out / "sam2_video_bench.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
