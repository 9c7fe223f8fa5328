"""SamPredictor on ONNX Runtime's CUDA provider against the same files on the CPU: do the masks agree?

Exports the SAM encoder and decoder of ``--variant`` (random weights, seed 0), then for each of the first
``--images`` bundled calibration images and ``--prompts`` seeded single clicks runs ``SamPredictor`` on the CPU
(the reference) and on CUDA with TF32 off (vitdeploy's default) and on (``--tf32``), and reports per
setting the worst and mean mask IoU against the CPU's masks and the worst logit difference relative to
the logits' scale. Needs an NVIDIA GPU and onnxruntime-gpu.

    python benchmarks/predictor_cuda_agreement.py --variant vit_b --images 3 --prompts 8 --workdir out/agreement
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from benchmarks.options import write_report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", default="vit_b", help="sam_<variant> and sam_<variant>_decoder recipes")
    parser.add_argument("--images", type=int, default=3, help="bundled calibration images to use")
    parser.add_argument("--prompts", type=int, default=8, help="seeded single clicks per image")
    parser.add_argument("--workdir", default="out/agreement")
    parser.add_argument("--report", help="write the figures as JSON here")
    args = parser.parse_args()

    from PIL import Image

    from vitdeploy.pipeline import export_from_recipe
    from vitdeploy.precision.calibration_data import bundled_calibration_dir
    from vitdeploy.runtime.apps.sam.predictor import SamPredictor
    from vitdeploy.validation.masks import compare_masks

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    encoder, decoder = work / f"sam_{args.variant}.onnx", work / f"sam_{args.variant}_decoder.onnx"
    for recipe, path in ((f"sam_{args.variant}", encoder), (f"sam_{args.variant}_decoder", decoder)):
        if not path.exists():
            export_from_recipe(recipe, path, random_weights=True, seed=0)
    images = sorted(p for p in bundled_calibration_dir().iterdir() if p.suffix in (".jpg", ".png"))[: args.images]
    settings = {"cpu": dict(device="cpu", runtime="onnxruntime"), "cuda, TF32 off": dict(device="cuda"), "cuda, TF32 on": dict(device="cuda", tf32=True)}
    predictors = {name: SamPredictor(encoder, decoder, **kw) for name, kw in settings.items()}
    results: dict[str, dict[str, list[float]]] = {name: {"iou": [], "logit_rel": []} for name in settings if name != "cpu"}
    start = time.perf_counter()
    for image_path in images:
        image = np.asarray(Image.open(image_path).convert("RGB"))
        for p in predictors.values():
            p.set_image(image)
        rng = np.random.default_rng(0)
        for _ in range(args.prompts):
            point = np.array([[rng.uniform(0, image.shape[1]), rng.uniform(0, image.shape[0])]])
            label = np.array([1])
            ref_logits, _, _ = predictors["cpu"].predict(point, label, return_logits=True)
            scale = float(np.abs(ref_logits).max())
            for name in results:
                logits, _, _ = predictors[name].predict(point, label, return_logits=True)
                results[name]["logit_rel"].append(float(np.abs(logits - ref_logits).max()) / scale)
                results[name]["iou"] += compare_masks(ref_logits, logits, label=name).iou  # logits > 0, mask by mask
    summary = {name: {"masks": len(r["iou"]), "min_iou": min(r["iou"]), "mean_iou": float(np.mean(r["iou"])),
                      "max_logit_rel": max(r["logit_rel"])} for name, r in results.items()}
    print(f"SAM {args.variant}, random weights seed 0, {len(images)} images x {args.prompts} clicks x 3 masks, "
          f"against SamPredictor on the CPU ({time.perf_counter() - start:.0f} s):")
    for name, s in summary.items():
        print(f"  {name:16s} masks {s['masks']}: IoU min {s['min_iou']:.5f} mean {s['mean_iou']:.6f}; "
              f"worst logit difference {s['max_logit_rel']:.2e} of the logits' scale")
    write_report(args.report, summary)


if __name__ == "__main__":
    main()
