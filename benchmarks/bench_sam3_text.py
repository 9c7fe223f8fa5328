"""SAM 3's text encoder at full size (24 layers of width 1024, context 32; seeded random weights), per text prompt:
the official ``VETextEncoder.forward(strings)`` (its own tokenizer, eager PyTorch) against vitdeploy's ClipTokenizer +
the exported graph on ONNX Runtime and OpenVINO, alternated in one process, with the outputs compared (issue 53).

Usage (the file is exported once into --out, 1.4 GB):
    PYTHONPATH=. .venv/bin/python benchmarks/bench_sam3_text.py --rounds 3 --threads 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

PROMPTS = ["yellow school bus", "a person riding a bicycle", "dog", "the red car on the left", "striped umbrella"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("out/sam3_bench"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    import torch
    from sam3.model.tokenizer_ve import SimpleTokenizer

    from vitdeploy.cpu_features import cpu_features
    from vitdeploy.models.recipes import load_recipe
    from vitdeploy.models.sam3_text_encoder import Sam3TextArch, load_sam3_text
    from vitdeploy.parity import compare
    from vitdeploy.pipeline import export_from_recipe
    from vitdeploy.runtime.deploy.loader import open_runner
    from vitdeploy.runtime.processing.clip_tokenizer import ClipTokenizer, default_vocab

    torch.set_num_threads(args.threads)
    path = args.out / "sam3_text.onnx"
    report: dict = {"cpu": cpu_features().summary(), "threads": args.threads}
    if not path.is_file():
        start = time.perf_counter()
        export_from_recipe("sam3_text", path, random_weights=True, seed=0)
        report["export_s"] = round(time.perf_counter() - start, 1)
    report["file_bytes"] = sum(p.stat().st_size for p in args.out.iterdir() if p.name.startswith(path.name))
    official = load_sam3_text(Sam3TextArch.from_dict(load_recipe("sam3_text").architecture), random_seed=0)
    official.tokenizer = SimpleTokenizer(bpe_path=str(default_vocab()))
    tokenizer = ClipTokenizer()
    runners = {name: open_runner(path, runtime=name, threads=args.threads) for name in ("onnxruntime", "openvino")}

    def eager(text: str):
        with torch.inference_mode():
            _, memory, embeds = official([text], device=torch.device("cpu"))
        return memory.transpose(0, 1).numpy(), embeds.transpose(0, 1).numpy()

    def ours(name: str, text: str):
        out = runners[name].run({"tokens": tokenizer([text])})
        return out["text_memory"], out["text_embeds"]

    contenders = {"official eager": eager, **{f"vitdeploy {n}": (lambda t, n=n: ours(n, t)) for n in runners}}
    for fn in contenders.values():  # warm-up
        fn(PROMPTS[0])
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(args.rounds):
        for name, fn in contenders.items():
            for text in PROMPTS:
                t0 = time.perf_counter()
                fn(text)
                times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["official eager"])
    report["rows"] = {name: {"median_ms": round(1e3 * statistics.median(t), 2),
                             "vs_official": round(statistics.median(t) / base, 3)} for name, t in times.items()}
    want = eager(PROMPTS[1])
    for name in runners:
        got = ours(name, PROMPTS[1])
        report["rows"][f"vitdeploy {name}"]["agreement"] = [
            {"output": key, "cosine": round(r.cosine, 8), "rel_l2": float(f"{r.rel_l2:.3g}")}
            for key, a, b in zip(("text_memory", "text_embeds"), want, got)
            for r in [compare(a, np.asarray(b), "fp32", label=key)]]
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
