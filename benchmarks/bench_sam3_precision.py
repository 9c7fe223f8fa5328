"""A SAM 3 vision encoder at a lower precision (FP16, INT8: ``vitdeploy calibrate``) against its FP32 file, through the
graphs that read it (issue 53): every vision output's cosine, then the detector (FP32, one text prompt's features and
an exemplar box, seeded) and the interactive decoder (FP32, a click) on both feature sets -- each query's mask IoU
(logits > 0), the scores' cosine, each click mask's IoU -- on bundled images, ONNX Runtime on the CPU.

Usage (files from 'vitdeploy export -r sam3 / sam3_detector / sam3_interactive' and 'vitdeploy calibrate'):
    PYTHONPATH=. .venv/bin/python benchmarks/bench_sam3_precision.py out/sam3_bench/sam3.onnx \\
        out/sam3_bench/sam3.fp16.onnx --detector out/sam3_bench/sam3_detector.onnx \\
        --interactive out/sam3_bench/sam3_interactive.onnx --images 2
"""

from __future__ import annotations

import argparse
import json
import resource
from pathlib import Path

import numpy as np


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def iou(a: np.ndarray, b: np.ndarray) -> float:
    union = np.logical_or(a, b).sum()
    return float(np.logical_and(a, b).sum() / union) if union else 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("fp32", type=Path)
    parser.add_argument("lower", type=Path)
    parser.add_argument("--detector", type=Path, required=True)
    parser.add_argument("--interactive", type=Path, required=True)
    parser.add_argument("--images", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    from vitdeploy.cpu_features import cpu_features
    from vitdeploy.families import FAMILIES
    from vitdeploy.metadata import read_onnx_metadata
    from vitdeploy.precision.calibration_data import bundled_calibration_dir
    from vitdeploy.runtime.deploy.loader import open_runner
    from vitdeploy.runtime.processing.images import read_image_rgb
    from vitdeploy.runtime.processing.sam3_transforms import Sam3Preprocessor

    meta = read_onnx_metadata(args.fp32)
    preprocess = Sam3Preprocessor(int(meta["input_size"][0]), tuple(meta["pixel_mean"]), tuple(meta["pixel_std"]))
    vision = {name: open_runner(path, runtime="onnxruntime", threads=args.threads)
              for name, path in (("fp32", args.fp32), ("lower", args.lower))}
    detector = open_runner(args.detector, runtime="onnxruntime", threads=args.threads)
    decoder = open_runner(args.interactive, runtime="onnxruntime", threads=args.threads)
    det_meta = detector.metadata
    grid, width, slots = int(det_meta["image_embedding_size"][0]), int(det_meta["embed_dim"]), int(det_meta["max_boxes"])
    prompt = FAMILIES["sam3_detector"].example_feeds(grid, width, 1, slots, seed=1)
    prompt["text_padding"][:] = np.arange(32)[None, :] >= 5
    prompt["box_padding"][:] = np.arange(slots)[None, :] >= 1
    size = int(meta["input_size"][0])
    report: dict = {"cpu": cpu_features().summary(), "lower": str(args.lower),
                    "precision": read_onnx_metadata(args.lower).get("precision"), "images": []}
    for path in sorted(bundled_calibration_dir().glob("*.jpg"))[:args.images]:
        pixels = preprocess(read_image_rgb(path))
        feats = {name: runner.run({runner.input_names[0]: pixels}) for name, runner in vision.items()}
        row: dict = {"image": path.name, "vision_cosine": {k: round(cosine(feats["fp32"][k], feats["lower"][k]), 7)
                                                          for k in feats["fp32"]}}
        detected = {}
        for name, f in feats.items():
            feeds = {k: v for k, v in prompt.items() if not k.startswith("backbone_fpn")}
            feeds |= {f"backbone_fpn_{i}": np.asarray(f[f"backbone_fpn_{i}"], np.float32) for i in range(3)}
            detected[name] = detector.run(feeds)
        masks = [iou(a > 0, b > 0) for a, b in zip(detected["fp32"]["pred_masks"][0], detected["lower"]["pred_masks"][0])]
        row["detector"] = {"scores_cosine": round(cosine(detected["fp32"]["pred_logits"], detected["lower"]["pred_logits"]), 7),
                           "mask_iou_min": round(min(masks), 5), "mask_iou_median": round(float(np.median(masks)), 5)}
        clicks = []
        for point in ([0.45, 0.55], [0.7, 0.3], [0.2, 0.8]):
            out = {}
            for name, f in feats.items():
                out[name] = decoder.run({
                    "image_embed": f["image_embed"], "high_res_feats_0": f["high_res_feats_0"],
                    "high_res_feats_1": f["high_res_feats_1"], "point_coords": np.array([[point]], np.float32) * size,
                    "point_labels": np.ones((1, 1), np.float32),
                    "mask_input": np.zeros((1, 1, 4 * grid, 4 * grid), np.float32),
                    "has_mask_input": np.zeros(1, np.float32)})
            clicks += [iou(a > 0, b > 0) for a, b in zip(out["fp32"]["low_res_masks"][0], out["lower"]["low_res_masks"][0])]
        row["clicks"] = {"mask_iou_min": round(min(clicks), 5), "mask_iou_median": round(float(np.median(clicks)), 5)}
        report["images"].append(row)
        print(json.dumps(row), flush=True)
    report["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
