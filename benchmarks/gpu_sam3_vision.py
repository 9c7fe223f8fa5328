"""SAM 3's vision encoder on a GPU: vitdeploy's FP32 and FP16 files on ONNX Runtime's CUDA provider, and the
official module's own FP16/BF16, each against the official module in FP32 on the same GPU.

The public report this answers (issue 53) measured the official backbone under TensorRT FP16 at cosine ~0.08
against PyTorch. This script puts side by side, on bundled images through the model's own preprocessing:

- **the official module** (``sam3``'s ViTDet trunk + dual neck, built from the same metadata and seed as the
  files) in FP32 with TF32 off: the reference, every output level;
- the official module under **FP16 / BF16 autocast** (what PyTorch users run) and converted **whole** to FP16 /
  BF16 (``module.half()``: every op in half, LayerNorm and Softmax included; PyTorch casts the complex rotary
  tables to real too, dropping their imaginary part), and whole FP16 with those tables kept complex;
- vitdeploy's **FP32 file** and **FP16 file** (``calibrate -p fp16``: LayerNorms and Softmaxes kept in FP32) on
  **ONNX Runtime's CUDA provider** (``--device cpu``: on the CPU, for a dry run of this script);
- per output: worst cosine and relative L2 over the images, NaN/Inf counts; latency host to host (input copied in,
  every output copied out, synchronized), median and p90 of ``--runs`` after ``--warmup``, on the first image;
- the **FP16 headroom** of the official module: the largest magnitude each trunk block writes in FP32 (FP16's
  largest finite value is 65504), and the first block whose output is not finite in whole FP16.

    python benchmarks/gpu_sam3_vision.py --workdir DIR --report DIR/gpu_sam3_vision.json   # DIR/sam3.onnx, sam3.fp16.onnx

Random weights (the files' seed): the figures say where precision is lost, not what a trained model scores.
"""

from __future__ import annotations

import argparse
import copy
import re
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from benchmarks.options import write_report

FP16_MAX = 65504.0


def _compare(refs: list[dict[str, np.ndarray]], outs: list[dict[str, np.ndarray]]) -> dict[str, dict[str, float]]:
    """Per output (:func:`vitdeploy.parity.compare`'s metrics): the worst cosine and relative L2 over the inputs, and
    the non-finite values in all of them."""
    from vitdeploy.parity import compare

    result: dict[str, dict[str, float]] = {}
    for name in refs[0]:
        metrics = [compare(ref[name], out[name], label=name) for ref, out in zip(refs, outs)]
        result[name] = {"cosine": min(m.cosine for m in metrics), "rel_l2": max(m.rel_l2 for m in metrics),
                        "nonfinite": sum(m.nan_count + m.inf_count for m in metrics)}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default="out/gpu-check")
    parser.add_argument("--encoder", default="sam3.onnx", help="the FP32 file in --workdir")
    parser.add_argument("--fp16", default="sam3.fp16.onnx", help="the FP16 file in --workdir (skipped if absent)")
    parser.add_argument("--images", type=int, default=2, help="bundled images to compare on")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--report")
    args = parser.parse_args()

    import torch
    from torch import nn

    from vitdeploy.benchmark.autocast import AutocastModule
    from vitdeploy.families import eager_reference
    from vitdeploy.metadata import read_onnx_metadata
    from vitdeploy.precision.calibration_data import bundled_calibration_dir, preprocessor_for
    from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner
    from vitdeploy.runtime.processing.images import read_image_rgb
    from vitdeploy.validation.latency import measure_latency
    from vitdeploy.validation.torch_runner import TorchRunner

    class WholeModule(nn.Module):
        """The module converted whole to ``dtype`` (``module.to(dtype)``: every floating-point and complex parameter
        and buffer, so the complex rotary tables lose their imaginary part, as PyTorch warns) or, with
        ``keep_complex``, with its complex buffers restored afterwards; outputs back to float32."""

        def __init__(self, module: nn.Module, dtype: torch.dtype, keep_complex: bool = False):
            super().__init__()
            self.module, self.dtype = copy.deepcopy(module), dtype
            tables = {n: b for n, b in self.module.named_buffers() if b.is_complex()} if keep_complex else {}
            self.module.to(dtype)
            for name, table in tables.items():
                owner, _, leaf = name.rpartition(".")
                setattr(self.module.get_submodule(owner), leaf, table)

        def forward(self, x: torch.Tensor) -> Any:
            out = self.module(x.to(self.dtype))
            return type(out)(o.float() for o in out) if isinstance(out, (tuple, list)) else out.float()

    work, device = Path(args.workdir), args.device
    encoder, fp16 = work / args.encoder, work / args.fp16
    meta = read_onnx_metadata(encoder)
    preprocess = preprocessor_for(meta)
    images = sorted(p for p in bundled_calibration_dir().iterdir() if p.suffix in (".jpg", ".png"))[: args.images]
    feeds_list = [{"image": preprocess(read_image_rgb(p)).astype(np.float32)} for p in images]
    report: dict[str, Any] = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
                              "torch": torch.__version__, "images": [p.name for p in images],
                              "input_shape": list(feeds_list[0]["image"].shape), "family": meta.get("family"),
                              "variant": meta.get("variant")}
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    start = time.perf_counter()
    model = eager_reference(meta, None).to(device).eval()
    report["eager_build_s"] = round(time.perf_counter() - start, 1)
    fp32_file = OnnxRuntimeRunner(encoder, device=device, allow_unverified=True)
    names = (fp32_file.input_names, fp32_file.output_names)
    report["onnxruntime"] = {"version": fp32_file.version, "provider": fp32_file.provider}

    # --- FP16 headroom: what each trunk block writes, in FP32, and where whole FP16 first stops being finite.
    blocks = [(n, m) for n, m in model.named_modules() if re.search(r"\.blocks\.\d+$", n)]

    def block_maxima(module: nn.Module, x: torch.Tensor) -> list[tuple[str, float, bool]]:
        seen: list[tuple[str, float, bool]] = []
        mods = dict(module.named_modules())
        hooks = [mods[n].register_forward_hook(
            lambda _m, _i, out, n=n: seen.append((n, float(out.detach().float().abs().nan_to_num(float("inf")).max()),
                                                  bool(torch.isfinite(out).all())))) for n, _ in blocks if n in mods]
        with torch.inference_mode():
            module(x)
        for h in hooks:
            h.remove()
        return seen

    x0 = torch.from_numpy(feeds_list[0]["image"]).to(device)
    fp32_blocks = block_maxima(model, x0)
    top = max(fp32_blocks, key=lambda t: t[1]) if fp32_blocks else ("-", 0.0, True)
    report["fp32_block_max_abs"] = {n: round(v, 2) for n, v, _ in fp32_blocks}
    report["fp32_largest_block_output"] = {"block": top[0], "max_abs": round(top[1], 2),
                                           "times_fp16_max": round(top[1] / FP16_MAX, 4)}
    try:
        half_blocks = block_maxima(copy.deepcopy(model).half(), x0.half())
        first_bad = next((n for n, _, finite in half_blocks if not finite), None)
        report["whole_fp16_first_nonfinite_block"] = first_bad or "none"
    except Exception as exc:  # a report, not a gate
        report["whole_fp16_first_nonfinite_block"] = f"error: {type(exc).__name__}: {exc}"
    print(f"FP32 largest block output {report['fp32_largest_block_output']}; whole FP16 first non-finite block: "
          f"{report['whole_fp16_first_nonfinite_block']}", flush=True)

    reference = TorchRunner(model, *names, device=device, metadata=meta)
    refs = [reference.run(f) for f in feeds_list]
    contenders: dict[str, Callable[[], Any]] = {
        "official eager fp32 (TF32 off)": lambda: reference,
        "official eager fp16 autocast": lambda: TorchRunner(AutocastModule(model, device, "fp16"), *names, device=device),
        "official eager bf16 autocast": lambda: TorchRunner(AutocastModule(model, device, "bf16"), *names, device=device),
        "official eager, whole module fp16": lambda: TorchRunner(WholeModule(model, torch.float16), *names, device=device),
        "official eager, whole module fp16, complex tables kept": lambda: TorchRunner(
            WholeModule(model, torch.float16, keep_complex=True), *names, device=device),
        "official eager, whole module bf16": lambda: TorchRunner(WholeModule(model, torch.bfloat16), *names, device=device),
        f"vitdeploy {encoder.name}, onnxruntime {device}": lambda: fp32_file,
    }
    if fp16.is_file():
        contenders[f"vitdeploy {fp16.name}, onnxruntime {device}"] = lambda: OnnxRuntimeRunner(
            fp16, device=device, allow_unverified=True)
    untimed: set[str] = set()
    if device == "cuda":
        # Where the official FP32 on the GPU parts from the same module on the CPU (rel L2 1.1e-3 on 2026-11-28, with
        # ONNX Runtime CUDA 2.0e-6 from the CPU): the CPU itself, and the GPU with attention on its math kernel
        from torch.nn.attention import SDPBackend, sdpa_kernel

        class MathAttention(nn.Module):
            def __init__(self, module: nn.Module):
                super().__init__()
                self.module = module

            def forward(self, x: torch.Tensor) -> Any:
                with sdpa_kernel(SDPBackend.MATH):
                    return self.module(x)

        contenders["official eager fp32 on the CPU"] = lambda: TorchRunner(copy.deepcopy(model).cpu(), *names)
        contenders["official eager fp32, attention on SDPA's math kernel"] = lambda: TorchRunner(
            MathAttention(model), *names, device=device)
        untimed.add("official eager fp32 on the CPU")
        report["torch_precision_settings"] = {
            "matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32, "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            **{f"{name}.fp32_precision": str(getattr(obj, "fp32_precision", "n/a")) for name, obj in (
                ("cuda.matmul", torch.backends.cuda.matmul), ("cudnn", torch.backends.cudnn),
                ("cudnn.conv", getattr(torch.backends.cudnn, "conv", None)))}}
        print(f"torch precision settings: {report['torch_precision_settings']}", flush=True)
    results: dict[str, Any] = {}
    for label, make in contenders.items():
        try:
            runner = make()
            outs = [runner.run(f) for f in feeds_list]
            parity = _compare(refs, outs)
            if label in untimed:
                timing = {"median_ms": float("nan"), "p90_ms": float("nan"), "runs": 0}
            else:  # host to host: every runner copies the input in and the outputs out, synchronized
                stats = measure_latency(lambda: runner.run(feeds_list[0]), label, args.runs, args.warmup)
                timing = {"median_ms": round(stats.median_ms, 3), "p90_ms": round(stats.p90_ms, 3), "runs": stats.runs}
            entry = {"worst_cosine": min(p["cosine"] for p in parity.values()),
                     "worst_rel_l2": max(p["rel_l2"] for p in parity.values()),
                     "nonfinite": sum(p["nonfinite"] for p in parity.values()), "outputs": parity, **timing}
            runner = None  # the next contender's session does not share the device with this one
        except Exception as exc:  # a report, not a gate: record what broke and go on
            entry = {"error": f"{type(exc).__name__}: {exc}"}
        results[label] = entry
        if device == "cuda":
            torch.cuda.empty_cache()
        shown = {k: v for k, v in entry.items() if k != "outputs"}
        print(f"{label}: {shown}", flush=True)
    report["contenders_vs_official_fp32"] = results

    print(f"\n{'contender':<56} {'worst cosine':>13} {'worst rel L2':>13} {'non-finite':>10} {'median ms':>10} {'p90 ms':>8}")
    for label, e in results.items():
        if "error" in e:
            print(f"{label:<56} {e['error'][:80]}")
        else:
            print(f"{label:<56} {e['worst_cosine']:>13.7f} {e['worst_rel_l2']:>13.3g} {e['nonfinite']:>10} "
                  f"{e['median_ms']:>10.2f} {e['p90_ms']:>8.2f}")
    write_report(args.report, report)


if __name__ == "__main__":
    main()
