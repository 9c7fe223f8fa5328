"""Masks through the decoder with the encoder in BF16 against FP32: the evidence a BF16 default needs (issue 34).

The same exported SAM encoder and decoder run twice through ``SamPredictor``: once as written on ONNX
Runtime (FP32, vitdeploy's default), once with the encoder on OpenVINO at ``--inference-precision bf16``
(``--policy fp16``: FP16; the decoder as written, as ``SamPredictor`` runs it). On each bundled image (or
``--images``) it compares the image embeddings (cosine) and, for ``--clicks`` seeded single clicks, the three
multimask outputs (IoU of the binary masks). Random weights make masks fragile (logits near the threshold), so masks
are also reported restricted to the stable ones: the official stability score
(``segment_anything.utils.amg.calculate_stability_score``, threshold 0, offset 1) of the FP32 mask at or
above the official automatic mask generator's default 0.95.

Usage (full-size ViT-B with random weights; the encoder from ``benchmarks/bench_encoder_speed.py``):
    vitdeploy export -r sam_vit_b --random-weights --seed 0 -o out/speed34/vitdeploy_generic.onnx
    vitdeploy export -r sam_vit_b_decoder --random-weights --seed 0 -o out/speed34/decoder.onnx
    PYTHONPATH=. .venv/bin/python benchmarks/bf16_mask_agreement.py -e out/speed34/vitdeploy_generic.onnx \\
        -d out/speed34/decoder.onnx --clicks 20 --threads 2
    ... --policy fp16     # the encoder in FP16 instead (a CPU with AVX512-FP16 or Arm FP16 arithmetic)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from vitdeploy.cpu_features import cpu_features
from vitdeploy.precision.calibration_data import bundled_calibration_dir
from vitdeploy.runtime.apps.sam.predictor import SamPredictor
from vitdeploy.runtime.processing.images import read_image_rgb
from vitdeploy.validation.masks import STABLE_MIN, compare_masks, seeded_clicks, stability_score as stability
from vitdeploy.parity import compare


def summary(values: list[float]) -> dict[str, float]:
    arr = np.asarray(values)
    return {"count": int(arr.size), "mean": float(arr.mean()), "p5": float(np.percentile(arr, 5)), "min": float(arr.min())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-e", "--encoder", required=True)
    parser.add_argument("-d", "--decoder", required=True)
    parser.add_argument("--images", nargs="*", default=None, help="default: the first three bundled images")
    parser.add_argument("--clicks", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="write the figures as JSON here")
    parser.add_argument("--policy", default="bf16", choices=["bf16", "fp16"], help="the encoder's precision policy")
    args = parser.parse_args()
    images = args.images or [str(p) for p in sorted(bundled_calibration_dir().glob("*.jpg"))[:3]]
    fp32 = SamPredictor(args.encoder, args.decoder, threads=args.threads, runtime="onnxruntime")
    reduced = SamPredictor(args.encoder, args.decoder, threads=args.threads, runtime="openvino",
                           inference_precision=args.policy)
    print(f"CPU: {cpu_features().summary()}")
    print(f"FP32: encoder {fp32.encoder.provider or fp32.encoder.name}; decoder {fp32.decoder.name}")
    print(f"{args.policy.upper()}: encoder {reduced.encoder.provider}; decoder {reduced.decoder.provider}")
    rng = np.random.default_rng(args.seed)
    embedding_cos, all_iou, stable_iou, all_stability = [], [], [], []
    for path in images:
        image = read_image_rgb(path)
        fp32.set_image(image)
        reduced.set_image(image)
        emb = compare(fp32.get_image_embedding(), reduced.get_image_embedding(), args.policy, label=Path(path).name)
        embedding_cos.append(emb.cosine)
        h, w = image.shape[:2]
        for point in seeded_clicks(h, w, args.clicks, rng):
            want, _, _ = fp32.predict(point_coords=point, point_labels=np.array([1]), multimask_output=True, return_logits=True)
            got, _, _ = reduced.predict(point_coords=point, point_labels=np.array([1]), multimask_output=True, return_logits=True)
            scores = stability(want)
            for value, score in zip(compare_masks(want, got, args.policy).iou, scores):
                all_iou.append(value)
                all_stability.append(float(score))
                if score >= STABLE_MIN:
                    stable_iou.append(value)
        print(f"{Path(path).name}: embedding cosine {emb.cosine:.6f}, relative L2 {emb.rel_l2:.2e}")
    result = {"images": images, "clicks_per_image": args.clicks, "embedding_cosine": summary(embedding_cos),
              "mask_iou_all": summary(all_iou),
              "mask_iou_stable": summary(stable_iou) if stable_iou else {"count": 0},
              "stable_min": STABLE_MIN, "cpu": cpu_features().summary(), "policy": args.policy}
    # With random weights few masks reach the official 0.95: the most stable quarter of the FP32 masks stands in.
    quartile = float(np.percentile(all_stability, 75))
    result["stability_p50_p75_max"] = [float(np.percentile(all_stability, 50)), quartile, float(max(all_stability))]
    result["mask_iou_most_stable_quarter"] = summary([v for v, s in zip(all_iou, all_stability) if s >= quartile])
    for key in ("mask_iou_all", "mask_iou_stable", "mask_iou_most_stable_quarter"):
        s = result[key]
        if s["count"]:
            print(f"{key}: {s['count']} masks, mean {s['mean']:.4f}, 5th percentile {s['p5']:.4f}, min {s['min']:.4f}")
        else:
            print(f"{key}: no mask")
    print("FP32 masks' stability score: median {:.3f}, 75th percentile {:.3f}, max {:.3f}".format(*result["stability_p50_p75_max"]))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
