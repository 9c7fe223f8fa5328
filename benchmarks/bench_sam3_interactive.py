"""SAM 3's interactive (click) decoder at full size (1008 px: a 72x72 grid, 288x288 low-resolution masks; seeded
random weights), per prompt once the image is encoded: the official prompt encoder + mask decoder (the tracker's SAM
heads, called as ``SAM3InteractiveImagePredictor._predict`` calls them) against the exported graph on ONNX Runtime
and OpenVINO (FP32, and BF16: OpenVINO's own default on a CPU with BF16 units), alternated in one process, every output
compared with the official (issue 53).

Two prompts: one click, and a box with a click and a mask prompt.

Usage (the file is exported once into --out):
    PYTHONPATH=. .venv/bin/python benchmarks/bench_sam3_interactive.py --rounds 5 --threads 2
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from pathlib import Path

import numpy as np

OUTPUTS = ("low_res_masks", "iou_predictions", "object_score_logits", "mask_tokens")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("out/sam3_bench"))
    parser.add_argument("--no-bf16", action="store_true", help="leave out OpenVINO at BF16")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    import torch

    from vitdeploy.cpu_features import cpu_features
    from vitdeploy.families import FAMILIES
    from vitdeploy.metadata import read_onnx_metadata
    from vitdeploy.parity import compare
    from vitdeploy.pipeline import export_from_recipe
    from vitdeploy.rewrites.sam2_decoder import INPUT_NAMES
    from vitdeploy.runtime.deploy.loader import open_runner

    torch.set_num_threads(args.threads)
    path = args.out / "sam3_interactive.onnx"
    report: dict = {"cpu": cpu_features().summary(), "threads": args.threads}
    if not path.is_file():
        start = time.perf_counter()
        export_from_recipe("sam3_interactive", path, random_weights=True, seed=0)
        report["export_s"] = round(time.perf_counter() - start, 1)
    report["file_bytes"] = path.stat().st_size
    metadata = read_onnx_metadata(path)
    family = FAMILIES["sam3_interactive_decoder"]
    official = family.eager_reference(metadata, None)
    sets = family.random_input_sets(metadata, [], {}, 2, seed=0)
    prompts = {"one click": sets[0].feeds, "box + click + mask": sets[1].feeds}
    prompts["one click"] = {**prompts["one click"], "point_coords": prompts["one click"]["point_coords"][:, :1],
                            "point_labels": np.ones((1, 1), np.float32)}
    runners = {"vitdeploy onnxruntime": open_runner(path, runtime="onnxruntime", threads=args.threads),
               "vitdeploy openvino f32": open_runner(path, runtime="openvino", threads=args.threads)}
    if not args.no_bf16:
        runners["openvino bf16"] = open_runner(path, runtime="openvino", threads=args.threads, precision="bf16")

    def eager(feeds):
        with torch.inference_mode():
            return [t.numpy() for t in official(*(torch.from_numpy(feeds[n]) for n in INPUT_NAMES))]

    def ours(name, feeds):
        out = runners[name].run(feeds)
        return [out[n] for n in OUTPUTS]

    contenders = {"official eager": eager, **{n: (lambda f, n=n: ours(n, f)) for n in runners}}
    for fn in contenders.values():  # warm-up (OpenVINO compiles on its first call)
        for feeds in prompts.values():
            fn(feeds)
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(args.rounds):
        for name, fn in contenders.items():
            for feeds in prompts.values():
                t0 = time.perf_counter()
                fn(feeds)
                times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["official eager"])
    report["rows"] = {name: {"median_ms": round(1e3 * statistics.median(t), 2),
                             "vs_official": round(statistics.median(t) / base, 3)} for name, t in times.items()}
    for prompt, feeds in prompts.items():
        want = eager(feeds)
        for name in runners:
            got = ours(name, feeds)
            report["rows"][name].setdefault("agreement", {})[prompt] = [
                {"output": key, "cosine": round(r.cosine, 8), "rel_l2": float(f"{r.rel_l2:.3g}")}
                for key, a, b in zip(OUTPUTS, want, got) for r in [compare(a, np.asarray(b), "fp32", label=key)]]
    report["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
