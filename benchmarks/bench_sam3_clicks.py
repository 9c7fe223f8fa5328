"""SAM 3's clicks end to end at full size (1008 px, seeded random weights): the official example's calls
(``Sam3Processor.set_image``, then ``Sam3Image.predict_inst`` with clicks and a box) on the official ``Sam3Image`` with
its ``SAM3InteractiveImagePredictor`` against the same calls on vitdeploy's files (vision encoder + interactive
decoder, ``Sam3ImageModel(vision, interactive=...)``), alternated in one process on bundled images: the time to set an
image, the time per prompt, and the agreement (mask IoU, scores, low-resolution logits) (issue 53).

The official clean-up of small holes (``max_hole_area=256``) labels connected components with scikit-image on a
CPU; without it the official skips the step. As in the tests, SciPy's 8-connected labelling stands in, so both sides do
the same work.

Usage (the files are exported once into --out):
    PYTHONPATH=. .venv/bin/python benchmarks/bench_sam3_clicks.py --threads 2 --runtime onnxruntime
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--images", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of each prompt")
    parser.add_argument("--runtime", default="onnxruntime")
    parser.add_argument("--inference-precision", default=None,
                        help="bf16: the vision encoder at OpenVINO's own default on a CPU with BF16 units")
    parser.add_argument("--out", type=Path, default=Path("out/sam3_bench"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    import torch
    from sam3.model.sam1_task_predictor import SAM3InteractiveImagePredictor
    from sam3.model.sam3_image_processor import Sam3Processor as OfficialProcessor

    from tests.runtime.apps.test_sam3_interactive import cosine, iou, prompts, scipy_connected_components
    from vitdeploy.cpu_features import cpu_features
    from vitdeploy.models.recipes import load_recipe
    from vitdeploy.models.sam3_vision_encoder import Sam3VisionArch, load_sam3_vision_parts
    from vitdeploy.models.sam3_detector import Sam3DetectorArch, load_sam3_detector
    from vitdeploy.pipeline import export_from_recipe
    from vitdeploy.precision.calibration_data import bundled_calibration_dir
    from vitdeploy.runtime import Sam3ImageModel, Sam3Processor
    from vitdeploy.runtime.processing.images import read_image_rgb

    torch.set_num_threads(args.threads)
    report: dict = {"cpu": cpu_features().summary(), "threads": args.threads, "runtime": args.runtime,
                    "inference_precision": args.inference_precision}
    files = {}
    for recipe in ("sam3", "sam3_interactive"):
        files[recipe] = args.out / f"{recipe}.onnx"
        if not files[recipe].is_file():
            export_from_recipe(recipe, files[recipe], random_weights=True, seed=0)
    parts = load_sam3_vision_parts(Sam3VisionArch.from_dict(load_recipe("sam3").architecture), random_seed=0)
    model = load_sam3_detector(Sam3DetectorArch.from_dict(load_recipe("sam3_detector").architecture), random_seed=0)
    model.backbone = parts.backbone
    model.inst_interactive_predictor = SAM3InteractiveImagePredictor(parts.heads).eval()
    official = OfficialProcessor(model.eval(), resolution=1008, device="cpu")
    ours = Sam3Processor(Sam3ImageModel(files["sam3"], interactive=files["sam3_interactive"], runtime=args.runtime,
                                        threads=args.threads, inference_precision=args.inference_precision))
    times: dict[str, list[float]] = {"official set_image": [], "vitdeploy set_image": [], "official prompt": [],
                                     "vitdeploy prompt": []}
    agreement = []
    paths = sorted(bundled_calibration_dir().glob("*.jpg"))[:args.images]
    with torch.inference_mode(), scipy_connected_components():
        for path in paths:
            picture = read_image_rgb(path)
            tensor = torch.from_numpy(picture).permute(2, 0, 1).contiguous()
            t0 = time.perf_counter()
            official_state = official.set_image(tensor)
            times["official set_image"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            state = ours.set_image(picture)
            times["vitdeploy set_image"].append(time.perf_counter() - t0)
            for what, kwargs in prompts(picture).items():
                for _ in range(args.repeats):
                    t0 = time.perf_counter()
                    want = model.predict_inst(official_state, **kwargs)
                    times["official prompt"].append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    got = ours.model.predict_inst(state, **kwargs)
                    times["vitdeploy prompt"].append(time.perf_counter() - t0)
                (wm, ws, wl), (gm, gs, gl) = want, got
                row = {"image": path.name, "prompt": what, "scores_max_abs": float(np.max(np.abs(ws - gs))),
                       "logits_cosine": round(cosine(wl, gl), 8)}
                if not kwargs.get("return_logits"):
                    row["mask_iou_min"] = round(min(iou(w, g) for w, g in zip(wm.reshape(-1, *wm.shape[-2:]),
                                                                               gm.reshape(-1, *gm.shape[-2:]))), 6)
                agreement.append(row)
    report["median_s"] = {name: round(statistics.median(t), 4) for name, t in times.items()}
    report["ratio set_image"] = round(statistics.median(times["vitdeploy set_image"])
                                      / statistics.median(times["official set_image"]), 3)
    report["ratio prompt"] = round(statistics.median(times["vitdeploy prompt"])
                                   / statistics.median(times["official prompt"]), 3)
    report["worst"] = {"mask_iou_min": min(r.get("mask_iou_min", 1.0) for r in agreement),
                       "scores_max_abs": max(r["scores_max_abs"] for r in agreement),
                       "logits_cosine_min": min(r["logits_cosine"] for r in agreement)}
    report["agreement"] = agreement
    report["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
