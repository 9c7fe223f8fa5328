"""SAM 3's video tracker graphs at full size (1008 px: a 72x72 grid; seeded random weights), per tracked object and
frame: the official memory encoder (``Sam3TrackerBase._encode_new_memory``) and memory attention (the official
``transformer.encoder`` on the bank ``_prepare_memory_conditioned_features`` builds) in eager PyTorch, against the
exported graphs on ONNX Runtime and OpenVINO (FP32, and OpenVINO at BF16, its own default on a CPU with BF16 units),
alternated in one process, every output compared with the official (issue 74).

Memory encoder: a present object's sigmoid mask and an absent object's clicked (binarized) one. Memory attention: an
early bank (the prompted frame and one recent, two pointers in use, beside a masked slot of each) and the full bank's
slots (7 frames, 16 pointers, the probe's bank; the last slot of each masked), from about the 16th tracked frame on.

Usage (the files are exported once into --out):
    PYTHONPATH=. .venv/bin/python benchmarks/bench_sam3_tracker.py --rounds 3 --threads 2
"""

from __future__ import annotations

from benchmarks.part_harness import arguments, exported, runners, time_and_compare


class _Outputs:
    """The official reference with its outputs as a tuple (the harness reads a tuple of tensors)."""

    def __init__(self, official):
        self.official = official

    def __call__(self, *inputs):
        out = self.official(*inputs)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def main() -> None:
    args = arguments(__doc__, rounds=3)

    from vitdeploy.families import FAMILIES
    from vitdeploy.metadata import read_onnx_metadata

    for recipe, family_name, named in (("sam3_memory_encoder", "sam3_memory_encoder", ("present, sigmoid", "absent, clicked")),
                                       ("sam3_memory_attention", "sam3_memory_attention", ("early bank", "full bank"))):
        path, report = exported(recipe, args.out, args.threads)
        metadata = read_onnx_metadata(path)
        family = FAMILIES[family_name]
        official = _Outputs(family.eager_reference(metadata, None))
        if family_name.endswith("attention"):
            small = family._banks(metadata, 3, 3, 1, 0)[0].feeds  # the last slot of each masked
            feeds = [small, family.probe_feeds(metadata, [], {})]
        else:
            feeds = [s.feeds for s in family.random_input_sets(metadata, [], {}, 2, seed=0)]
        report["part"] = recipe
        ours = runners(path, args.threads, bf16=not args.no_bf16)
        time_and_compare(report, official, ours, dict(zip(named, feeds)), metadata["input_names"],
                         metadata["output_names"], args.rounds)


if __name__ == "__main__":
    main()
