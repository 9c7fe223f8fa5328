"""FP16 and INT8 calibration of full-size SAM encoders: time, peak memory and parity, against eager forwards.

For each ``--variant`` (sam_vit_b / sam_vit_l / sam_vit_h, random weights seed 0, exported with the
default ``generic`` target unless ``--onnx-dir`` already holds ``{variant}.onnx``):

1. times ``--eager-runs`` forward passes of the official ``segment_anything`` encoder (fresh
   process, same threads) and counts 12 as the first one plus 11 at the mean of the others (what a
   loop of 12 pays): the yardstick issue 12 names;
2. runs ``vitdeploy calibrate`` for each precision in a fresh process (the user's command), with
   the images given (default: the bundled 16, so 12 calibrate and 4 are held out), and reads its
   JSON report: stage times, islands, parity vs the FP32 ONNX and vs the eager official model on
   the held-out images; peak RSS is the child's own ``ru_maxrss`` (``os.wait4``);
3. ``--stress``: a copy of vit_b whose MLPs in blocks 0, 5 and 11 are rescaled (fc1 x S, fc2 / S,
   ``--stress-scale``, default 3e4) so their hidden activations run past FP16's 65504 as a trained
   model's outliers do (the failure TensorRT and Torch-TensorRT report for LayerNorm/MLP in FP16;
   these figures are NOT taken from a real SAM checkpoint, none can be downloaded here). It is saved
   as a checkpoint and exported from it, so eager parity uses the same weights. Then: the naive
   conversion (every node FP16 except what the converter blocks by itself), run with every tensor
   rounded to FP16, vs ``vitdeploy calibrate -p fp16``, side by side.

Everything goes to ``--out`` (ONNX files, reports, ``bench_calibration.json``); a Markdown table
is printed at the end. Long: ViT-B about 25 min for both precisions on a 2-core EPYC.

Usage:
    .venv/bin/python benchmarks/bench_calibration.py --variant vit_b --stress --out /tmp/bench_cal
    .venv/bin/python benchmarks/bench_calibration.py --variant vit_h --max-images 3 --holdout 1 --out /tmp/bench_cal
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VITDEPLOY = [sys.executable, "-m", "vitdeploy"]


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def run_measured(cmd: list[str], log: Path) -> tuple[int, float, float]:
    """(exit code, wall seconds, peak RSS in GB of the child) for one command, its output to ``log``."""
    start = time.perf_counter()
    with open(log, "w") as handle:
        proc = subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, time.perf_counter() - start, usage.ru_maxrss / 1e6


EAGER_SNIPPET = """
import json, sys, time, torch
from segment_anything import sam_model_registry
torch.set_num_threads({threads})
torch.manual_seed(0)
encoder = sam_model_registry["{variant}"]().image_encoder.eval()
x = torch.randn(1, 3, 1024, 1024)
times = []
with torch.inference_mode():
    for _ in range({runs}):
        t = time.perf_counter(); encoder(x); times.append(time.perf_counter() - t)
print(json.dumps(times))
"""


def eager_forward_seconds(variant: str, runs: int, threads: int) -> list[float]:
    out = subprocess.run([sys.executable, "-c", EAGER_SNIPPET.format(variant=variant, runs=runs, threads=threads)],
                         check=True, capture_output=True, text=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def export(variant: str, path: Path, log: Path, checkpoint: Path | None = None) -> dict:
    cmd = [*VITDEPLOY, "export", "--recipe", f"sam_{variant}", "-o", str(path), "--force"]  # reruns replace
    cmd += ["-c", str(checkpoint)] if checkpoint else ["--random-weights", "--seed", "0"]
    code, wall, rss = run_measured(cmd, log)
    if code:
        raise SystemExit(f"export failed, see {log}")
    return {"export_s": round(wall, 1), "export_peak_rss_gb": round(rss, 2)}


def calibrate(model: Path, precision: str, out_dir: Path, args, checkpoint: Path | None = None) -> dict:
    stem = model.name.removesuffix(".onnx")
    output, report, log = out_dir / f"{stem}.{precision}.onnx", out_dir / f"{stem}.{precision}.json", out_dir / f"{stem}.{precision}.log"
    cmd = [*VITDEPLOY, "calibrate", str(model), "-p", precision, "-o", str(output), "--report", str(report),
           "--threads", str(args.threads), "--holdout", str(args.holdout), "--min-images", "2", "--force"]
    for images in args.images:
        cmd += ["-i", images]
    if args.max_images:
        cmd += ["--max-images", str(args.max_images)]
    if checkpoint:
        cmd += ["-c", str(checkpoint)]
    code, wall, rss = run_measured(cmd, log)
    row = {"precision": precision, "exit_code": code, "wall_s": round(wall, 1), "peak_rss_gb": round(rss, 2), "log": str(log)}
    if code == 0:
        data = json.loads(report.read_text())
        fp32 = data["parity_vs_fp32_onnx"]
        eager = data.get("parity_vs_eager") or []
        row.update({
            "output": str(output), "timings_s": data.get("timings_s"), "kept": len(data["higher_precision_nodes"]),
            "nodes": data["node_count"], "kept_by_op": _count_ops(data["higher_precision_nodes"], output),
            "cosine_vs_fp32": min(p["cosine"] for p in fp32), "rel_l2_vs_fp32": max(p["rel_l2"] for p in fp32),
            "cosine_vs_eager": min((p["cosine"] for p in eager), default=None),
            "passed_vs_eager": all(p["passed"] for p in eager) if eager else None,
            "nonfinite": sum(p.get("nan_count", 0) + p.get("inf_count", 0) for p in fp32),
        })
    return row


def _count_ops(kept: dict, output: Path) -> dict[str, int]:
    import onnx

    ops = {n.name: n.op_type for n in onnx.load(str(output), load_external_data=False).graph.node}
    counts: dict[str, int] = {}
    for name in kept:
        counts[ops.get(name, "?")] = counts.get(ops.get(name, "?"), 0) + 1
    return counts


STRESS_BLOCKS = (0, 5, 11)


def stress_checkpoint(path: Path, scale: float) -> dict:
    """vit_b, seed 0, MLPs of STRESS_BLOCKS rescaled; returns the largest |fc1 output| on a random image (eager)."""
    import torch

    from vitdeploy.models.sam_encoder import SamEncoderArch, load_sam_image_encoder

    encoder = load_sam_image_encoder(SamEncoderArch(), random_seed=0)
    with torch.no_grad():
        for index in STRESS_BLOCKS:
            mlp = encoder.blocks[index].mlp
            mlp.lin1.weight.mul_(scale)
            mlp.lin1.bias.mul_(scale)
            mlp.lin2.weight.div_(scale)
    peaks: list[float] = []
    hooks = [encoder.blocks[i].mlp.lin1.register_forward_hook(lambda _m, _i, out: peaks.append(float(out.abs().max())))
             for i in STRESS_BLOCKS]
    torch.manual_seed(1)
    with torch.inference_mode():
        encoder(torch.randn(1, 3, 1024, 1024))
    for hook in hooks:
        hook.remove()
    torch.save(encoder.state_dict(), path)
    return {"blocks": list(STRESS_BLOCKS), "scale": scale, "fc1_abs_max_eager": [round(p, 1) for p in peaks]}


def naive_fp16(model_path: Path, args) -> dict:
    """The plain conversion (no islands but the converter's own), run with every tensor rounded to FP16."""
    import numpy as np
    import onnx

    from vitdeploy.precision.calibrate import _calibration_feeds, image_input, load_fp32_onnx
    from vitdeploy.precision.calibration_data import load_calibration_set
    from vitdeploy.precision.evaluation import compare_outputs, ort_session, run_all, run_faithful
    from vitdeploy.precision.half_precision import default_blocked_nodes, rewrite_to_half
    from vitdeploy.precision.report import read_metadata

    model = load_fp32_onnx(model_path)
    name, shape = image_input(model)
    cal_set = load_calibration_set(list(args.images), read_metadata(model), name, shape, min_images=2,
                                   max_images=args.max_images)
    _, held = cal_set.split(args.holdout)
    feeds = _calibration_feeds(held, shape[0])
    reference = run_all(ort_session(model, args.threads), feeds)
    naive = rewrite_to_half(model, list(default_blocked_nodes(model)))
    outputs = run_faithful(naive, feeds, args.threads)
    parity = compare_outputs(reference, outputs, "fp16")
    nonfinite = int(sum(int((~np.isfinite(v)).sum()) for out in outputs for v in out.values()))
    onnx.save_model(naive, str(model_path.with_name(model_path.stem + ".naive_fp16.onnx")))
    return {"cosine_vs_fp32": min(p.cosine for p in parity), "nonfinite": nonfinite,
            "kept": len(default_blocked_nodes(model)), "held_out_images": len(feeds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variant", action="append", choices=["vit_b", "vit_l", "vit_h"], default=[])
    parser.add_argument("--precision", action="append", choices=["fp16", "int8"], default=[])
    parser.add_argument("--images", action="append", default=[], help="calibration images (default: the bundled set)")
    parser.add_argument("--max-images", type=int, default=None)
    parser.add_argument("--holdout", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--eager-runs", type=int, default=3)
    parser.add_argument("--stress", action="store_true", help="also the vit_b stress model: naive FP16 vs vitdeploy FP16")
    parser.add_argument("--stress-scale", type=float, default=3e4)
    parser.add_argument("--onnx-dir", type=Path, default=None, help="reuse {variant}.onnx from here")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.images = args.images or [str(ROOT / "calibration" / "images")]
    precisions = args.precision or ["fp16", "int8"]
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict = {"cpu": cpu_name(), "threads": args.threads, "images": args.images, "holdout": args.holdout,
                     "max_images": args.max_images, "variants": {}}
    print(f"CPU: {results['cpu']}, {args.threads} threads", flush=True)
    for variant in args.variant:
        entry: dict = {}
        model = (args.onnx_dir or args.out) / f"{variant}.onnx"
        if not model.is_file():
            model = args.out / f"{variant}.onnx"
            entry.update(export(variant, model, args.out / f"{variant}.export.log"))
            print(f"{variant}: exported in {entry['export_s']} s", flush=True)
        eager = eager_forward_seconds(variant, args.eager_runs, args.threads)
        entry["eager_forward_s"] = [round(t, 2) for t in eager]
        # 12 forwards as a user's loop pays them: the first (warm-up) and 11 at the steady-state mean
        steady = eager[1:] or eager
        entry["eager_12_forwards_s"] = round(eager[0] + 11 * sum(steady) / len(steady), 1)
        print(f"{variant}: eager forward {entry['eager_forward_s']} s -> 12 forwards {entry['eager_12_forwards_s']} s", flush=True)
        entry["calibrate"] = []
        for precision in precisions:
            row = calibrate(model, precision, args.out, args)
            row["x_12_eager"] = round(row["wall_s"] / entry["eager_12_forwards_s"], 2)
            entry["calibrate"].append(row)
            print(f"{variant} {precision}: {json.dumps(row)}", flush=True)
        results["variants"][variant] = entry
        (args.out / "bench_calibration.json").write_text(json.dumps(results, indent=2))
    if args.stress:
        checkpoint = args.out / "vit_b_stress.pth"
        stress = {"weights": stress_checkpoint(checkpoint, args.stress_scale)}
        model = args.out / "vit_b_stress.onnx"
        stress.update(export("vit_b", model, args.out / "vit_b_stress.export.log", checkpoint))
        stress["naive_fp16"] = naive_fp16(model, args)
        print(f"stress naive fp16: {stress['naive_fp16']}", flush=True)
        stress["vitdeploy_fp16"] = calibrate(model, "fp16", args.out, args, checkpoint)
        print(f"stress vitdeploy fp16: {json.dumps(stress['vitdeploy_fp16'])}", flush=True)
        results["stress"] = stress
        (args.out / "bench_calibration.json").write_text(json.dumps(results, indent=2))
    print(f"\n{results['cpu']}, {args.threads} threads\n")
    print("| model | precision | calibrate | x 12 eager fwd | peak RSS | kept (of nodes) | cosine vs FP32 | cosine vs eager |")
    print("|---|---|---|---|---|---|---|---|")
    for variant, entry in results["variants"].items():
        for row in entry["calibrate"]:
            print(f"| {variant} | {row['precision']} | {row['wall_s']:.0f} s | {row['x_12_eager']} | {row['peak_rss_gb']} GB | "
                  f"{row.get('kept')} ({row.get('nodes')}) | {row.get('cosine_vs_fp32')} | {row.get('cosine_vs_eager')} |")
    print(f"\nfull results: {args.out / 'bench_calibration.json'}")


if __name__ == "__main__":
    main()
