"""SAM 3's detector at full size (1008 px: a 72x72 grid, 200 queries, 6+6 layers; seeded random weights), per prompt
once the image and text are encoded: the official ``Sam3Image.forward_grounding`` (eager PyTorch) against the exported
graph on ONNX Runtime and OpenVINO (FP32, and OpenVINO at BF16, its own default on a CPU with BF16 units), alternated
in one process, every output compared with the official (issue 53).

Two prompts: a text prompt alone (every box slot padding) and a text prompt with one exemplar box.

Usage (the file is exported once into --out):
    PYTHONPATH=. .venv/bin/python benchmarks/bench_sam3_detector.py --rounds 3 --threads 2
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from pathlib import Path

import numpy as np

OUTPUTS = ("pred_logits", "pred_boxes", "pred_masks", "presence_logit")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("out/sam3_bench"))
    parser.add_argument("--no-bf16", action="store_true", help="leave out OpenVINO at BF16")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    import torch

    from vitdeploy.cpu_features import cpu_features
    from vitdeploy.families import FAMILIES
    from vitdeploy.models.recipes import load_recipe
    from vitdeploy.models.sam3_detector import Sam3DetectorArch, build_position_encoding, load_sam3_detector
    from vitdeploy.parity import compare
    from vitdeploy.pipeline import export_from_recipe
    from vitdeploy.rewrites.sam3_detector import INPUT_NAMES, Sam3Detector
    from vitdeploy.runtime.deploy.loader import open_runner

    torch.set_num_threads(args.threads)
    path = args.out / "sam3_detector.onnx"
    report: dict = {"cpu": cpu_features().summary(), "threads": args.threads}
    if not path.is_file():
        start = time.perf_counter()
        export_from_recipe("sam3_detector", path, random_weights=True, seed=0)
        report["export_s"] = round(time.perf_counter() - start, 1)
    report["file_bytes"] = sum(p.stat().st_size for p in args.out.iterdir() if p.name.startswith(path.name))
    arch = Sam3DetectorArch.from_dict(load_recipe("sam3_detector").architecture)
    official = Sam3Detector(load_sam3_detector(arch, random_seed=0), build_position_encoding(arch.d_model)).eval()
    family = FAMILIES["sam3_detector"]
    prompts = {}
    for name, boxes in (("text only", 0), ("text + 1 box", 1)):
        slots = int(load_recipe("sam3_detector").extra["detector"]["max_boxes"])
        feeds = family.example_feeds(arch.grid, arch.d_model, 1, slots, seed=boxes)
        feeds["text_padding"][:] = np.arange(32)[None, :] >= 5  # start, 3 words, end
        feeds["box_padding"][:] = np.arange(slots)[None, :] >= boxes
        prompts[name] = feeds
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
        fn(prompts["text only"])
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(args.rounds):
        for name, fn in contenders.items():
            for feeds in prompts.values():
                t0 = time.perf_counter()
                fn(feeds)
                times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["official eager"])
    report["rows"] = {name: {"median_ms": round(1e3 * statistics.median(t), 1),
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
