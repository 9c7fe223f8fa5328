"""SAM 3 at full size (1008 px, seeded random weights) as its authors run it: ``Sam3Processor.set_image`` and text
prompts, the official model in FP32 and under its published BF16 autocast (the notebooks enter
``torch.autocast(..., dtype=torch.bfloat16)`` for the whole notebook; on a CPU the device type is ``cpu``) against
vitdeploy's three files at ``--runtime auto`` with no profile (what the first-use probe chooses here, said in the
report), each contender in a fresh process, rounds alternated (issue 75).

Per contender and image: the first-use open time (vitdeploy: the probe of each file, in a fresh decision cache),
``set_image`` and each prompt's ``set_text_prompt`` (a different prompt each run, the same list for every contender:
no contender reuses a text's features), median over rounds. Then what the user receives, against the official FP32
on the same image and prompts: every query's score, box and mask logits (relative L2, pooled), each query's mask IoU,
and the instances kept at the official's default threshold (0.5) -- the official BF16 autocast's distance beside
vitdeploy's.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_sam3_official_bf16.py --dir DIR --images IMG [IMG ...] \\
        --report out/sam3_official_bf16.json      # DIR/sam3.onnx, sam3_text.onnx, sam3_detector.onnx (seed 0)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.options import write_report

CONTENDERS = ("official-fp32", "official-bf16", "vitdeploy-auto")
PROMPTS = ("a person", "yellow school bus", "dog", "the red car on the left", "striped umbrella", "a shoe")
THRESHOLD = 0.5  # Sam3Processor's default confidence threshold


def _official():
    """The official ``Sam3Processor`` on the official ``Sam3Image`` with the exports' weights (seed 0)."""
    from sam3.model.sam3_image_processor import Sam3Processor as OfficialProcessor
    from sam3.model.tokenizer_ve import SimpleTokenizer

    from vitdeploy.models.recipes import load_recipe
    from vitdeploy.models.sam3_detector import Sam3DetectorArch, load_sam3_detector
    from vitdeploy.models.sam3_text_encoder import Sam3TextArch, load_sam3_text
    from vitdeploy.models.sam3_vision_encoder import Sam3VisionArch, load_sam3_vision
    from vitdeploy.runtime.processing.clip_tokenizer import default_vocab

    backbone = load_sam3_vision(Sam3VisionArch.from_dict(load_recipe("sam3").architecture), random_seed=0)
    text = load_sam3_text(Sam3TextArch.from_dict(load_recipe("sam3_text").architecture), random_seed=0)
    text.tokenizer = SimpleTokenizer(bpe_path=str(default_vocab()))
    backbone.language_backbone = text
    model = load_sam3_detector(Sam3DetectorArch.from_dict(load_recipe("sam3_detector").architecture), random_seed=0)
    model.backbone = backbone
    return OfficialProcessor(model.eval(), resolution=1008, device="cpu", confidence_threshold=0.0)


def contender(kind: str, directory: Path, image: Path, prompts: int, threads: int, out: Path) -> None:
    """One contender in this (fresh) process: open, set the image, run ``prompts`` text prompts; times and the
    state's arrays (every query) into ``out`` (.json and .npz)."""
    import torch

    from vitdeploy.runtime.processing.images import read_image_rgb

    torch.set_num_threads(threads)
    picture = read_image_rgb(image)
    t0 = time.perf_counter()
    notes: list[str] = []
    if kind.startswith("official"):
        from vitdeploy.rewrites.sam3_detector import _pin_memory_shim

        processor = _official()
        whole_run = contextlib.ExitStack()  # held until the process ends
        if kind.endswith("bf16"):
            whole_run.enter_context(torch.autocast("cpu", dtype=torch.bfloat16))  # as the notebooks, for the whole run
        whole_run.enter_context(torch.inference_mode())
        whole_run.enter_context(_pin_memory_shim())
        arg = torch.from_numpy(picture).permute(2, 0, 1).contiguous()
    else:
        from vitdeploy.runtime.apps.sam3.processor import Sam3ImageModel, Sam3Processor

        model = Sam3ImageModel(directory / "sam3.onnx", directory / "sam3_text.onnx", directory / "sam3_detector.onnx",
                               runtime="auto", threads=threads)
        processor = Sam3Processor(model, confidence_threshold=0.0)
        notes = [f"{graph}: {runner.deployment.label()} ({runner.deployment.source})"
                 for graph, runner in (("vision", model.vision), ("text", model.text), ("detector", model.detector))]
        arg = picture
    opened = time.perf_counter() - t0
    t0 = time.perf_counter()
    state = processor.set_image(arg)
    set_image = time.perf_counter() - t0
    times, arrays = [], {}
    for k, prompt in enumerate(PROMPTS[:prompts]):
        t0 = time.perf_counter()
        state = processor.set_text_prompt(state=state, prompt=prompt)
        times.append(time.perf_counter() - t0)
        for key in ("scores", "boxes", "masks_logits"):
            value = state[key]
            arrays[f"{k}/{key}"] = value.float().numpy() if hasattr(value, "float") else np.asarray(value, np.float32)
    np.savez(out.with_suffix(".npz"), **arrays)
    out.write_text(json.dumps({"open_s": opened, "set_image_s": set_image, "prompt_s": times, "notes": notes,
                               "peak_rss_mb": _peak_rss_mb()}))


def _peak_rss_mb() -> int:
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.reshape(len(a), -1), b.reshape(len(b), -1)
    union = (a | b).sum(axis=1)
    return np.where(union > 0, (a & b).sum(axis=1) / np.maximum(union, 1), 1.0)


def agreement(want: dict[str, np.ndarray], got: dict[str, np.ndarray], prompts: int) -> dict[str, float]:
    """What the user receives from ``got`` against ``want`` (the official FP32), pooled over the prompts (summed a
    prompt at a time: a large image's 200 mask logits at its size are gigabytes)."""
    row = {}
    for key in ("scores", "boxes", "masks_logits"):
        diff = norm = 0.0
        for k in range(prompts):
            a, b = want[f"{k}/{key}"], got[f"{k}/{key}"]
            diff += sum(float(np.square((b[i] - a[i]).astype(np.float64)).sum()) for i in range(len(a)))
            norm += sum(float(np.square(a[i].astype(np.float64)).sum()) for i in range(len(a)))
        row[f"{key}_rel_l2"] = (diff / norm) ** 0.5 if norm else 0.0
    ious, kept_same, kept = [], 0, 0
    for k in range(prompts):
        ious += list(_iou(want[f"{k}/masks_logits"] > 0, got[f"{k}/masks_logits"] > 0))
        a, b = want[f"{k}/scores"].ravel() > THRESHOLD, got[f"{k}/scores"].ravel() > THRESHOLD
        kept += int(a.sum())
        kept_same += int((a == b).all())
    row.update(mask_iou_min=float(min(ious)), mask_iou_mean=float(np.mean(ious)),
               prompts_with_the_same_instances=kept_same, instances_kept_by_fp32=kept)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--images", type=Path, nargs="+", default=[], help="image files (not the contenders' own)")
    parser.add_argument("--prompts", type=int, default=3, help="text prompts per image (a different one each run)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--report")
    parser.add_argument("--from-run", type=Path, help="report a finished run's folder again (no contender runs)")
    parser.add_argument("--contender", nargs=3, metavar=("KIND", "IMAGE", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.contender:
        kind, image, out = args.contender
        return contender(kind, args.dir, Path(image), args.prompts, args.threads, Path(out))
    if not args.images:
        parser.error("--images: at least one image")

    from vitdeploy.cpu_features import cpu_features

    work = args.from_run or Path(tempfile.mkdtemp(prefix="sam3-official-bf16-"))
    runs: dict[tuple[str, str], list[dict]] = {}
    for round_ in range(args.rounds):
        if args.from_run:
            for image in args.images:
                for kind in CONTENDERS:
                    out = work / f"{kind}-{image.stem}-{round_}.json"
                    runs.setdefault((kind, image.name), []).append(json.loads(out.read_text()))
            continue
        for image in args.images:
            for kind in CONTENDERS:
                out = work / f"{kind}-{image.stem}-{round_}.json"
                env = {**os.environ, "VITDEPLOY_CACHE_DIR": str(work / f"cache-{round_}-{image.stem}")}  # first use
                subprocess.run([sys.executable, __file__, "--dir", str(args.dir), "--prompts", str(args.prompts),
                                "--threads", str(args.threads), "--contender", kind, str(image), str(out)],
                               check=True, env=env)
                runs.setdefault((kind, image.name), []).append(json.loads(out.read_text()))
                print(f"round {round_ + 1} {image.name} {kind}: {out.read_text()[:300]}", flush=True)
    report: dict = {"cpu": cpu_features().summary(), "threads": args.threads, "rounds": args.rounds,
                    "prompts": list(PROMPTS[:args.prompts]), "images": [str(p) for p in args.images], "per_image": {}}
    for image in args.images:
        rows: dict = {}
        for kind in CONTENDERS:
            done = runs[(kind, image.name)]
            rows[kind] = {"open_s": round(statistics.median(r["open_s"] for r in done), 2),
                          "set_image_s": round(statistics.median(r["set_image_s"] for r in done), 3),
                          "prompt_s": round(statistics.median(t for r in done for t in r["prompt_s"]), 3),
                          "peak_rss_mb": max(r["peak_rss_mb"] for r in done), "notes": done[0]["notes"]}
        fp32 = rows["official-fp32"]
        for kind in CONTENDERS[1:]:
            rows[kind]["set_image_vs_official_fp32"] = round(rows[kind]["set_image_s"] / fp32["set_image_s"], 3)
            rows[kind]["prompt_vs_official_fp32"] = round(rows[kind]["prompt_s"] / fp32["prompt_s"], 3)
        rows["vitdeploy-auto"]["set_image_vs_official_bf16"] = round(
            rows["vitdeploy-auto"]["set_image_s"] / rows["official-bf16"]["set_image_s"], 3)
        want = np.load(work / f"official-fp32-{image.stem}-0.npz")
        for kind in CONTENDERS[1:]:
            rows[kind]["against_official_fp32"] = agreement(want, np.load(work / f"{kind}-{image.stem}-0.npz"),
                                                            args.prompts)
        report["per_image"][image.name] = rows
    print(json.dumps(report, indent=2))
    write_report(args.report, report)


if __name__ == "__main__":
    main()
