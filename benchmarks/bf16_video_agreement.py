"""SAM 2.1's video masks with some of its four graphs in BF16 against all of them in FP32: the evidence a BF16 policy
needs before ``--runtime auto`` may offer it for a video graph (the "fastest proven path" issue, item 5: "the memory
attention and memory encoder in BF16 only where the clip's masks hold"; every mask IoU >= 0.99 against all-FP32 over a
30-frame clip, object scores within 1e-2).

One object is clicked on frame 0 of the benchmark clip (``benchmarks/bench_sam2_video.py``'s: the present-object
checkpoint, the four exported graphs, the synthetic clip) and tracked through it by vitdeploy's ``Sam2VideoPredictor``,
once per variant, each in a fresh process:

* ``fp32``: every graph as written on ONNX Runtime (the reference; its masks equal the official predictor's within
  the fp32 budget, ``tests/runtime/apps/test_sam2_video.py``);
* each ``--variants`` entry: the graphs it names (``+``-joined: ``memory_attention``, ``memory_encoder``,
  ``image_encoder``, ``decoder``) on OpenVINO with the precision policy ``--policy`` (``bf16``, or ``fp16`` on a CPU
  with FP16 arithmetic), the others as in ``fp32``.

The budget is ``CLIP_MASKS`` and ``CLIP_SCORE_ATOL`` (``vitdeploy/validation/masks.py``).

Per variant and frame: the mask IoU against ``fp32``'s, the object score logit's difference, and the frame's time;
per variant the worst frame, the median tracked-frame time (after ``--skip`` frames, while the bank fills) and the load.

Usage (files and clip made once into --out, shared with bench_sam2_video.py):
    PYTHONPATH=. .venv/bin/python benchmarks/bf16_video_agreement.py --sizes tiny --frames 30 --threads 2
    PYTHONPATH=. .venv/bin/python benchmarks/bf16_video_agreement.py --sizes tiny --policy fp16   # AVX512-FP16 / Arm FP16
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.bench_sam2 import SIZES, peak_rss_mb
from benchmarks.bench_sam2_video import CLICK, ROLES, prepare
from vitdeploy.validation.masks import CLIP_MASKS, CLIP_SCORE_ATOL, compare_masks

GRAPHS = ("image_encoder", "decoder", "memory_encoder", "memory_attention")
DEFAULT_VARIANTS = ("memory_attention", "memory_attention+memory_encoder", "image_encoder",
                    "image_encoder+decoder+memory_encoder+memory_attention")


def run_variant(variant: str, recipe: str, out: Path, frames: int, threads: int, policy: str = "bf16") -> dict:
    """In a fresh process: open the four graphs (``variant``'s on OpenVINO at ``policy``), click, propagate; save
    masks and scores, return the times."""
    from vitdeploy.runtime.apps.sam2.video_predictor import Sam2VideoPredictor
    from vitdeploy.runtime.backends.loader import OpenOptions, open_runner

    reduced = set() if variant == "fp32" else set(variant.split("+"))
    start = time.perf_counter()
    runners = []
    for graph, suffix in zip(GRAPHS, ROLES):
        options = (OpenOptions(runtime="openvino", policy=policy, threads=threads) if graph in reduced
                   else OpenOptions(runtime="onnxruntime", threads=threads))
        runners.append(open_runner(out / f"{recipe}{suffix}.onnx", options))
    predictor = Sam2VideoPredictor(*runners, fill_hole_area=0)
    load_s = time.perf_counter() - start
    state = predictor.init_state(str(out / f"clip_{frames}"))
    predictor.add_new_points_or_box(state, frame_idx=0, obj_id=1, points=np.array(CLICK, np.float32),
                                    labels=np.array([1], np.int32))
    logits_per_frame, times = [], []
    t0 = time.perf_counter()
    for _, _, logits in predictor.propagate_in_video(state):
        now = time.perf_counter()
        times.append(now - t0)
        t0 = now
        logits_per_frame.append(np.asarray(logits, np.float32)[0, 0])
    outputs = state["output_dict_per_obj"][0]
    scores = []
    for index in range(len(logits_per_frame)):
        frame = outputs["cond_frame_outputs"].get(index) or outputs["non_cond_frame_outputs"][index]
        scores.append(float(np.asarray(frame["object_score_logits"]).reshape(-1)[0]))
    np.savez(out / agreement_file(recipe, variant, policy), masks=np.stack(logits_per_frame) > 0, scores=np.array(scores))
    return {"variant": variant, "policy": "file" if variant == "fp32" else policy, "load_s": round(load_s, 1),
            "times_ms": [round(1e3 * t, 1) for t in times], "peak_rss_mb": peak_rss_mb(),
            "chosen": {g: r.deployment.label() if r.deployment else r.name
                       for g, r in zip(GRAPHS, runners)}}


def agreement_file(recipe: str, variant: str, policy: str) -> str:
    """Where a variant's masks and scores are kept: the ``fp32`` reference is one for every policy."""
    return f"agreement_{recipe}_{variant}.npz" if variant == "fp32" or policy == "bf16" else \
        f"agreement_{recipe}_{variant}_{policy}.npz"


def against_fp32(reference: dict, other: dict) -> dict:
    """The variant's masks and scores against ``fp32``'s, frame by frame, held to the clip budget."""
    masks = compare_masks(reference["masks"], other["masks"], CLIP_MASKS)
    diffs = np.abs(reference["scores"] - other["scores"])
    return {"min_iou": round(min(masks.iou), 5), "worst_frame": int(np.argmin(masks.iou)),
            "mean_iou": round(float(np.mean(masks.iou)), 5), "max_score_diff": round(float(diffs.max()), 5),
            "presence_flips": int(((reference["scores"] > 0) != (other["scores"] > 0)).sum()),
            "holds": bool(masks) and bool(diffs.max() <= CLIP_SCORE_ATOL)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["tiny"], choices=list(SIZES))
    parser.add_argument("--variants", nargs="+", default=list(DEFAULT_VARIANTS))
    parser.add_argument("--frames", type=int, default=30)
    parser.add_argument("--skip", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--policy", default="bf16", choices=["bf16", "fp16"],
                        help="the precision policy of the variants' graphs (OpenVINO)")
    parser.add_argument("--out", type=Path, default=Path("out/sam2_video_bench"))
    parser.add_argument("--child", nargs=2, metavar=("VARIANT", "RECIPE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.child:
        print(json.dumps(run_variant(*args.child, args.out, args.frames, args.threads, args.policy)))
        return
    unknown = {g for v in args.variants for g in v.split("+")} - set(GRAPHS)
    if unknown:
        parser.error(f"unknown graph(s) {sorted(unknown)}: use {', '.join(GRAPHS)}")
    from vitdeploy.cpu_features import cpu_features

    report = {"cpu": cpu_features().summary(), "threads": args.threads, "frames": args.frames, "policy": args.policy,
              "sizes": {}}
    print(f"CPU: {report['cpu']}; {args.threads} thread(s); {args.frames}-frame clip", flush=True)
    for size in args.sizes:
        recipe = SIZES[size]
        prepare(recipe, args.out, args.frames)
        rows = []
        for variant in ("fp32", *args.variants):
            done = subprocess.run([sys.executable, __file__, "--child", variant, recipe, "--out", str(args.out),
                                   "--frames", str(args.frames), "--threads", str(args.threads), "--policy", args.policy],
                                  capture_output=True, text=True)
            if done.returncode:
                print(done.stderr[-3000:], file=sys.stderr)
                raise SystemExit(f"variant {variant} failed (exit {done.returncode})")
            row = json.loads(done.stdout.strip().splitlines()[-1])
            tracked = row["times_ms"][1 + args.skip:]
            row["median_ms_per_frame"] = round(statistics.median(tracked), 1)
            data = np.load(args.out / agreement_file(recipe, variant, args.policy))
            row["fg_fraction"] = round(float(data["masks"].mean()), 4)
            if variant != "fp32":
                reference = np.load(args.out / agreement_file(recipe, "fp32", args.policy))
                row.update(against_fp32(reference, data))
            rows.append(row)
            print(json.dumps({"size": size, **{k: v for k, v in row.items() if k != "times_ms"}}), flush=True)
        report["sizes"][size] = rows
    (args.out / f"{args.policy}_video_agreement.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
