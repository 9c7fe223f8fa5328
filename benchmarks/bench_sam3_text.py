"""SAM 3's text encoder at full size (24 layers of width 1024, context 32; seeded random weights), per text prompt:
the official ``VETextEncoder.forward(strings)`` (its own tokenizer, eager PyTorch) against vitdeploy's ClipTokenizer +
the exported graph on ONNX Runtime and OpenVINO, alternated in one process, with the outputs compared (issue 53).

Usage (the file is exported once into --out, 1.4 GB):
    PYTHONPATH=. .venv/bin/python benchmarks/bench_sam3_text.py --rounds 3 --threads 2
"""

from __future__ import annotations

import json

from benchmarks.part_harness import agreement, alternate, arguments, exported, runners

PROMPTS = ["yellow school bus", "a person riding a bicycle", "dog", "the red car on the left", "striped umbrella"]


def main() -> None:
    args = arguments(__doc__, rounds=3, bf16=False)

    import torch
    from sam3.model.tokenizer_ve import SimpleTokenizer

    from vitdeploy.models.recipes import load_recipe
    from vitdeploy.models.sam3_text_encoder import Sam3TextArch, load_sam3_text
    from vitdeploy.runtime.processing.clip_tokenizer import ClipTokenizer, default_vocab

    path, report = exported("sam3_text", args.out, args.threads)
    official = load_sam3_text(Sam3TextArch.from_dict(load_recipe("sam3_text").architecture), random_seed=0)
    official.tokenizer = SimpleTokenizer(bpe_path=str(default_vocab()))
    tokenizer = ClipTokenizer()
    ours = runners(path, args.threads, bf16=False)

    def eager(text: str):
        with torch.inference_mode():
            _, memory, embeds = official([text], device=torch.device("cpu"))
        return memory.transpose(0, 1).numpy(), embeds.transpose(0, 1).numpy()

    def run(name: str, text: str):
        out = ours[name].run({"tokens": tokenizer([text])})
        return out["text_memory"], out["text_embeds"]

    contenders = {"official eager": eager, **{n: (lambda t, n=n: run(n, t)) for n in ours}}
    report["rows"] = alternate(contenders, PROMPTS, args.rounds, warm_every_input=False)
    want = eager(PROMPTS[1])
    for name in ours:
        report["rows"][name]["agreement"] = agreement(("text_memory", "text_embeds"), want, run(name, PROMPTS[1]))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
