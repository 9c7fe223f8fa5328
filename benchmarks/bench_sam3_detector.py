"""SAM 3's detector at full size (1008 px: a 72x72 grid, 200 queries, 6+6 layers; seeded random weights), per prompt
once the image and text are encoded: the official ``Sam3Image.forward_grounding`` (eager PyTorch) against the exported
graph on ONNX Runtime and OpenVINO (FP32, and OpenVINO at BF16, its own default on a CPU with BF16 units), alternated
in one process, every output compared with the official (issue 53).

Two prompts: a text prompt alone (every box slot padding) and a text prompt with one exemplar box.

Usage (the file is exported once into --out):
    PYTHONPATH=. .venv/bin/python benchmarks/bench_sam3_detector.py --rounds 3 --threads 2
"""

from __future__ import annotations

import numpy as np

from benchmarks.part_harness import arguments, exported, runners, time_and_compare

OUTPUTS = ("pred_logits", "pred_boxes", "pred_masks", "presence_logit")


def main() -> None:
    args = arguments(__doc__, rounds=3)

    from vitdeploy.families import FAMILIES
    from vitdeploy.models.recipes import load_recipe
    from vitdeploy.models.sam3_detector import Sam3DetectorArch, build_position_encoding, load_sam3_detector
    from vitdeploy.rewrites.sam3_detector import INPUT_NAMES, Sam3Detector

    path, report = exported("sam3_detector", args.out, args.threads)
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
    ours = runners(path, args.threads, bf16=not args.no_bf16)
    time_and_compare(report, official, ours, prompts, INPUT_NAMES, OUTPUTS, args.rounds, digits=1, warm_every_input=False)


if __name__ == "__main__":
    main()
