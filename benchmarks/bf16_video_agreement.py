"""SAM 2.1's video masks with some of its four graphs in BF16 against all of them in FP32: the evidence a BF16 policy
needs before ``--runtime auto`` may offer it for a video graph (the "fastest proven path" issue, item 5: "the memory
attention and memory encoder in BF16 only where the clip's masks hold"; every mask IoU >= 0.99 against all-FP32 over a
30-frame clip, object scores within 1e-2).

One object is clicked on frame 0 of the benchmark clip (``benchmarks/bench_sam2_video.py``'s: the present-object
checkpoint, the four exported graphs, the synthetic clip) and tracked through it by vitdeploy's ``Sam2VideoPredictor``,
once per variant, each in a fresh process:

* ``fp32``: every graph as written on ONNX Runtime (the reference; its masks equal the official predictor's within
  the fp32 budget, ``tests/runtime/apps/test_sam2_video.py``);
* each ``--variants`` entry: the graphs it names (``+``-joined: ``memory_attention``, ``memory_encoder``,
  ``image_encoder``, ``decoder``) on OpenVINO with the precision policy ``--policy`` (``bf16``, or ``fp16`` on a CPU
  with FP16 arithmetic), the others as in ``fp32``; or, with ``--policy int8``, their INT8 files on OpenVINO as
  written (``vitdeploy calibrate -p int8`` on a calibration clip unlike the measured one, made once by
  :func:`prepare_int8`; ``--policy int8-bank-scores``: the memory attention's query-key products over the bank
  alone in INT8);
* ``official`` and ``official-bf16`` (in that order): the official ``SAM2VideoPredictor`` in FP32, and under the BF16
  autocast its notebooks enter for the whole run; ``official-bf16`` is held against ``official``: the official's own
  clip distance, beside which the deployed variants' distance from ``fp32`` is read (issue 75's reference precision).

The budget is ``CLIP_MASKS`` and ``CLIP_SCORE_ATOL`` (``vitdeploy/validation/masks.py``).

Per variant and frame: the mask IoU against ``fp32``'s, the object score logit's difference, and the frame's time;
per variant the worst frame, the median tracked-frame time (after ``--skip`` frames, while the bank fills) and the load;
on the worst frame, the largest change of a mask logit and how firm ``fp32``'s mask is there (:func:`firmness`).

Usage (files and clip made once into --out, shared with bench_sam2_video.py):
    PYTHONPATH=. .venv/bin/python benchmarks/bf16_video_agreement.py --sizes tiny --frames 30 --threads 2
    PYTHONPATH=. .venv/bin/python benchmarks/bf16_video_agreement.py --sizes tiny --policy fp16   # AVX512-FP16 / Arm FP16
    PYTHONPATH=. .venv/bin/python benchmarks/bf16_video_agreement.py --sizes tiny \
        --variants official official-bf16 image_encoder      # the official's own BF16 beside the deployed one
    PYTHONPATH=. .venv/bin/python benchmarks/bf16_video_agreement.py --sizes tiny --policy int8 \
        --variants memory_attention image_encoder image_encoder+memory_attention
    PYTHONPATH=. .venv/bin/python benchmarks/bf16_video_agreement.py --sizes tiny --policy int8-bank-scores \
        --variants memory_attention
    # the proof the seeded weights' soft masks cannot give (docs/sam2.md), on trained weights:
    PYTHONPATH=. .venv/bin/python benchmarks/bf16_video_agreement.py --sizes tiny --checkpoint sam2.1_hiera_tiny.pt \
        --policy bf16 --variants image_encoder
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.bench_sam2 import SIZES, peak_rss_mb
from benchmarks.bench_sam2_video import ROLES, official_checkpoint, prepare, seeded_checkpoint, track_click
from benchmarks.options import parsed, timing_options
from vitdeploy.validation.masks import CLIP_MASKS, CLIP_SCORE_ATOL, compare_masks, stability_score

GRAPHS = ("image_encoder", "decoder", "memory_encoder", "memory_attention")
DEFAULT_VARIANTS = ("memory_attention", "memory_attention+memory_encoder", "image_encoder",
                    "image_encoder+decoder+memory_encoder+memory_attention")
#: The INT8 policies: ``int8`` quantizes every GEMM of each graph but the memory attention's value products
#: (:func:`value_products`); ``int8-bank-scores`` differs in the memory attention only, where just its query-key
#: products over the bank are INT8 (:func:`bank_scores`).
INT8_POLICIES = ("int8", "int8-bank-scores")


#: The official predictor's own variants: in FP32, and under the BF16 autocast its notebooks enter for the whole run
#: (on the CPU here); ``official-bf16`` is judged against ``official``, the official's own distance from its FP32,
#: beside which a deployed reduced precision is judged (``official_precisions`` in vitdeploy/data/runtime_facts.json).
OFFICIAL = ("official", "official-bf16")


def run_official(variant: str, recipe: str, out: Path, frames: int, threads: int) -> dict:
    """In a fresh process: the official ``SAM2VideoPredictor`` on the same checkpoint, clip and click, in FP32 or
    under ``torch.autocast("cpu", dtype=torch.bfloat16)``; saves masks, scores and logits as :func:`run_variant`."""
    import contextlib

    import torch

    from tests.sam2_video_fixtures import official_video_predictor
    from vitdeploy.models.recipes import load_recipe
    from vitdeploy.models.sam2 import Sam2Arch

    torch.set_num_threads(threads)
    start = time.perf_counter()
    arch = Sam2Arch.from_dict(load_recipe(recipe).architecture)
    predictor = official_video_predictor(seeded_checkpoint(recipe, out), arch=arch)
    predictor.fill_hole_area = 0
    load_s = time.perf_counter() - start
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if variant == "official-bf16" else contextlib.nullcontext()
    with torch.inference_mode(), autocast:
        state, logits_per_frame, times = track_click(predictor, out / f"clip_{frames}")
    keep_clip(out / agreement_file(recipe, variant, "bf16", frames), state, logits_per_frame)
    return {"variant": variant, "policy": "official " + ("bf16 autocast" if variant == "official-bf16" else "fp32"),
            "load_s": round(load_s, 1), "times_ms": [round(1e3 * t, 1) for t in times], "peak_rss_mb": peak_rss_mb(),
            "chosen": {g: "official eager (PyTorch)" for g in GRAPHS}}


def keep_clip(path: Path, state: dict, logits_per_frame: list[np.ndarray]) -> None:
    """A tracked clip's masks, object scores (read from either predictor's state: torch tensors, BF16 too, or arrays)
    and logits, kept in ``path``."""
    outputs = state["output_dict_per_obj"][0]
    scores = []
    for index in range(len(logits_per_frame)):
        frame = outputs["cond_frame_outputs"].get(index) or outputs["non_cond_frame_outputs"][index]
        score = frame["object_score_logits"]
        scores.append(float(np.asarray(score.float() if hasattr(score, "float") else score).reshape(-1)[0]))
    clip_logits = np.stack(logits_per_frame)
    np.savez(path, masks=clip_logits > 0, scores=np.array(scores), logits=clip_logits)


def run_variant(variant: str, recipe: str, out: Path, frames: int, threads: int, policy: str = "bf16") -> dict:
    """In a fresh process: open the four graphs (``variant``'s on OpenVINO at ``policy``), click, propagate; save
    masks and scores, return the times (the :data:`OFFICIAL` variants: :func:`run_official`)."""
    from vitdeploy.runtime.apps.sam2.video_predictor import Sam2VideoPredictor
    from vitdeploy.runtime.deploy.loader import OpenOptions, open_runner

    if variant in OFFICIAL:
        return run_official(variant, recipe, out, frames, threads)
    reduced = set() if variant == "fp32" else set(variant.split("+"))
    start = time.perf_counter()
    runners = []
    for graph, suffix in zip(GRAPHS, ROLES):
        path = out / f"{recipe}{suffix}.onnx"
        if graph in reduced and policy in INT8_POLICIES:  # the calibrated file, run as written
            path, options = int8_file(path, graph, policy), OpenOptions(runtime="openvino", policy="file",
                                                                        threads=threads)
        elif graph in reduced:
            options = OpenOptions(runtime="openvino", policy=policy, threads=threads)
        else:
            options = OpenOptions(runtime="onnxruntime", threads=threads)
        runners.append(open_runner(path, options))
    predictor = Sam2VideoPredictor(*runners, fill_hole_area=0)
    load_s = time.perf_counter() - start
    state, logits_per_frame, times = track_click(predictor, out / f"clip_{frames}")
    keep_clip(out / agreement_file(recipe, variant, policy, frames), state, logits_per_frame)
    return {"variant": variant, "policy": "file" if variant == "fp32" else policy, "load_s": round(load_s, 1),
            "times_ms": [round(1e3 * t, 1) for t in times], "peak_rss_mb": peak_rss_mb(),
            "chosen": {g: r.deployment.label() if r.deployment else r.name
                       for g, r in zip(GRAPHS, runners)}}


def int8_file(path: Path, graph: str, policy: str) -> Path:
    """Where ``graph``'s INT8 file under ``policy`` is kept (only the memory attention's differs between them)."""
    return path.with_suffix(f".{policy if graph == 'memory_attention' else 'int8'}.onnx")


def value_products(graph) -> list[str]:
    """The memory attention's MatMuls that weight values by a softmax, and those that project the weighted values:
    they stay FP32 in its ``int8`` file. A symmetric per-tensor INT8 softmax rounds the probabilities over ~28,700
    bank tokens to a few levels: with these quantized too, hiera-t's memory attention came out at cosine 0.888
    against FP32 on held-out recorded inputs (docs/sam2.md)."""
    producer = {o: n for n in graph.node for o in n.output}
    kept = []
    for node in graph.node:
        sources = [producer.get(i) for i in node.input]
        if node.op_type == "MatMul" and any(s is not None and (s.op_type == "Softmax" or s.name in kept)
                                            for s in sources):
            kept.append(node.name)
    return kept


def bank_scores(model) -> list[str]:
    """The MatMuls of two computed tensors, other than the value products, whose output is not square: the
    cross-attention's scores over the memory bank, whose length varies with it (the self-attention's are 4096 x 4096
    at 1024)."""
    import onnx

    from vitdeploy.precision.int8 import constant_tensors

    shapes = {v.name: [d.dim_value or d.dim_param or "?" for d in v.type.tensor_type.shape.dim]
              for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
    constants, values = constant_tensors(model), set(value_products(model.graph))
    return [n.name for n in model.graph.node
            if n.op_type == "MatMul" and n.name not in values and not any(i in constants for i in n.input)
            and len(shapes.get(n.output[0], [])) >= 2 and shapes[n.output[0]][-1] != shapes[n.output[0]][-2]]


def kept_fp32(path: Path, policy: str) -> list[str]:
    """The memory attention's nodes its INT8 file under ``policy`` keeps in FP32."""
    import onnx

    from vitdeploy.precision.int8 import QUANTIZED_OPS

    model = onnx.load(str(path))
    if policy == "int8":
        return value_products(model.graph)
    quantized = set(bank_scores(model))
    return [n.name for n in model.graph.node if n.op_type in QUANTIZED_OPS and n.name not in quantized]


def write_calibration_clip(folder: Path, frames: int) -> Path:
    """A clip unlike the measured one (other background, shapes, colours and motion), to calibrate the INT8 files on:
    a green disc moving left and a yellow box moving right."""
    from tests.sam2_video_fixtures import write_frames

    def shapes(draw, t: int) -> None:
        draw.ellipse([250 - 4 * t, 150, 290 - 4 * t, 190], fill=(40, 200, 60))
        draw.rectangle([30 + t, 100, 70 + t, 130], fill=(230, 200, 30))

    background = np.random.default_rng(7).integers(40, 160, (240, 320, 3)).astype(np.uint8)
    return write_frames(folder, background, frames, shapes, quality=90)


def prepare_int8(recipe: str, out: Path, graphs: set[str], threads: int, policy: str = "int8") -> None:
    """The INT8 files of ``graphs`` under ``policy`` (:func:`int8_file`), made once with vitdeploy's own commands:
    the image encoder calibrated on a calibration clip's frames, the other graphs on their inputs recorded while
    ``vitdeploy track`` (FP32) follows the clicked disc through that clip; the memory attention keeps the nodes
    :func:`kept_fp32` names in FP32."""
    paths = {g: out / f"{recipe}{suffix}.onnx" for g, suffix in zip(GRAPHS, ROLES)}
    missing = sorted(g for g in graphs if not int8_file(paths[g], g, policy).is_file())
    if not missing:
        return
    vitdeploy = [sys.executable, "-m", "vitdeploy"]
    clip = write_calibration_clip(out / "calibration_clip", 30)
    recorded = {g: out / f"{recipe}_{g}_inputs.npz" for g in missing if g != "image_encoder"}
    if any(not p.is_file() for p in recorded.values()):
        subprocess.run([*vitdeploy, "track", "-e", str(paths["image_encoder"]), "-d", str(paths["decoder"]),
                        "-m", str(paths["memory_encoder"]), "-a", str(paths["memory_attention"]), "-i", str(clip),
                        "--point", "0:1:270,170", "-o", str(out / "calibration_tracks"), "--force", "--no-overlay",
                        "--fill-hole-area", "0", "--runtime", "onnxruntime", "--threads", str(threads),
                        *(a for g, p in recorded.items() for a in ("--record-inputs", f"{g}:{p}"))], check=True)
    for graph in missing:
        source = ["-i", str(clip), "--max-images", "12"] if graph == "image_encoder" else ["--feeds", str(recorded[graph])]
        keep = [a for n in kept_fp32(paths[graph], policy) for a in ("--keep-fp32", n)] \
            if graph == "memory_attention" else []
        subprocess.run([*vitdeploy, "calibrate", str(paths[graph]), "-p", "int8", "-o",
                        str(int8_file(paths[graph], graph, policy)), "--no-eager", "--threads", str(threads), "--force",
                        *source, *keep], check=True)


def agreement_file(recipe: str, variant: str, policy: str, frames: int) -> str:
    """Where a variant's masks and scores on the ``frames``-frame clip are kept: the ``fp32`` reference is one for every
    policy (a shorter run of the same clip keeps its own)."""
    stem = f"agreement_{recipe}_{frames}f_{variant}"
    return f"{stem}.npz" if variant in ("fp32", *OFFICIAL) or policy == "bf16" else f"{stem}_{policy}.npz"


def against_fp32(reference: dict, other: dict) -> dict:
    """The variant's masks and scores against ``fp32``'s, frame by frame, held to the clip budget; where both kept
    their logits, how far the worst frame's logits moved and how firm ``fp32``'s mask was there (:func:`firmness`)."""
    masks = compare_masks(reference["masks"], other["masks"], CLIP_MASKS)
    diffs = np.abs(reference["scores"] - other["scores"])
    worst = int(np.argmin(masks.iou))
    row = {"min_iou": round(min(masks.iou), 5), "worst_frame": worst,
           "mean_iou": round(float(np.mean(masks.iou)), 5), "max_score_diff": round(float(diffs.max()), 5),
           "presence_flips": int(((reference["scores"] > 0) != (other["scores"] > 0)).sum()),
           "holds": bool(masks) and bool(diffs.max() <= CLIP_SCORE_ATOL)}
    if "logits" in reference and "logits" in other:
        moved = float(np.abs(other["logits"][worst] - reference["logits"][worst]).max())
        row.update({"worst_frame_max_logit_diff": round(moved, 5), **firmness(reference["logits"][worst], moved)})
    return row


def against_official(out: Path, recipe: str, variant: str, policy: str, frames: int) -> dict | None:
    """The variant's clip against the official's own BF16 autocast (vitdeploy.validation.official_practice.judge_clip:
    each distance from the FP32 clip within the margin of the official's, or within the clip budget), from the kept
    results of ``fp32``, ``official``, ``official-bf16`` and the variant; None until the official's two are kept."""
    from vitdeploy.runtime_facts import official_precision
    from vitdeploy.validation.official_practice import ClipRun, judge_clip

    paths = [out / agreement_file(recipe, v, policy, frames) for v in ("official", "official-bf16", "fp32", variant)]
    if not all(p.is_file() for p in paths):
        return None
    runs = []
    for path in paths:
        data = np.load(path)
        runs.append(ClipRun({t: m[None] for t, m in enumerate(data["masks"])}, dict(enumerate(data["scores"]))))
    practice = judge_clip(*runs, margin=official_precision("sam2_image_encoder").margin)
    return {"against_official_bf16": practice.summary(), "holds_against_official": bool(practice)}


def firmness(logits: np.ndarray, moved: float) -> dict:
    """How firm a reference mask is (``logits``, (H, W)): the official stability score (the generator keeps a mask at
    ``STABLE_MIN``, 0.95, or more), the median logit over the mask, and the share of the mask within ``moved`` of the
    threshold, which a change of logits by ``moved`` can flip. A mask of seeded random weights is soft, its logits
    mostly near 0: a small change of logits then flips much of it, where a firm mask would keep its pixels."""
    inside = logits[logits > 0]
    return {"reference_stability": round(float(stability_score(logits)), 4),
            "reference_median_logit": round(float(np.median(inside)), 4) if inside.size else None,
            "mask_within_moved": round(float(np.mean(inside <= moved)), 4) if inside.size else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["tiny"], choices=list(SIZES))
    parser.add_argument("--variants", nargs="+", default=list(DEFAULT_VARIANTS))
    parser.add_argument("--frames", type=int, default=30)
    parser.add_argument("--skip", type=int, default=6)
    timing_options(parser, out="out/sam2_video_bench", runtime=None, child=("VARIANT", "RECIPE"), child_flag="--child")
    parser.add_argument("--policy", default="bf16", choices=["bf16", "fp16", *INT8_POLICIES],
                        help="the precision policy of the variants' graphs (OpenVINO)")
    parser.add_argument("--checkpoint", type=Path, help="an official SAM 2.1 checkpoint of the one size given, "
                        "instead of the seeded weights (its files and results in a folder of --out named after it)")
    args = parsed(parser)
    if args.child:
        print(json.dumps(run_variant(*args.child, args.out, args.frames, args.threads, args.policy)))
        return
    checkpoint = official_checkpoint(parser, args)
    if "official-bf16" in args.variants and "official" not in args.variants[:args.variants.index("official-bf16")]:
        parser.error("official-bf16 is judged against official: give --variants official official-bf16 ...")
    unknown = {g for v in args.variants if v not in OFFICIAL for g in v.split("+")} - set(GRAPHS)
    if unknown:
        parser.error(f"unknown graph(s) {sorted(unknown)}: use {', '.join(GRAPHS)}")
    from vitdeploy.cpu_features import cpu_features

    report = {"cpu": cpu_features().summary(), "threads": args.threads, "frames": args.frames, "policy": args.policy,
              "sizes": {}}
    print(f"CPU: {report['cpu']}; {args.threads} thread(s); {args.frames}-frame clip", flush=True)
    for size in args.sizes:
        recipe = SIZES[size]
        prepare(recipe, args.out, args.frames, checkpoint)
        if args.policy in INT8_POLICIES:
            prepare_int8(recipe, args.out, {g for v in args.variants if v not in OFFICIAL for g in v.split("+")},
                         args.threads, args.policy)
        rows = []
        for variant in ("fp32", *args.variants):
            done = subprocess.run([sys.executable, __file__, "--child", variant, recipe, "--out", str(args.out),
                                   "--frames", str(args.frames), "--threads", str(args.threads), "--policy", args.policy],
                                  capture_output=True, text=True)
            if done.returncode:
                print(done.stderr[-3000:], file=sys.stderr)
                raise SystemExit(f"variant {variant} failed (exit {done.returncode})")
            row = json.loads(done.stdout.strip().splitlines()[-1])
            tracked = row["times_ms"][1 + args.skip:]
            row["median_ms_per_frame"] = round(statistics.median(tracked), 1)
            data = np.load(args.out / agreement_file(recipe, variant, args.policy, args.frames))
            row["fg_fraction"] = round(float(data["masks"].mean()), 4)
            if variant != "fp32":  # the official BF16 against the official FP32: its own distance
                against = "official" if variant == "official-bf16" else "fp32"
                reference = np.load(args.out / agreement_file(recipe, against, args.policy, args.frames))
                row.update({"against": against, **against_fp32(reference, data)})
                if variant not in OFFICIAL and args.policy == "bf16":  # the official's own autocast is BF16
                    row.update(against_official(args.out, recipe, variant, args.policy, args.frames) or {})
            rows.append(row)
            print(json.dumps({"size": size, **{k: v for k, v in row.items() if k != "times_ms"}}), flush=True)
        report["sizes"][size] = rows
    (args.out / f"{args.policy}_video_agreement.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
