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

import numpy as np

from benchmarks.part_harness import arguments, exported, runners, time_and_compare

OUTPUTS = ("low_res_masks", "iou_predictions", "object_score_logits", "mask_tokens")


def main() -> None:
    args = arguments(__doc__, rounds=5)

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
    time_and_compare(report, official, ours, prompts, INPUT_NAMES, OUTPUTS, args.rounds)


if __name__ == "__main__":
    main()
