"""Does batching prompts pay in SAM's decoder on the CPU? The official eager prompt encoder + mask decoder
(ViT-B/L/H share it; random weights) run P single-click prompts per call against one image embedding, as
``SamAutomaticMaskGenerator`` does with ``points_per_batch``; time per prompt for each P, rounds
alternated, same thread count. vitdeploy's decoder graph has a static batch of one (one prompt set per
call), so ``segment-all`` runs its grid point by point: this benchmark is the measurement behind that.

Usage:
    .venv/bin/python benchmarks/bench_decoder_batching.py --threads 2 --batches 1 8 64 --rounds 3 --seconds 4
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from vitdeploy.cpu_features import cpu_features
from vitdeploy.models.sam_arch import SamDecoderArch
from vitdeploy.models.sam_decoder import load_sam_prompt_decoder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0, help="time per batch size per round")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = load_sam_prompt_decoder(SamDecoderArch(), random_seed=0).eval()
    embedding = torch.randn(1, 256, 64, 64)
    dense_pe = model.prompt_encoder.get_dense_pe()

    def run(batch: int) -> None:
        coords = torch.rand(batch, 2, 2) * 1024
        labels = torch.tensor([[1.0, -1.0]]).repeat(batch, 1)  # one click + the padding point, as the grid sends
        with torch.inference_mode():
            sparse, dense = model.prompt_encoder(points=(coords, labels), boxes=None, masks=None)
            model.mask_decoder(embedding, dense_pe, sparse, dense, multimask_output=True)

    per_prompt: dict[int, list[float]] = {b: [] for b in args.batches}
    for b in args.batches:
        run(b)  # warm-up
    for _ in range(args.rounds):
        for b in args.batches:
            start, prompts = time.perf_counter(), 0
            while time.perf_counter() - start < args.seconds:
                run(b)
                prompts += b
            per_prompt[b].append((time.perf_counter() - start) / prompts * 1000)
    print(f"CPU: {cpu_features().summary()}, {args.threads} thread(s), torch {torch.__version__}")
    print("| prompts per call | ms per prompt (median of rounds) | rounds | × batch 1 |")
    print("|---:|---:|---|---:|")
    base = statistics.median(per_prompt[args.batches[0]])
    for b in args.batches:
        med = statistics.median(per_prompt[b])
        print(f"| {b} | {med:.1f} | {', '.join(f'{x:.1f}' for x in per_prompt[b])} | {med / base:.2f} |")
    if args.out:
        args.out.write_text(json.dumps({"cpu": cpu_features().summary(), "threads": args.threads,
                                        "ms_per_prompt": {str(b): v for b, v in per_prompt.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
