"""Full-size SAM ViT-B encoder at 1024x1024 (random weights): eager official PyTorch vs ONNX Runtime on
the naive export of the official module vs ONNX Runtime on vitdeploy's rewritten export.

One run, same thread count for everyone, contenders alternated round by round so machine drift hits
all of them alike; reports medians and ratios to eager. Usage:

    .venv/bin/python benchmarks/bench_sam_encoder.py --threads 2 --rounds 5 --out out/bench_sam_encoder.json
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.options import write_report
from vitdeploy.metadata import tool_versions
from vitdeploy.models.recipes import load_recipe
from vitdeploy.models.sam_encoder import SamEncoderArch, load_sam_image_encoder
from vitdeploy.onnx_export.hygiene import check_graph_hygiene
from vitdeploy.onnx_export.sam_encoder import export_sam_image_encoder, sam_encoder_metadata
from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner
from vitdeploy.validation.latency import stats_from_samples
from vitdeploy.parity import compare


def export_naive(encoder: torch.nn.Module, path: Path, size: int) -> dict:
    """What a user gets from torch.onnx.export on the official module (torch's default exporter)."""
    import onnx

    x = torch.randn(1, 3, size, size)
    with torch.no_grad():
        torch.onnx.export(encoder, (x,), None, dynamo=True, opset_version=18, input_names=["image"],
                          output_names=["image_embeddings"], verbose=False).save(str(path))
    report = check_graph_hygiene(onnx.shape_inference.infer_shapes(onnx.load(str(path), load_external_data=False)))
    return report.to_dict()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="sam_vit_b")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5, help="timed runs per contender (alternated)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    recipe = load_recipe(args.recipe)
    arch = SamEncoderArch.from_recipe(recipe)
    size = arch.img_size
    encoder = load_sam_image_encoder(arch, random_seed=0)
    tmp = Path(tempfile.mkdtemp(prefix="vitdeploy-bench-"))
    print(f"exporting naive and rewritten {args.recipe} to {tmp} ...", flush=True)
    t0 = time.perf_counter()
    naive_hygiene = export_naive(encoder, tmp / "naive.onnx", size)
    t_naive = time.perf_counter() - t0
    meta = sam_encoder_metadata(variant=recipe.variant, input_size=size, pixel_mean=recipe.pixel_mean,
                                pixel_std=recipe.pixel_std, architecture=arch.to_dict(), random_seed=0)
    t0 = time.perf_counter()
    rewritten = export_sam_image_encoder(encoder, tmp / "vitdeploy.onnx", metadata=meta)
    t_rewritten = time.perf_counter() - t0

    x = np.random.default_rng(0).standard_normal((1, 3, size, size)).astype(np.float32)
    xt = torch.from_numpy(x)
    naive = OnnxRuntimeRunner(tmp / "naive.onnx", threads=args.threads)
    ours = OnnxRuntimeRunner(rewritten.path, threads=args.threads)

    def eager() -> np.ndarray:
        with torch.inference_mode():
            return encoder(xt).numpy()

    contenders = {
        "eager official (torch)": eager,
        "ORT, naive export of official": lambda: naive.run({"image": x})["image_embeddings"],
        "ORT, vitdeploy rewritten export": lambda: ours.run({"image": x})["image_embeddings"],
    }
    outputs = {name: fn() for name, fn in contenders.items()}  # also the first warm-up
    for _ in range(args.warmup - 1):
        for fn in contenders.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for r in range(args.rounds):
        for name, fn in contenders.items():
            start = time.perf_counter()
            fn()
            samples[name].append((time.perf_counter() - start) * 1000)
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{n} {s[-1]:.0f} ms" for n, s in samples.items()), flush=True)

    ref = outputs["eager official (torch)"]
    stats = {name: stats_from_samples(name, s, args.warmup) for name, s in samples.items()}
    eager_ms = stats["eager official (torch)"].median_ms
    rows = []
    for name, st in stats.items():
        parity = compare(ref, outputs[name], "fp32", label=name)
        rows.append({"contender": name, "median_ms": st.median_ms, "p90_ms": st.p90_ms, "ratio_to_eager": st.median_ms / eager_ms,
                     "cosine": parity.cosine, "rel_l2": parity.rel_l2})
    print(f"\n{args.recipe} encoder {size}x{size}, {args.threads} threads, {args.rounds} alternated rounds, "
          f"{platform.processor() or platform.machine()}")
    print(f"{'contender':<34} {'median ms':>10} {'p90 ms':>10} {'x eager':>8} {'cosine':>12} {'rel L2':>9}")
    for row in rows:
        print(f"{row['contender']:<34} {row['median_ms']:>10.0f} {row['p90_ms']:>10.0f} {row['ratio_to_eager']:>8.3f} "
              f"{row['cosine']:>12.8f} {row['rel_l2']:>9.2e}")
    print(f"naive graph problems: {len(naive_hygiene['problems'])}; naive ops: "
          + ", ".join(f"{k} {v}" for k, v in naive_hygiene["op_counts"].items() if k in {"Einsum", "Pad", "Shape", "Range", "Slice"}))
    report = {
        "recipe": args.recipe, "input_size": size, "threads": args.threads, "rounds": args.rounds, "rows": rows,
        "export_seconds": {"naive": t_naive, "rewritten": t_rewritten},
        "naive_hygiene": naive_hygiene, "rewritten_hygiene": rewritten.hygiene.to_dict(),
        "machine": platform.machine(), "processor": platform.processor(), "versions": tool_versions(),
    }
    write_report(args.out, report)


if __name__ == "__main__":
    main()
