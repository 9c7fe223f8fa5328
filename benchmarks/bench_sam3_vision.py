"""SAM 3's vision encoder at full size (1008 px, random weights): the official ``SAM3VLBackbone.forward_image`` (eager
PyTorch) against vitdeploy's export on ONNX Runtime / OpenVINO, and against the plain ``torch.onnx.export`` of the
official module (what anyone can export), each contender in a fresh process, rounds alternated (issue 53).

Per image = Sam3Processor's preprocessing + the vision encoder. Each contender loads, runs ``--warmup`` images, times
``--runs`` (median reported) and reports its peak RSS; its outputs on the last image are compared with the
official's (cosine, relative L2 per feature level). The export's wall time and file sizes are reported once.

Usage (the files are exported once into --out; about 7 GB of disk):
    PYTHONPATH=. .venv/bin/python benchmarks/bench_sam3_vision.py --rounds 1 --runs 2 --threads 2
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

from benchmarks.bench_sam2 import peak_rss_mb
from benchmarks.options import parsed, timing_options

RECIPE = "sam3"
OUTPUTS = tuple(f"backbone_fpn_{i}" for i in range(3)) + ("image_embed", "high_res_feats_0", "high_res_feats_1")


def images() -> list[np.ndarray]:
    from vitdeploy.precision.calibration_data import bundled_calibration_dir
    from vitdeploy.runtime.processing.images import read_image_rgb

    return [read_image_rgb(p) for p in sorted(bundled_calibration_dir().glob("*.jpg"))[:4]]


def official_module():
    from vitdeploy.models.recipes import load_recipe
    from vitdeploy.models.sam3_vision_encoder import Sam3VisionArch, load_sam3_vision_parts
    from vitdeploy.rewrites.sam3_vision_encoder import Sam3VisionEncoder

    parts = load_sam3_vision_parts(Sam3VisionArch.from_dict(load_recipe(RECIPE).architecture), random_seed=0)
    return Sam3VisionEncoder(parts.backbone, parts.heads)


def export_plain(out: Path) -> float:
    """The official module through ``torch.onnx.export(dynamo=True)`` as it is (no rewrite); returns seconds."""
    import torch

    module = official_module().eval()
    example = torch.randn(1, 3, 1008, 1008)
    start = time.perf_counter()
    with torch.no_grad():
        torch.onnx.export(module, (example,), str(out), dynamo=True, input_names=["image"], output_names=list(OUTPUTS),
                          external_data=True, optimize=True)
    return time.perf_counter() - start


def contender(kind: str, out: Path, warmup: int, runs: int, threads: int, runtime: str,
              precision: str | None = None) -> dict:
    from vitdeploy.runtime.processing.sam3_transforms import Sam3Preprocessor

    pictures = images()
    prep = Sam3Preprocessor(1008, (127.5,) * 3, (127.5,) * 3)
    start = time.perf_counter()
    if kind == "official":
        import torch

        torch.set_num_threads(threads)
        module = official_module().eval()

        def forward(x):
            with torch.inference_mode():
                return [t.numpy() for t in module(torch.from_numpy(x))]
        label = "official eager (PyTorch)"
    else:
        from vitdeploy.runtime.deploy.loader import open_runner

        path = out / ("sam3_plain.onnx" if kind == "plain" else f"{RECIPE}.onnx")
        runner = open_runner(path, threads=threads, runtime="onnxruntime" if kind == "plain" else runtime,
                             precision=None if kind == "plain" else precision)

        def forward(x):
            result = runner.run({"image": x})
            return [np.asarray(result[name]) for name in runner.output_names]
        label = "plain export of the official module (ONNX Runtime)" if kind == "plain" else \
            f"vitdeploy ({runner.provider or runner.name})"
    load_s = time.perf_counter() - start
    times, last = [], None
    for k in range(warmup + runs):
        t0 = time.perf_counter()
        last = forward(prep(pictures[k % len(pictures)]))
        if k >= warmup:
            times.append(time.perf_counter() - t0)
    np.savez(out / f"outputs_{kind}.npz", **dict(zip(OUTPUTS, last)))
    return {"contender": label, "load_s": round(load_s, 2), "median_ms": round(1e3 * statistics.median(times), 1),
            "runs_ms": [round(1e3 * t, 1) for t in times], "peak_rss_mb": peak_rss_mb()}


def agreement(out: Path, kind: str) -> list[dict]:
    from vitdeploy.parity import compare

    want, got = np.load(out / "outputs_official.npz"), np.load(out / f"outputs_{kind}.npz")
    rows = []
    for key in want.files:
        result = compare(want[key], got[key], "fp32", label=key)
        rows.append({"output": key, "cosine": round(result.cosine, 8), "rel_l2": float(f"{result.rel_l2:.3g}")})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    timing_options(parser, out="out/sam3_bench", rounds=1, runs=2, warmup=1, child=("RECIPE",),
                   precision="vitdeploy's precision policy (file, bf16)")
    parser.add_argument("--no-plain", action="store_true", help="leave out the plain export of the official module")
    parser.add_argument("--only", nargs="+", choices=["vitdeploy", "plain"], help="these contenders (and the official)")
    args = parsed(parser)
    if args.contender:
        print(json.dumps(contender(args.contender, args.out, args.warmup, args.runs, args.threads, args.runtime,
                                   args.inference_precision)))
        return
    from vitdeploy.cpu_features import cpu_features
    from vitdeploy.pipeline import export_from_recipe

    print(f"CPU: {cpu_features().summary()}; {args.threads} thread(s)", flush=True)
    report: dict = {"cpu": cpu_features().summary(), "threads": args.threads, "exports": {}, "rows": {}}
    ours = args.out / f"{RECIPE}.onnx"
    kinds = ["official", "vitdeploy"] + ([] if args.no_plain else ["plain"])
    if args.only:
        kinds = ["official"] + [k for k in kinds if k in args.only and k != "official"]
    for kind, path in (("vitdeploy", ours), ("plain", args.out / "sam3_plain.onnx")):
        if kind not in kinds:
            continue
        if not path.is_file():
            start = time.perf_counter()
            seconds = (export_from_recipe(RECIPE, path, random_weights=True, seed=0) and time.perf_counter() - start) \
                if kind == "vitdeploy" else export_plain(path)
            report["exports"][kind] = {"seconds": round(seconds, 1)}
        files = [p for p in args.out.iterdir() if p.name.startswith(path.stem)]
        report["exports"].setdefault(kind, {})["bytes"] = sum(p.stat().st_size for p in files)
        print(f"{kind} export: {report['exports'][kind]}", flush=True)
    rows: dict[str, list[dict]] = {kind: [] for kind in kinds}
    for _ in range(args.rounds):
        for kind in kinds:
            done = subprocess.run([sys.executable, __file__, "--contender", kind, "--out", str(args.out), "--runs",
                                   str(args.runs), "--warmup", str(args.warmup), "--threads", str(args.threads),
                                   "--runtime", args.runtime]
                                  + (["--inference-precision", args.inference_precision] if args.inference_precision else []),
                                  capture_output=True, text=True, check=False)
            if done.returncode:
                raise SystemExit(f"{kind} failed:\n{done.stderr[-3000:]}")
            row = json.loads(done.stdout.strip().splitlines()[-1])
            rows[kind].append(row)
            print(json.dumps(row), flush=True)
    base = statistics.median(r["median_ms"] for r in rows["official"])
    for kind in kinds:
        median = statistics.median(r["median_ms"] for r in rows[kind])
        report["rows"][kind] = {"contender": rows[kind][-1]["contender"], "median_ms": median,
                                "vs_official": round(median / base, 3),
                                "peak_rss_mb": max(r["peak_rss_mb"] for r in rows[kind]),
                                "load_s": rows[kind][-1]["load_s"]}
        if kind != "official":
            report["rows"][kind]["agreement"] = agreement(args.out, kind)
    print(json.dumps(report, indent=2))
    (args.out / "report.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
