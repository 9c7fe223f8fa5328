"""SAM ViT-B TensorRT engines on a GPU against the official model on the same GPU: masks and latency.

Reads the files ``scripts/gpu-check.sh`` leaves in ``--workdir`` (``sam_vit_b.onnx``, ``sam_vit_b_decoder.onnx``,
and the ``.plan`` engines built from them, FP32/FP16/INT8) and reports:

- **masks through the decoder**: ``SamPredictor`` on each encoder engine + the decoder engine against
  ``SamPredictor`` on the FP32 ONNX files on the CPU (ONNX Runtime: the files proven equal to the official
  model), ``--images`` bundled images x ``--prompts`` seeded clicks x 3 masks: worst and mean mask IoU;
- **embeddings**: cosine and relative L2 of each engine against the official encoder in FP32 on the same GPU
  (TF32 off), one bundled image;
- **latency**, host to host for every contender (input copied in, output copied out, each run synchronized):
  the official encoder eager in FP32 (TF32 off), FP16 and BF16 autocast, ``torch.compile`` with FP16 autocast,
  and each engine through ``TensorRTRunner``: median and p90 of ``--runs`` runs after ``--warmup``.

    python benchmarks/gpu_engines.py --workdir out/gpu-check --report out/gpu-check/gpu_engines.json

Needs an NVIDIA GPU, PyTorch with CUDA and a TensorRT library vitdeploy can load.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np


def _timed(fn: Callable[[], Any], runs: int, warmup: int, sync: Callable[[], None]) -> dict[str, float]:
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - start) * 1e3)
    return {"median_ms": float(np.median(times)), "p90_ms": float(np.percentile(times, 90)), "runs": runs}


def _cos_rel(ref: np.ndarray, out: np.ndarray) -> dict[str, float]:
    a, b = ref.astype(np.float64).ravel(), out.astype(np.float64).ravel()
    return {"cosine": float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))),
            "rel_l2": float(np.linalg.norm(a - b) / np.linalg.norm(a)), "nan": int(np.isnan(out).sum())}


def _mask_agreement(predictor: Any, reference: Any, images: list[Path], prompts: int, compare_masks: Any) -> dict[str, Any]:
    start = time.perf_counter()
    ious: list[float] = []
    for image_path in images:
        from PIL import Image

        image = np.asarray(Image.open(image_path).convert("RGB"))
        reference.set_image(image)
        predictor.set_image(image)
        rng = np.random.default_rng(0)
        for _ in range(prompts):
            point = np.array([[rng.uniform(0, image.shape[1]), rng.uniform(0, image.shape[0])]])
            ref_logits, _, _ = reference.predict(point, np.array([1]), return_logits=True)
            logits, _, _ = predictor.predict(point, np.array([1]), return_logits=True)
            ious += compare_masks(ref_logits, logits, label="engine").iou
    return {"masks": len(ious), "min_iou": min(ious), "mean_iou": float(np.mean(ious)),
            "seconds": round(time.perf_counter() - start, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default="out/gpu-check")
    parser.add_argument("--images", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile contender")
    parser.add_argument("--report")
    args = parser.parse_args()

    import torch

    from vitdeploy.families import eager_reference
    from vitdeploy.precision.calibration_data import bundled_calibration_dir
    from vitdeploy.runtime.apps.sam.predictor import SamPredictor
    from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner
    from vitdeploy.runtime.backends.tensorrt_runner import TensorRTRunner
    from vitdeploy.validation.masks import compare_masks

    work = Path(args.workdir)
    encoder, decoder = work / "sam_vit_b.onnx", work / "sam_vit_b_decoder.onnx"
    engines = {name: work / f"{name}.plan" for name in ("sam_vit_b", "sam_vit_b.fp16", "sam_vit_b.int8")}
    engines = {k: v for k, v in engines.items() if v.is_file()}
    decoder_plan = work / "sam_vit_b_decoder.plan"
    report: dict[str, Any] = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}
    images = sorted(p for p in bundled_calibration_dir().iterdir() if p.suffix in (".jpg", ".png"))[: args.images]

    # --- masks through the decoder (reference: the FP32 ONNX pair on the CPU)
    reference = SamPredictor(encoder, decoder, runtime="onnxruntime")
    masks: dict[str, dict[str, Any]] = {}
    for name, plan in engines.items():
        for dec in dict.fromkeys((decoder_plan, decoder)):  # the decoder engine, then the decoder on the CPU
            if not dec.is_file():
                continue
            key = f"{name} + {dec.name}"
            try:
                masks[key] = _mask_agreement(SamPredictor(plan, dec), reference, images, args.prompts, compare_masks)
            except Exception as exc:  # a report, not a gate: record what broke and go on to the next contender
                masks[key] = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"masks {key}: {masks[key]}", flush=True)
    report["masks_vs_cpu_fp32"] = masks

    # --- embeddings and latency against the official encoder on this GPU
    meta = OnnxRuntimeRunner(encoder).metadata
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = eager_reference(meta).cuda().eval()
    x = np.random.default_rng(0).standard_normal((1, 3, 1024, 1024)).astype(np.float32)
    sync = torch.cuda.synchronize

    def eager(dtype: torch.dtype | None, module: torch.nn.Module = model) -> Callable[[], np.ndarray]:
        def run() -> np.ndarray:
            with torch.inference_mode(), torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
                return module(torch.from_numpy(x).cuda()).float().cpu().numpy()
        return run

    ref = eager(None)()
    latency: dict[str, Any] = {}
    for label, dtype in (("eager fp32 (TF32 off)", None), ("eager fp16 autocast", torch.float16),
                         ("eager bf16 autocast", torch.bfloat16)):
        latency[label] = _timed(eager(dtype), args.runs, args.warmup, sync)
        print(f"latency {label}: {latency[label]}", flush=True)
    embeddings: dict[str, Any] = {"eager fp16 autocast": _cos_rel(ref, eager(torch.float16)())}
    if not args.no_compile:
        try:
            start = time.perf_counter()
            run = eager(torch.float16, torch.compile(model))
            run()
            latency["torch.compile fp16 autocast"] = {**_timed(run, args.runs, args.warmup, sync),
                                                      "compile_s": round(time.perf_counter() - start, 1)}
            embeddings["torch.compile fp16 autocast"] = _cos_rel(ref, run())
        except Exception as exc:  # a report, not a gate
            latency["torch.compile fp16 autocast"] = {"error": f"{type(exc).__name__}: {exc}"}
        print(f"latency torch.compile: {latency['torch.compile fp16 autocast']}", flush=True)
    for name, plan in engines.items():
        try:
            start = time.perf_counter()
            runner = TensorRTRunner(plan, runtime_cache=work / f"{name}.runtime-cache")
            load_s = time.perf_counter() - start
            feed = {"image": x}
            embeddings[name] = _cos_rel(ref, runner.run(feed)["image_embeddings"])
            latency[name] = {**_timed(lambda: runner.run(feed), args.runs, args.warmup, lambda: None),
                             "first_load_s": round(load_s, 2), "warnings": runner.warnings}
            del runner
        except Exception as exc:  # a report, not a gate
            latency[name] = {"error": f"{type(exc).__name__}: {exc}"}
        print(f"engine {name}: {embeddings.get(name)} {latency[name]}", flush=True)
    report["embeddings_vs_eager_fp32_gpu"] = embeddings
    report["latency_host_to_host"] = latency
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
