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

import json
import resource

import numpy as np

from benchmarks.part_harness import agreement, alternate, arguments, exported, runners

OUTPUTS = ("low_res_masks", "iou_predictions", "object_score_logits", "mask_tokens")


def main() -> None:
    args = arguments(__doc__, rounds=5)

    import torch

    from vitdeploy.families import FAMILIES
    from vitdeploy.metadata import read_onnx_metadata
    from vitdeploy.rewrites.sam2_decoder import INPUT_NAMES

    path, report = exported("sam3_interactive", args.out, args.threads)
    metadata = read_onnx_metadata(path)
    family = FAMILIES["sam3_interactive_decoder"]
    official = family.eager_reference(metadata, None)
    sets = family.random_input_sets(metadata, [], {}, 2, seed=0)
    prompts = {"one click": sets[0].feeds, "box + click + mask": sets[1].feeds}
    prompts["one click"] = {**prompts["one click"], "point_coords": prompts["one click"]["point_coords"][:, :1],
                            "point_labels": np.ones((1, 1), np.float32)}
    ours = runners(path, args.threads, bf16=not args.no_bf16)

    def eager(feeds):
        with torch.inference_mode():
            return [t.numpy() for t in official(*(torch.from_numpy(feeds[n]) for n in INPUT_NAMES))]

    def run(name, feeds):
        out = ours[name].run(feeds)
        return [out[n] for n in OUTPUTS]

    contenders = {"official eager": eager, **{n: (lambda f, n=n: run(n, f)) for n in ours}}
    report["rows"] = alternate(contenders, list(prompts.values()), args.rounds)
    for prompt, feeds in prompts.items():
        want = eager(feeds)
        for name in ours:
            report["rows"][name].setdefault("agreement", {})[prompt] = agreement(OUTPUTS, want, run(name, feeds))
    report["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
