"""SAM 2.1's image path per image: the official SAM2ImagePredictor (eager PyTorch) against vitdeploy's
Sam2ImagePredictor on the exported files, each contender in a fresh process, rounds alternated (issue 37).

Per image = ``set_image`` + one single-click ``predict`` (what an annotation click costs on a new image). Each
contender process loads its model, runs ``--warmup`` images, then times ``--runs`` (median reported), and
reports its peak RSS. vitdeploy runs as ``--runtime`` chooses (default ``auto``: this CPU's default for the file).
The masks of the two are compared (IoU of the best mask) on the last image.

Usage (random weights; the files are exported once into --out):
    PYTHONPATH=. .venv/bin/python benchmarks/bench_sam2.py --sizes tiny base_plus --rounds 2 --runs 3 --threads 2
    (and --runtime openvino --inference-precision bf16 for OpenVINO's BF16 on AMX/AVX512-BF16 CPUs)
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.options import parsed, timing_options

SIZES = {"tiny": "sam2.1_hiera_tiny", "small": "sam2.1_hiera_small", "base_plus": "sam2.1_hiera_base_plus",
         "large": "sam2.1_hiera_large"}
CLICK = [[160.0, 120.0]]


def images() -> list[np.ndarray]:
    from vitdeploy.precision.calibration_data import bundled_calibration_dir
    from vitdeploy.runtime.processing.images import read_image_rgb

    return [read_image_rgb(p) for p in sorted(bundled_calibration_dir().glob("*.jpg"))[:6]]


def contender(kind: str, recipe: str, out: Path, warmup: int, runs: int, threads: int, runtime: str,
              precision: str | None = None) -> dict:
    """Runs in a fresh process: load, warm up, time; returns figures and the last best mask (for agreement)."""
    pictures = images()
    start = time.perf_counter()
    if kind == "official":
        import torch
        from sam2.sam2_image_predictor import SAM2ImagePredictor

        from vitdeploy.models.recipes import load_recipe
        from vitdeploy.models.sam2 import Sam2Arch, load_sam2

        torch.set_num_threads(threads)
        predictor = SAM2ImagePredictor(load_sam2(Sam2Arch.from_dict(load_recipe(recipe).architecture), random_seed=0))
        context = torch.inference_mode
        label = "official eager (PyTorch)"
    else:
        import contextlib

        from vitdeploy.runtime.apps.sam2.image_predictor import Sam2ImagePredictor

        predictor = Sam2ImagePredictor(out / f"{recipe}.onnx", out / f"{recipe}_decoder.onnx", threads=threads, runtime=runtime,
                                       inference_precision=precision)
        context = contextlib.nullcontext
        label = f"vitdeploy ({predictor.encoder.provider or predictor.encoder.name})"
    load_s = time.perf_counter() - start
    times, best = [], None
    for k in range(warmup + runs):
        picture = pictures[k % len(pictures)]
        t0 = time.perf_counter()
        with context():
            predictor.set_image(picture)
            masks, scores, _ = predictor.predict(point_coords=np.array(CLICK), point_labels=np.array([1]))
        if k >= warmup:
            times.append(time.perf_counter() - t0)
        best = np.asarray(masks[int(np.argmax(scores))]) > 0.5
    np.save(out / f"mask_{kind}_{recipe}.npy", best)
    return {"contender": label, "load_s": round(load_s, 2), "median_ms": round(1e3 * statistics.median(times), 1),
            "runs_ms": [round(1e3 * t, 1) for t in times],
            "peak_rss_mb": peak_rss_mb()}


def _status_mb(field: str) -> float | None:
    """A memory field of this process's ``/proc/self/status`` in MB, or None where there is none (not Linux)."""
    status = Path("/proc/self/status")
    for line in status.read_text().splitlines() if status.is_file() else ():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return None


def peak_rss_mb() -> float:
    """This process's peak resident memory: ``VmHWM`` (``ru_maxrss`` survives exec on Linux, so a child started by a
    process that had exported a model would report that process's peak)."""
    peak = _status_mb("VmHWM")
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 if peak is None else peak, 1)


def rss_mb() -> float:
    """This process's resident memory now (``VmRSS``; NaN where there is no /proc)."""
    now = _status_mb("VmRSS")
    return float("nan") if now is None else now


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["tiny", "base_plus"], choices=list(SIZES))
    timing_options(parser, out="out/sam2_bench", rounds=2, runs=3, warmup=1, child=("KIND", "RECIPE"),
                   precision="vitdeploy's encoder precision policy (file, bf16)")
    args = parsed(parser)
    if args.contender:
        print(json.dumps(contender(*args.contender, args.out, args.warmup, args.runs, args.threads, args.runtime,
                                   args.inference_precision)))
        return
    from vitdeploy.cpu_features import cpu_features
    from vitdeploy.pipeline import export_from_recipe

    print(f"CPU: {cpu_features().summary()}; {args.threads} thread(s)", flush=True)
    report = {"cpu": cpu_features().summary(), "threads": args.threads, "rows": {}}
    for size in args.sizes:
        recipe = SIZES[size]
        for suffix in ("", "_decoder"):
            path = args.out / f"{recipe}{suffix}.onnx"
            if not path.is_file():
                export_from_recipe(recipe + suffix, path, random_weights=True, seed=0)
        rows: dict[str, list[dict]] = {"official": [], "vitdeploy": []}
        for _ in range(args.rounds):
            for kind in ("official", "vitdeploy"):
                done = subprocess.run([sys.executable, __file__, "--contender", kind, recipe, "--out", str(args.out),
                                       "--runs", str(args.runs), "--warmup", str(args.warmup), "--threads", str(args.threads),
                                       "--runtime", args.runtime,
                                       *(["--inference-precision", args.inference_precision] if args.inference_precision else [])],
                                      capture_output=True, text=True, check=True)
                rows[kind].append(json.loads(done.stdout.strip().splitlines()[-1]))
        a, b = np.load(args.out / f"mask_official_{recipe}.npy"), np.load(args.out / f"mask_vitdeploy_{recipe}.npy")
        iou = float((a & b).sum() / max((a | b).sum(), 1))
        eager = statistics.median(r["median_ms"] for r in rows["official"])
        for kind, results in rows.items():
            median = statistics.median(r["median_ms"] for r in results)
            line = {"size": size, "contender": results[0]["contender"], "median_ms": median,
                    "x_eager": round(median / eager, 3), "peak_rss_mb": max(r["peak_rss_mb"] for r in results),
                    "load_s": statistics.median(r["load_s"] for r in results), "best_mask_iou": iou}
            report["rows"].setdefault(size, []).append(line)
            print(json.dumps(line), flush=True)
    (args.out / "sam2_bench.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
