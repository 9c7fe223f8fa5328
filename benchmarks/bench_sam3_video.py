"""SAM 3's tracker on video per frame (issue 74): the official ``Sam3TrackerPredictor`` (eager PyTorch, the tests'
named CPU shim) against vitdeploy's ``Sam3TrackerPredictor`` on the four exported files, each contender in a fresh
process, rounds alternated.

Each contender loads its model, reads the clip, clicks one object on frame 0 (fractions of the frame, as the official
example), propagates with ``propagate_preflight=True`` and reports: the click's time (the vision encoder on frame 0
and the interactive decoder), the preflight's (the memory encoder), the median time per tracked frame (the vision
encoder, memory attention over the bank, the interactive decoder and the memory encoder, one object), its load time
its peak RSS and how its RSS grew per 100 tracked frames once the bank's reach (16 frames) has filled (a long clip,
``--sizes test --frames 500``, shows what a long video costs in memory). The masks are compared frame by frame
(IoU), the object scores too.

Reduced precision is judged as the official runs it (issue 74 item 5, issue 75): ``official-bf16`` is the official
tracker under BF16 autocast for the whole run (the official enters CUDA's for the whole process; on a CPU the device
type is ``cpu``), ``vitdeploy-fp32`` every file on ONNX Runtime as written, ``vitdeploy-bf16`` the ``--bf16-graphs``
on OpenVINO in BF16 and the rest as written; with all four the report holds vitdeploy's BF16 clip to the official's own
(``vitdeploy.validation.official_practice.judge_clip``: each distance from its own FP32 clip within the margin).

The weights are seeded random ones saved as one ``sam3.pt``-format checkpoint (``tests/sam3_video_fixtures.py``),
the object-score bias moved by ``--score-bias`` (0 by default: at full size the seeded tracker's scores are what they
are, and the report gives them). ``--sizes test`` is the tests' tiny model.

Usage (the files and the clip are made once into --out):
    PYTHONPATH=. .venv/bin/python benchmarks/bench_sam3_video.py --sizes full --frames 4 --rounds 1 --threads 2
    PYTHONPATH=. .venv/bin/python benchmarks/bench_sam3_video.py --sizes test --frames 500 --rounds 1 --threads 2
    PYTHONPATH=. .venv/bin/python benchmarks/bench_sam3_video.py --sizes full --frames 8 --contenders official \
        official-bf16 vitdeploy-fp32 vitdeploy-bf16 vitdeploy
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

from benchmarks.bench_sam2 import peak_rss_mb, rss_mb
from benchmarks.options import parsed, timing_options

#: The four files per size: role -> recipe.
SIZES = {"full": {"vision": "sam3", "interactive": "sam3_interactive", "memory_encoder": "sam3_memory_encoder",
                  "memory_attention": "sam3_memory_attention"},
         "test": {"vision": "sam3_tiny", "interactive": "sam3_tiny_interactive",
                  "memory_encoder": "sam3_tiny_memory_encoder", "memory_attention": "sam3_tiny_memory_attention"}}
CLIP_SIZE = (240, 320)  # H, W
CLICK = [[40.0 / 320, 40.0 / 240]]  # on the red disc of frame 0 (tests.sam3_video_fixtures.write_clip), relative
#: official: eager FP32; official-bf16: under BF16 autocast; vitdeploy: --runtime (auto: the machine's decision);
#: vitdeploy-fp32: every file on ONNX Runtime as written; vitdeploy-bf16: --bf16-graphs on OpenVINO BF16.
CONTENDERS = ("official", "official-bf16", "vitdeploy", "vitdeploy-fp32", "vitdeploy-bf16")
ROLES = ("vision", "interactive", "memory_encoder", "memory_attention")


def prepare(size: str, out: Path, frames: int, bias: float) -> tuple[Path, Path]:
    """(checkpoint, clip): the seeded checkpoint, the four files exported from it, the clip; each made once."""
    from tests.sam3_video_fixtures import write_checkpoint, write_clip
    from vitdeploy.pipeline import export_from_recipe

    folder = out / f"{size}_bias{bias:g}"
    folder.mkdir(parents=True, exist_ok=True)
    checkpoint = folder / "sam3_seeded.pt"
    if not checkpoint.is_file():
        write_checkpoint(checkpoint, SIZES[size], bias=bias, seed=0)
    for role, recipe in SIZES[size].items():
        path = folder / f"{recipe}.onnx"
        if not path.is_file():
            started = time.perf_counter()
            export_from_recipe(recipe, path, checkpoint=str(checkpoint))
            data = path.with_name(path.name + ".data")  # the external weights of a file over ~1.8 GB
            megabytes = (path.stat().st_size + (data.stat().st_size if data.is_file() else 0)) / 1e6
            print(f"exported {recipe} in {time.perf_counter() - started:.1f} s ({megabytes:.1f} MB)", flush=True)
    clip = out / f"clip_{frames}"
    if not clip.is_dir():
        write_clip(clip, frames=frames, size=CLIP_SIZE)
    return checkpoint, clip


def contender(kind: str, size: str, out: Path, frames: int, threads: int, runtime: str, bias: float,
              bf16_graphs: tuple[str, ...] = ()) -> dict:
    """Runs in a fresh process: load, read the clip, click, propagate; the times, the masks and the scores."""
    import contextlib

    folder, clip = out / f"{size}_bias{bias:g}", out / f"clip_{frames}"
    start = time.perf_counter()
    if kind.startswith("official"):
        import torch

        from tests.sam3_video_fixtures import official_tracker, official_tracker_on_the_cpu

        torch.set_num_threads(threads)
        predictor = official_tracker(folder / "sam3_seeded.pt", recipes=SIZES[size])
        context: Any = contextlib.ExitStack()
        context.enter_context(official_tracker_on_the_cpu(predictor))
        if kind == "official-bf16":  # as the official tracker enters CUDA's, for the whole run
            context.enter_context(torch.autocast("cpu", dtype=torch.bfloat16))
        inference = torch.inference_mode()
        label = "official eager (PyTorch, " + ("BF16 autocast)" if kind == "official-bf16" else "FP32)")
    else:
        from vitdeploy.runtime import Sam3TrackerPredictor
        from vitdeploy.runtime.deploy.loader import OpenOptions, open_runner

        paths = [folder / f"{SIZES[size][r]}.onnx" for r in ROLES]
        if kind == "vitdeploy":
            files: list[Any] = paths
        else:
            files = [open_runner(path, OpenOptions(runtime="openvino", policy="bf16", threads=threads))
                     if kind == "vitdeploy-bf16" and role in bf16_graphs else
                     open_runner(path, OpenOptions(runtime="onnxruntime", threads=threads))
                     for role, path in zip(ROLES, paths)]
        predictor = Sam3TrackerPredictor(*files, threads=threads, runtime=runtime)
        context, inference = contextlib.nullcontext(), contextlib.nullcontext()
        label = "vitdeploy (" + ", ".join(f"{g}: {r.deployment.label() if r.deployment else r.name}" for g, r in
                                          ((g, getattr(predictor, g)) for g in ("image_encoder", "decoder",
                                                                                 "memory_encoder", "memory_attention"))) + ")"
    load_s = time.perf_counter() - start
    with context, inference:
        state = predictor.init_state(video_path=str(clip))
        t0 = time.perf_counter()
        predictor.add_new_points_or_box(inference_state=state, frame_idx=0, obj_id=1,
                                        points=np.array(CLICK, np.float32), labels=np.array([1], np.int32))
        click_s = time.perf_counter() - t0
        times, masks, scores, rss = [], [], [], []
        t0 = time.perf_counter()
        for _, _, _, video_res, obj_scores in predictor.propagate_in_video(state, start_frame_idx=0,
                                                                           max_frame_num_to_track=frames,
                                                                           reverse=False, propagate_preflight=True):
            now = time.perf_counter()
            times.append(now - t0)
            t0 = now
            logits = video_res.float().numpy() if hasattr(video_res, "float") else np.asarray(video_res)
            masks.append(np.packbits(np.asarray(logits)[0, 0] > 0))
            scores.append(float(np.asarray(obj_scores.float().numpy() if hasattr(obj_scores, "float") else obj_scores)
                                .reshape(-1)[0]))
            rss.append(rss_mb())
    np.save(folder / f"masks_{kind}_{frames}.npy", np.stack(masks))
    tracked = times[1:]  # frame 0 is the prompted one: its time is the preflight's (the memory encoder)
    settled = min(17, len(rss) - 2) if len(rss) > 3 else 0  # after the bank's 16 frames of reach have filled
    growth = (rss[-1] - rss[settled]) / max(len(rss) - 1 - settled, 1) * 100
    return {"contender": label, "load_s": round(load_s, 2), "click_ms": round(1e3 * click_s, 1),
            "preflight_ms": round(1e3 * times[0], 1), "median_ms": round(1e3 * statistics.median(tracked), 1),
            "runs_ms": [round(1e3 * t, 1) for t in times], "scores": [round(s, 6) for s in scores],
            "peak_rss_mb": peak_rss_mb(), "rss_growth_mb_per_100_frames": round(growth, 1)}


def _judged(masks: dict[str, np.ndarray], rows: dict[str, list[dict]]) -> Any:
    """vitdeploy's BF16 clip from its FP32 clip against the official BF16 autocast's from the official FP32
    (``judge_clip``, the margin recorded for SAM 3's official precision): the clicked object, every tracked frame."""
    from vitdeploy.runtime_facts import official_precision
    from vitdeploy.validation.official_practice import ClipRun, judge_clip

    def run(kind: str) -> ClipRun:
        return ClipRun({t: m[None] for t, m in enumerate(masks[kind])},
                       {(1, t): s for t, s in enumerate(rows[kind][0]["scores"])})

    return judge_clip(run("official"), run("official-bf16"), run("vitdeploy-fp32"), run("vitdeploy-bf16"),
                      margin=official_precision("sam3_memory_attention").margin)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["full"], choices=list(SIZES))
    timing_options(parser, out="out/sam3_video_bench", rounds=1, child=("KIND", "SIZE"))
    parser.add_argument("--contenders", nargs="+", default=["official", "vitdeploy"], choices=CONTENDERS,
                        help="official first: the others are compared with it")
    parser.add_argument("--bf16-graphs", nargs="+", default=["vision", "memory_attention"], choices=ROLES,
                        help="vitdeploy-bf16: the graphs on OpenVINO in BF16")
    parser.add_argument("--frames", type=int, default=4, help="clip length (frame 0 is prompted, the rest tracked)")
    parser.add_argument("--score-bias", type=float, default=0.0, help="added to the object-score head's bias")
    args = parsed(parser)
    if args.contender:
        print(json.dumps(contender(*args.contender, args.out, args.frames, args.threads, args.runtime,
                                   args.score_bias, tuple(args.bf16_graphs))))
        return
    from vitdeploy.cpu_features import cpu_features

    print(f"CPU: {cpu_features().summary()}; {args.threads} thread(s); {args.frames}-frame clip", flush=True)
    report: dict[str, Any] = {"cpu": cpu_features().summary(), "threads": args.threads, "frames": args.frames,
                              "rows": {}}
    for size in args.sizes:
        prepare(size, args.out, args.frames, args.score_bias)
        folder = args.out / f"{size}_bias{args.score_bias:g}"
        if args.contenders[0] != "official":
            parser.error("--contenders: official first (the others are compared with it)")
        rows: dict[str, list[dict]] = {kind: [] for kind in args.contenders}
        for _ in range(args.rounds):
            for kind in args.contenders:
                done = subprocess.run([sys.executable, __file__, "--contender", kind, size, "--out", str(args.out),
                                       "--frames", str(args.frames), "--threads", str(args.threads), "--runtime",
                                       args.runtime, "--score-bias", str(args.score_bias), "--bf16-graphs",
                                       *args.bf16_graphs], capture_output=True, text=True, check=True)
                rows[kind].append(json.loads(done.stdout.strip().splitlines()[-1]))
                print(f"{kind}: {rows[kind][-1]['median_ms']} ms per tracked frame", flush=True)
        masks = {kind: np.unpackbits(np.load(folder / f"masks_{kind}_{args.frames}.npy"), axis=1).astype(bool)
                 for kind in args.contenders}
        eager = statistics.median(r["median_ms"] for r in rows["official"])
        for kind, results in rows.items():
            a, b = masks["official"], masks[kind]
            ious = [float((x & y).sum() / max((x | y).sum(), 1)) for x, y in zip(a, b)]
            score_diff = max(abs(x - y) for x, y in zip(rows["official"][0]["scores"], results[0]["scores"]))
            median = statistics.median(r["median_ms"] for r in results)
            line = {"size": size, "contender": results[0]["contender"], "median_ms_per_frame": median,
                    "x_eager": round(median / eager, 3),
                    "click_ms": statistics.median(r["click_ms"] for r in results),
                    "preflight_ms": statistics.median(r["preflight_ms"] for r in results),
                    "peak_rss_mb": max(r["peak_rss_mb"] for r in results),
                    "rss_growth_mb_per_100_frames": max(r["rss_growth_mb_per_100_frames"] for r in results),
                    "load_s": statistics.median(r["load_s"] for r in results), "min_mask_iou": round(min(ious), 5),
                    "max_score_diff": score_diff, "scores": results[0]["scores"][:8],
                    "fg_fraction_official": round(float(a.mean()), 4),
                    "round_medians_ms": [r["median_ms"] for r in results]}
            report["rows"].setdefault(size, []).append(line)
            print(json.dumps(line), flush=True)
        if {"official-bf16", "vitdeploy-fp32", "vitdeploy-bf16"} <= set(rows):
            practice = _judged(masks, rows)
            report.setdefault("bf16_judged", {})[size] = {"graphs": args.bf16_graphs, "holds": bool(practice),
                                                          "summary": practice.summary()}
            print(f"{size}, {' + '.join(args.bf16_graphs)} in BF16: {practice.summary()}", flush=True)
    (args.out / "sam3_video_bench.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
