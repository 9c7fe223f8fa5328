"""Full-size SAM encoder speed on CPU: vitdeploy on ONNX Runtime vs what a user would pick instead (eager and
torch.compile PyTorch, the plain export on ONNX Runtime and on OpenVINO, samexporter-style dynamic INT8), against the floor.

One command, one run:

    .venv/bin/python benchmarks/bench_encoder_speed.py --threads 2 --rounds 3 --workdir out/speed

What it does:

1. Prepares the artifacts in ``--workdir`` (kept, and reused with ``--reuse``): the official encoder
   with seeded random weights; its naive export (``torch.onnx.export`` of the official module);
   vitdeploy's FP32 export for every ``--target``; an INT8 Q/DQ graph calibrated from the
   ``onnxruntime-cpu`` export with ``vitdeploy calibrate`` (bundled images, minmax); the plain export
   quantized by ``onnxruntime.quantization.quantize_dynamic`` (QUInt8 weights, as samexporter ships its
   INT8 encoder); the input: a
   held-out bundled image through SAM's preprocessing (the INT8 graph is calibrated on images, so
   it is timed and compared on one). ``--rounds 0`` stops here (the artifacts, then ``--reuse`` to time them: what
   takes minutes is kept apart from what is timed).
2. Counts the official model's FLOPs (``torch.utils.flop_counter``).
3. Runs ``--rounds`` rounds. In each, every contender runs in its own fresh subprocess, one after
   the other, in an order rotated every round so machine drift spreads over all of them: load,
   warm-up, ``--runs`` timed runs. A GEMM-throughput probe runs as one more contender each round.
   Why one process per contender and round: each process's peak resident memory is its own (the
   kernel's high-water mark ``VmHWM`` of the process image, nothing sampled or missed; not
   ``ru_maxrss``, which Linux carries over from the forking parent), and no contender's caches,
   arenas or threads sit in another's process. The ONNX Runtime workers import no torch (as
   a deployed application would not).
   The vitdeploy rows name their attention form rather than take the runner's default, which depends
   on whether the kernel is built: the plain rows run ``fused_attention=False`` (the global blocks get
   their rel-pos term as an attention bias, :mod:`vitdeploy.runtime.forms.cpu_attention`; a ``tensorrt`` file's
   MatMul-Softmax-MatMul chains run as ONNX Runtime's ``MultiHeadAttention`` first). When ``bash
   cpp/build.sh`` has built vitdeploy's fused rel-pos attention kernel (``libvitdeploy_ort_ops.so``), the
   ``onnxruntime-cpu`` FP32 and INT8 files run once more with it (``fused_attention=True``): the runner's
   default where the library is built and the kernel takes a vector path; ``--no-fused`` leaves those rows
   out. The ``onnxruntime-cpu`` and ``tensorrt`` FP32 files also run with ``folded_attention=True``: their
   attention as exported.
   When ``bash cpp/build.sh`` has built ``cpp/build/model_bench``, the ``onnxruntime-cpu`` FP32 file also runs
   in vitdeploy's C++ backend (as an application embedding it would): as exported, and in the CPU forms
   ``vitdeploy optimize`` writes from it (unfolded; with the fused kernel when its library is built);
   ``--no-cpp`` leaves those rows out.
   When OpenVINO is installed (``pip install 'vitdeploy[openvino]'``), the plain export, each vitdeploy
   FP32 target and the INT8 Q/DQ file also run on OpenVINO (``OpenVinoRunner``: FP32 pinned, 7-bit
   weights for INT8 on CPUs without VNNI/AMX); ``--no-openvino`` leaves them out. With NNCF installed
   (``pip install -c requirements.lock -e '.[dev,bench]'``), OpenVINO's own INT8 runs too: the plain export
   quantized by ``nncf.quantize`` (transformer scheme, the same calibration images as vitdeploy's INT8), as an
   OpenVINO user would make it, with NNCF's default overflow fix (first layer only) and, on CPUs without
   VNNI/AMX (where u8 x s8 saturates), with its overflow fix on every layer (7-bit weights, what OpenVINO
   advises there); ``--no-nncf`` leaves them out.
4. Reports per contender: median and p90 of all timed runs, ratio to eager, the first run after loading
   (``first run ms``: arena growth, lazy initialization) and the load time, multiple of the floor
   (FLOPs / best measured GEMM throughput), peak RSS of the whole process and during the timed runs
   (VmHWM reset by ``/proc/self/clear_refs`` after warm-up), parity vs eager (named tolerance of the
   contender's precision), and for INT8 also vs its FP32 source on ONNX Runtime.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

TARGETS = ("generic", "tensorrt", "onnxruntime-cpu")
#: Runner settings of the vitdeploy rows (the runner's defaults otherwise: memory pattern off on the CPU); the attention
#: form is named per row (the fused kernel's rows set it to True).
VITDEPLOY_ORT_SETTINGS = {"optimization": "all", "io_binding": True, "fused_attention": False}
#: The plain export's rows get ONNX Runtime's own defaults, as a user would (the runner's would turn the memory
#: pattern off).
STOCK_ORT_SETTINGS = {"memory_pattern": True}
#: The plain export quantized by NNCF (OpenVINO IR, weights in the .bin beside it) -> NNCF's overflow fix
#: (``nncf.OverflowFix``'s value; None: NNCF's default, the first layer only).
NNCF_MODELS = {"naive_nncf_int8.xml": None, "naive_nncf_int8_overflow_fix.xml": "enable"}


def contenders(targets: tuple[str, ...], with_compile: bool, with_int8: bool, int8_path: Path | None = None,
               with_fused: bool = False, with_openvino: bool = False, with_dynamic: bool = False, with_nncf: bool = False,
               with_pattern_twins: bool = False, with_cpp: bool = False, skip: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The rows of the run, in table order. ``with_pattern_twins``: each ONNX Runtime row (but the folded one) once
    more with ONNX Runtime's memory pattern the other way, right after it; ``skip``: regular expressions of rows
    left out."""
    rows = _all_contenders(targets, with_compile, with_int8, int8_path, with_fused, with_openvino, with_dynamic, with_nncf)
    if with_cpp and "onnxruntime-cpu" in targets:
        rows += _cpp_contenders(with_fused)
    if with_pattern_twins:
        rows = [twin for row in rows for twin in (row, _pattern_twin(row)) if twin is not None]
    kept = [row for row in rows if not any(re.search(pattern, row["name"]) for pattern in skip)]
    if not kept or kept[0]["kind"] != "eager":
        raise SystemExit("--skip left out the eager row: every ratio is to it")
    return kept


def _pattern_twin(row: dict[str, Any]) -> dict[str, Any] | None:
    """The twin of an ONNX Runtime row with the memory pattern flipped (None for other rows and the folded one)."""
    from vitdeploy.runtime.backends.ort_settings import default_memory_pattern

    if row["kind"] != "ort" or row["settings"].get("folded_attention"):
        return None  # the C++ rows ("cpp") run with the memory pattern off, as the C++ backend does
    flipped = not row["settings"].get("memory_pattern", default_memory_pattern("cpu"))
    return {**row, "name": f"{row['name']}, memory pattern {'on' if flipped else 'off'}",
            "settings": {**row["settings"], "memory_pattern": flipped}}


def _all_contenders(targets: tuple[str, ...], with_compile: bool, with_int8: bool, int8_path: Path | None,
                    with_fused: bool, with_openvino: bool, with_dynamic: bool, with_nncf: bool) -> list[dict[str, Any]]:
    from vitdeploy.targets import TARGETS

    from vitdeploy.cpu_features import cpu_features
    from vitdeploy.precisions import Precision
    from vitdeploy.runtime.forms.openvino_gelu import keep_gelu_apart

    rows = [{"name": "eager official (PyTorch)", "kind": "eager", "precision": "fp32"}]
    bf16_cpu = bool(cpu_features().bf16_units)
    if bf16_cpu:  # PyTorch's own BF16 on the CPU's BF16 units: torch.autocast (oneDNN, AMX where present)
        rows.append({"name": "eager official, BF16 autocast", "kind": "eager", "precision": "bf16", "autocast": "bf16"})
    if with_compile:
        rows.append({"name": "torch.compile official", "kind": "compile", "precision": "fp32"})
        if bf16_cpu:
            rows.append({"name": "torch.compile official, BF16 autocast", "kind": "compile", "precision": "bf16",
                         "autocast": "bf16"})
    rows.append({"name": "ORT, naive export", "kind": "ort", "model": "naive.onnx", "precision": "fp32",
                 "settings": STOCK_ORT_SETTINGS})
    # What vitdeploy runs by default (predict, segment-all, SamPredictor): its default export on --runtime auto, here
    # without a profile (this CPU's measured default: vitdeploy/runtime/deploy/cpu_rows.py), judged by the budget
    # of the precision that default runs at.
    from vitdeploy.runtime.deploy.cpu_rows import cpu_default

    default = cpu_default("sam_image_encoder", "fp32")
    rows.append({"name": f"vitdeploy default (--runtime auto: {default.label()})", "kind": "auto",
                 "model": "vitdeploy_generic.onnx", "target": "generic", "precision": "bf16" if default.precision == "bf16" else "fp32"})
    if with_dynamic:
        # What samexporter ships: onnxruntime.quantization.quantize_dynamic of the plain export (weights only).
        rows.append({"name": "ORT, naive export, dynamic INT8 (quantize_dynamic)", "kind": "ort", "model": "naive_dynamic_int8.onnx",
                     "precision": "int8", "settings": STOCK_ORT_SETTINGS, "fp32_source": "ORT, naive export"})
    if with_openvino:
        # a peer: OpenVINO as its users run the plain export (pinned to f32), without vitdeploy's load-time forms
        rows.append({"name": "OpenVINO f32, naive export", "kind": "openvino", "model": "naive.onnx", "precision": "fp32",
                     "settings": {"gelu_apart": False}})
        # OpenVINO as its users get it: no inference precision asked for (BF16 on CPUs with AMX or AVX512-BF16,
        # f32 elsewhere; the row says which ran), judged by the bf16 budget (cosine >= 0.9999).
        rows.append({"name": "OpenVINO at its default precision, naive export", "kind": "openvino-default",
                     "model": "naive.onnx", "precision": "bf16"})
        # What an OpenVINO user would pick for INT8: NNCF's post-training quantization of the plain export; the
        # overflow fix on every layer (7-bit weights) only where OpenVINO's docs advise it, CPUs that saturate.
        for model, overflow_fix in NNCF_MODELS.items() if with_nncf else ():
            if overflow_fix and not _u8s8_saturates():
                continue
            rows.append({"name": f"OpenVINO INT8, NNCF quantize{', overflow fix' if overflow_fix else ''} (naive export)",
                         "kind": "openvino-ir", "model": model, "precision": "int8", "fp32_source": "ORT, naive export"})
    for target in targets:
        rows.append({"name": f"ORT, vitdeploy FP32 --target {target}", "kind": "ort", "model": f"vitdeploy_{target}.onnx",
                     "precision": "fp32", "settings": VITDEPLOY_ORT_SETTINGS, "target": target})
        if target in TARGETS and TARGETS[target].folded_attention:
            # The same file with its attention as exported (folded): on the CPU the runner's default unfolds the global
            # blocks (and runs tensorrt's MatMul-Softmax-MatMul chains as MultiHeadAttention first).
            rows.append({"name": f"ORT, vitdeploy FP32 --target {target}, folded attention as exported", "kind": "ort",
                         "model": f"vitdeploy_{target}.onnx", "precision": "fp32",
                         "settings": {**VITDEPLOY_ORT_SETTINGS, "folded_attention": True}})
    int8_model = str(int8_path.resolve()) if int8_path else "vitdeploy_int8.onnx"  # a path relative to the workdir
    if with_int8:
        rows.append({"name": "ORT, vitdeploy INT8 (onnxruntime-cpu)", "kind": "ort", "model": int8_model,
                     "precision": "int8", "settings": VITDEPLOY_ORT_SETTINGS, "fp32_source": "ORT, vitdeploy FP32 --target onnxruntime-cpu"})
    if with_openvino:
        for target in targets:
            rows.append({"name": f"OpenVINO f32, vitdeploy --target {target}", "kind": "openvino",
                         "model": f"vitdeploy_{target}.onnx", "precision": "fp32"})
            if keep_gelu_apart(cpu_features(), Precision.FP32):  # the runner's GELU form is on here: the file as read too
                rows.append({"name": f"OpenVINO f32, vitdeploy --target {target}, GELU fused (as OpenVINO reads it)",
                             "kind": "openvino", "model": f"vitdeploy_{target}.onnx", "precision": "fp32",
                             "settings": {"gelu_apart": False}})
            # vitdeploy's BF16 path: --runtime openvino --inference-precision bf16, judged by the bf16 budget.
            rows.append({"name": f"vitdeploy BF16 (OpenVINO), --target {target}", "kind": "openvino",
                         "model": f"vitdeploy_{target}.onnx", "precision": "bf16", "inference_precision": "bf16"})
        if with_int8:
            rows.append({"name": "OpenVINO INT8, vitdeploy Q/DQ file", "kind": "openvino", "model": int8_model,
                         "precision": "int8", "fp32_source": "ORT, vitdeploy FP32 --target onnxruntime-cpu"})
    if with_fused and "onnxruntime-cpu" in targets:
        # The same files, with the folded attention swapped for vitdeploy's fused kernel at load time.
        fused = {**VITDEPLOY_ORT_SETTINGS, "fused_attention": True}
        rows.append({"name": "ORT, vitdeploy FP32 --target onnxruntime-cpu + fused rel-pos kernel", "kind": "ort",
                     "model": "vitdeploy_onnxruntime-cpu.onnx", "precision": "fp32", "settings": fused})
        if with_int8:
            rows.append({"name": "ORT, vitdeploy INT8 + fused rel-pos kernel", "kind": "ort", "model": int8_model,
                         "precision": "int8", "settings": fused, "fp32_source": "ORT, vitdeploy FP32 --target onnxruntime-cpu"})
    return rows


#: The C++ rows' files: the ``onnxruntime-cpu`` export as written, and its CPU forms by ``vitdeploy optimize``
#: (file name -> form; None: the export itself).
CPP_MODELS = {"vitdeploy_onnxruntime-cpu.onnx": None, "vitdeploy_onnxruntime-cpu.cpu.onnx": "unfolded",
              "vitdeploy_onnxruntime-cpu.fused.onnx": "fused-kernel"}
#: ``cpp/build/model_bench`` (built by ``bash cpp/build.sh``): the C++ backend timed as an application runs it.
MODEL_BENCH = Path(__file__).resolve().parents[1] / "cpp" / "build" / "model_bench"


def _cpp_contenders(with_fused: bool) -> list[dict[str, Any]]:
    """The ``onnxruntime-cpu`` FP32 file in vitdeploy's C++ backend (``model_bench``): as exported, and as written by
    ``vitdeploy optimize`` (unfolded; with the fused kernel when the library is built)."""
    words = {None: "file as exported (folded attention)", "unfolded": "vitdeploy optimize (unfolded global blocks)",
             "fused-kernel": "vitdeploy optimize --fused-attention"}
    return [{"name": f"C++ backend, onnxruntime-cpu {words[form]}", "kind": "cpp", "model": model, "precision": "fp32",
             "cpu_form": form, **({"target": "onnxruntime-cpu"} if form is None else {})}
            for model, form in CPP_MODELS.items() if form != "fused-kernel" or with_fused]


# ----------------------------------------------------------------------------------------------- worker side


def _vm_hwm_kb() -> int:
    with open("/proc/self/status") as fh:
        return int(re.search(r"VmHWM:\s+(\d+)", fh.read()).group(1))


def _reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _build_torch(spec: dict[str, Any]):
    import torch

    from vitdeploy.models.recipes import load_recipe
    from vitdeploy.models.sam_encoder import SamEncoderArch, load_sam_image_encoder

    torch.set_num_threads(spec["threads"])
    arch = SamEncoderArch.from_recipe(load_recipe(spec["recipe"]))
    module = load_sam_image_encoder(arch, random_seed=spec["seed"]).eval()
    if spec.get("autocast"):
        from vitdeploy.benchmark.autocast import AutocastModule

        module = AutocastModule(module, "cpu", spec["autocast"])
    if spec["kind"] == "compile":
        module = torch.compile(module)

    def run(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return module(torch.from_numpy(x)).numpy()

    return run, None


def _build_deployed(spec: dict[str, Any]):
    """(run, what ran): an ONNX file on ONNX Runtime with the row's settings, or on OpenVINO (its provider line)."""
    path = Path(spec["workdir"]) / spec["model"]
    if spec["kind"] == "openvino-ir":  # an OpenVINO IR (NNCF's output), compiled as the OpenVinoRunner compiles
        from vitdeploy.runtime.backends.openvino_runner import cpu_config, import_openvino, openvino_version

        core = import_openvino().Core()
        compiled = core.compile_model(core.read_model(str(path)), "CPU", cpu_config(spec["threads"]))
        request, output = compiled.create_infer_request(), compiled.outputs[0]
        return (lambda x: request.infer({0: x})[output]), (f"OpenVINO {openvino_version()} CPU plugin, NNCF INT8 IR, "
                                                             f"{compiled.get_property('INFERENCE_NUM_THREADS')} thread(s)")
    if spec["kind"] == "openvino-default":  # only the latency hint and the thread count every row has
        from vitdeploy.runtime.backends.openvino_runner import cpu_config, import_openvino, openvino_version

        core = import_openvino().Core()
        config = {k: v for k, v in cpu_config(spec["threads"]).items() if k != "INFERENCE_PRECISION_HINT"}
        compiled = core.compile_model(core.read_model(str(path)), "CPU", config)
        request, output = compiled.create_infer_request(), compiled.outputs[0]
        return (lambda x: request.infer({0: x})[output]), (
            f"OpenVINO {openvino_version()} CPU plugin, its default inference precision: "
            f"{compiled.get_property('INFERENCE_PRECISION_HINT')}, {compiled.get_property('INFERENCE_NUM_THREADS')} thread(s)")
    if spec["kind"] == "auto":
        from vitdeploy.runtime.deploy.loader import open_runner

        runner = open_runner(path, threads=spec["threads"], runtime="auto")
        name, out = runner.input_names[0], runner.output_names[0]
        return (lambda x: runner.run({name: x})[out]), f"{runner.provider} ({runner.deployment.source})"
    if spec["kind"] == "openvino":
        from vitdeploy.runtime.backends.openvino_runner import OpenVinoRunner

        from vitdeploy.runtime.backends.base import RunnerOptions

        runner = OpenVinoRunner.from_options(path, RunnerOptions(threads=spec["threads"],
                                                                 precision=spec.get("inference_precision", "file")),
                                             **spec.get("settings", {}))
    else:
        from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner

        runner = OnnxRuntimeRunner(path, threads=spec["threads"], **spec["settings"])
    name, out = runner.input_names[0], runner.output_names[0]
    return (lambda x: runner.run({name: x})[out]), (runner.provider if spec["kind"] == "openvino" else None)


def _cpp_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """A C++ row: ``model_bench`` in its own process (its peak RSS is its own VmHWM), the same input, warm-up and runs."""
    from vitdeploy.runtime.forms.relpos_kernel import library_path

    workdir = Path(spec["workdir"])
    command = [str(MODEL_BENCH), "--model", str(workdir / spec["model"]), "--input", str(workdir / "input.npy"),
               "--threads", str(spec["threads"]), "--warmup", str(spec["warmup"]), "--runs", str(spec["runs"]), "--json"]
    if spec.get("output"):
        command += ["--output", spec["output"]]
    if spec.get("cpu_form") == "fused-kernel":
        command += ["--ort-ops", str(library_path())]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}")
    res = json.loads(done.stdout)
    return {"samples_ms": res["samples_ms"], "load_s": res["load_s"], "first_run_s": res["first_run_s"],
            "peak_rss_mb": res["peak_rss_mb"], "run_peak_rss_mb": None, "torch_imported": False,
            "provider": f"vitdeploy C++ backend (model_bench), {res['runtime']} as loaded by the binary"}


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs in a fresh process: time one contender, measure its memory, save its output."""
    if spec["kind"] == "cpp":
        return _cpp_worker(spec)
    if spec["kind"] == "gemm":
        from vitdeploy.cpu_features import cpu_features
        from vitdeploy.validation.floor import measure_bf16_gemm_peak, measure_gemm_peak, measure_int8_gemm_peak

        peak = measure_gemm_peak(spec["threads"])
        # Without BF16 units PyTorch emulates BF16 GEMMs (about 1 GFLOP/s on AVX2, minutes per probe): no BF16 floor
        bf16 = measure_bf16_gemm_peak(spec["threads"]).to_dict() if cpu_features().bf16_units else None
        return {"gemm_peak": peak.to_dict(), "bf16_gemm_peak": bf16,
                "int8_gemm_peak": measure_int8_gemm_peak(spec["threads"]).to_dict()}
    x = np.load(Path(spec["workdir"]) / "input.npy")
    start = time.perf_counter()
    run, provider = (_build_deployed if spec["kind"] in ("ort", "openvino", "openvino-ir", "openvino-default", "auto")
                     else _build_torch)(spec)
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    out = np.array(run(x), copy=True)
    first_s = time.perf_counter() - start
    for _ in range(spec["warmup"] - 1):
        run(x)
    load_peak_kb = _vm_hwm_kb()
    reset = _reset_hwm()
    samples = []
    for _ in range(spec["runs"]):
        start = time.perf_counter()
        run(x)
        samples.append((time.perf_counter() - start) * 1000.0)
    result = {
        "samples_ms": samples, "load_s": load_s, "first_run_s": first_s,
        "peak_rss_mb": max(load_peak_kb, _vm_hwm_kb()) / 1024.0,
        "run_peak_rss_mb": _vm_hwm_kb() / 1024.0 if reset else None,
        "torch_imported": "torch" in sys.modules, "provider": provider,
    }
    if spec.get("output"):
        np.save(spec["output"], out)
    return result


# ----------------------------------------------------------------------------------------------- parent side


def prepare(args: argparse.Namespace, workdir: Path, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The artifacts (:func:`prepare_artifacts`), what ONNX Runtime fuses in them and the official model's FLOPs."""
    import torch

    from vitdeploy.validation.floor import count_flops

    info, encoder = prepare_artifacts(args, workdir, rows)
    info["fusions"] = fusion_checks(workdir, rows)
    print("counting FLOPs of the official model ...", flush=True)
    flops = count_flops(encoder, (torch.from_numpy(np.load(workdir / "input.npy")),))
    info["flops"] = flops.to_dict()
    return info


def prepare_artifacts(args: argparse.Namespace, workdir: Path, rows: list[dict[str, Any]]) -> tuple[dict[str, Any], Any]:
    """Exports, INT8 calibration and the input image (kept in ``workdir``); returns (what was done, the official
    encoder with the rows' weights)."""
    import torch

    from vitdeploy.models.recipes import load_recipe
    from vitdeploy.models.sam_encoder import SamEncoderArch, load_sam_image_encoder
    from vitdeploy.onnx_export.sam_encoder import export_sam_image_encoder, sam_encoder_metadata

    torch.set_num_threads(args.threads)
    recipe = load_recipe(args.recipe)
    arch = SamEncoderArch.from_recipe(recipe)
    encoder = load_sam_image_encoder(arch, random_seed=args.seed).eval()
    size = arch.img_size
    info: dict[str, Any] = {"export_seconds": {}}

    def fresh(name: str) -> bool:
        return not (args.reuse and (workdir / name).is_file())

    if fresh("naive.onnx"):
        print("exporting the naive official model ...", flush=True)
        start = time.perf_counter()
        with torch.no_grad():
            torch.onnx.export(encoder, (torch.randn(1, 3, size, size),), None, dynamo=True, opset_version=18,
                              input_names=["image"], output_names=["image_embeddings"]).save(str(workdir / "naive.onnx"))
        info["export_seconds"]["naive"] = time.perf_counter() - start
    if any(r.get("model") == "naive_dynamic_int8.onnx" for r in rows) and fresh("naive_dynamic_int8.onnx"):
        from onnxruntime.quantization import QuantType, quantize_dynamic

        print("quantizing the naive export dynamically (onnxruntime.quantization.quantize_dynamic, QUInt8 weights) ...",
              flush=True)
        start = time.perf_counter()
        quantize_dynamic(str(workdir / "naive.onnx"), str(workdir / "naive_dynamic_int8.onnx"), weight_type=QuantType.QUInt8)
        info["export_seconds"]["dynamic_int8"] = time.perf_counter() - start
    for row in rows:
        target = row.get("target")
        if target and fresh(row["model"]):
            print(f"exporting vitdeploy --target {target} ...", flush=True)
            meta = sam_encoder_metadata(variant=recipe.variant, input_size=size, pixel_mean=recipe.pixel_mean,
                                        pixel_std=recipe.pixel_std, architecture=arch.to_dict(), random_seed=args.seed,
                                        target=target)
            start = time.perf_counter()
            export_sam_image_encoder(encoder, workdir / row["model"], metadata=meta, target=target)
            info["export_seconds"][target] = time.perf_counter() - start
    source = workdir / "vitdeploy_onnxruntime-cpu.onnx"
    for row in rows:
        if row.get("cpu_form") and fresh(row["model"]):
            from vitdeploy.cpu_optimize import write_cpu_form

            print(f"writing the CPU form {row['model']} (vitdeploy optimize) ...", flush=True)
            start = time.perf_counter()
            write_cpu_form(source, workdir / row["model"], fused_attention=row["cpu_form"] == "fused-kernel", force=True)
            info["export_seconds"][row["model"]] = time.perf_counter() - start
    calibration, held = calibration_split(workdir, size)
    np.save(workdir / "input.npy", held.inputs[:1])
    info["input_image"] = held.names[0]
    for name, overflow_fix in NNCF_MODELS.items():
        if any(r.get("model") == name for r in rows) and fresh(name):
            info["export_seconds"][name] = nncf_quantize(workdir, calibration, name, overflow_fix)
            info["nncf_images"] = len(calibration)
    if any(r["precision"] == "int8" for r in rows):
        report_path = workdir / "int8_report.json"
        if args.int8:
            report_path = args.int8_report or report_path
        elif fresh("vitdeploy_int8.onnx") or not report_path.is_file():
            print("calibrating INT8 (vitdeploy calibrate, bundled images, minmax) ...", flush=True)
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "vitdeploy", "calibrate", str(source), "-p", "int8", "-o",
                            str(workdir / "vitdeploy_int8.onnx"), "--report", str(workdir / "int8_report.json"),
                            "--cache-dir", str(workdir / "images"), "--threads", str(args.threads), "--force"], check=True)
            info["export_seconds"]["int8_calibration"] = time.perf_counter() - start
            import resource

            # The only child so far; an upper bound if the parent (forked from) was larger than the child's peak.
            info["int8_calibration_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
            print(f"calibration peak RSS {info['int8_calibration_peak_rss_mb']:.0f} MB", flush=True)
        if report_path.is_file():
            info["int8_report"] = json.loads(report_path.read_text())
    return info, encoder


def calibration_split(workdir: Path, size: int) -> tuple[Any, Any]:
    """(calibration, held out): the bundled images through the ``onnxruntime-cpu`` file's preprocessing, 4 held
    out (the first is the input every row runs); the split every INT8 contender is calibrated and judged on."""
    from vitdeploy.metadata import decode
    from vitdeploy.precision.calibration_data import bundled_calibration_dir, load_calibration_set
    from vitdeploy.metadata import read_metadata_props

    metadata = decode(read_metadata_props(workdir / "vitdeploy_onnxruntime-cpu.onnx"))
    cal = load_calibration_set([bundled_calibration_dir()], metadata, "image", [1, 3, size, size], cache_dir=workdir / "images")
    return cal.split(4)


def nncf_quantize(workdir: Path, calibration: Any, name: str, overflow_fix: str | None) -> float:
    """The plain export quantized by NNCF (``nncf.quantize``, transformer scheme) on the same calibration images
    as vitdeploy's INT8, saved as OpenVINO IR ``name`` with FP32 constants; ``overflow_fix``: NNCF's
    ``OverflowFix`` value (None: its default); the seconds it took."""
    import nncf
    import openvino as ov
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, OverflowFix

    print(f"quantizing the naive export with NNCF {nncf.__version__} ({len(calibration)} images, "
          f"model_type=TRANSFORMER, overflow fix {overflow_fix or 'default'}) -> {name} ...", flush=True)
    start = time.perf_counter()
    model = ov.Core().read_model(str(workdir / "naive.onnx"))
    dataset = nncf.Dataset([calibration.inputs[i:i + 1] for i in range(len(calibration))])
    advanced = AdvancedQuantizationParameters(overflow_fix=OverflowFix(overflow_fix)) if overflow_fix else None
    quantized = nncf.quantize(model, dataset, model_type=nncf.ModelType.TRANSFORMER, subset_size=len(calibration),
                              advanced_parameters=advanced)
    ov.save_model(quantized, str(workdir / name), compress_to_fp16=False)
    return time.perf_counter() - start


def _u8s8_saturates() -> bool:
    from vitdeploy.cpu_features import cpu_features

    return cpu_features().u8s8_saturates


def fusion_checks(workdir: Path, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What ONNX Runtime fused in the graph each vitdeploy file's first row runs: the runner's, with its CPU attention
    form (a tensorrt file's attention as MultiHeadAttention, global blocks unfolded), at the row's optimization level."""
    import onnx

    from vitdeploy.runtime.backends.ort_fusions import fusion_report
    from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner

    checks = {}
    checked = set()
    for row in rows:
        if row["kind"] != "ort" or row["model"].startswith("naive") or row["model"] in checked:
            continue  # the plain export's graphs, and rows that run a file already checked (fused, folded, twins)
        checked.add(row["model"])
        model = workdir / row["model"]
        optimized = workdir / f"optimized_{Path(row['model']).stem}.onnx"
        attention = {k: v for k, v in row["settings"].items() if k in ("fused_attention", "folded_attention")}
        OnnxRuntimeRunner(model, threads=1, optimization=row["settings"].get("optimization", "all"),
                          optimized_model_path=optimized, **attention)
        report = fusion_report(onnx.load(str(optimized), load_external_data=False))
        checks[row["name"]] = {**report.to_dict(), "missing": report.missing()}
        print(f"{row['name']}: fused {report.fused}, unfused {report.unfused}", flush=True)
    return checks


def _steal_and_total() -> tuple[int, int]:
    """(steal, total) CPU jiffies since boot, from /proc/stat (steal: time the hypervisor gave to others)."""
    with open("/proc/stat") as fh:
        values = [int(v) for v in fh.readline().split()[1:]]
    return values[7] if len(values) > 7 else 0, sum(values)


def run_worker(spec: dict[str, Any], workdir: Path, tag: str, script: str = __file__) -> dict[str, Any]:
    """``script --worker`` on ``spec`` in a fresh process; its result, or ``{"failed": its last error line}``."""
    spec_path = workdir / f"spec_{tag}.json"
    out_path = workdir / f"result_{tag}.json"
    spec_path.write_text(json.dumps(spec))
    done = subprocess.run([sys.executable, script, "--worker", str(spec_path), "--worker-out", str(out_path)],
                          capture_output=True, text=True)
    if done.returncode != 0:  # the contender could not run: a row that says why, not the end of the benchmark
        lines = [ln for ln in done.stderr.strip().splitlines() if ln.strip()]
        return {"failed": lines[-1][:400] if lines else f"exit code {done.returncode}"}
    return json.loads(out_path.read_text())


def summarize(rows: list[dict[str, Any]], results: dict[str, list[dict[str, Any]]], peak: dict[str, Any],
              flops: int, workdir: Path) -> list[dict[str, Any]]:
    from vitdeploy.validation.floor import floor_ms
    from vitdeploy.parity import compare

    floor = floor_ms(flops, peak["gflops"])
    outputs = {r["name"]: np.load(workdir / f"output_{i}.npy") for i, r in enumerate(rows) if results[r["name"]]}
    eager = outputs[rows[0]["name"]]
    table = []
    for row in rows:
        if not results[row["name"]]:
            continue  # it could not run (reported under the table)
        runs = [s for res in results[row["name"]] for s in res["samples_ms"]]
        median = float(np.median(runs))
        parity = compare(eager, outputs[row["name"]], row["precision"], label=row["name"])
        entry = {
            "contender": row["name"], "precision": row["precision"], "runs": len(runs), "median_ms": median,
            "p90_ms": float(np.percentile(runs, 90)), "min_ms": float(min(runs)), "samples_ms": runs,
            "peak_rss_mb": max(r["peak_rss_mb"] for r in results[row["name"]]),
            "run_peak_rss_mb": max((r["run_peak_rss_mb"] for r in results[row["name"]] if r["run_peak_rss_mb"] is not None),
                                   default=None),  # None: not measured (the C++ rows report their process's peak only)
            "load_s": float(np.median([r["load_s"] for r in results[row["name"]]])),
            "first_run_s": float(np.median([r["first_run_s"] for r in results[row["name"]]])),
            "torch_in_process": results[row["name"]][0]["torch_imported"],
            "parity_vs_eager": parity.to_dict(), "floor_ms": floor, "x_floor": median / floor,
            "settings": row.get("settings"), "provider": results[row["name"]][0].get("provider"),
        }
        if row.get("fp32_source") in outputs:
            entry["fp32_source"] = row["fp32_source"]
            entry["parity_vs_fp32_source"] = compare(outputs[row["fp32_source"]], outputs[row["name"]], "int8",
                                                     label=f"{row['name']} vs FP32").to_dict()
        table.append(entry)
    eager_ms = table[0]["median_ms"]
    eager_rss = table[0]["peak_rss_mb"]
    for entry in table:
        entry["x_eager"] = entry["median_ms"] / eager_ms
        entry["rss_vs_eager"] = entry["peak_rss_mb"] / eager_rss
    return table


def markdown(table: list[dict[str, Any]], peak: dict[str, Any], flops: int, header: dict[str, Any],
             fusions: dict[str, Any] | None = None) -> str:
    lines = [
        f"{header['recipe']} encoder at {header['size']}x{header['size']}, {header['threads']} threads, "
        f"{header['rounds']} alternated rounds x {header['runs']} timed runs, {header['processor']}; "
        f"load average {header['load_before']} before, {header['load_after']} after; CPU steal {header['steal_pct']:.1f}% "
        "while timing.",
        f"Floor: {flops / 1e9:.1f} GFLOP (torch.utils.flop_counter, official model) / {peak['gflops']:.0f} GFLOP/s "
        f"(best FP32 GEMM here, {peak['library']}, {header['threads']} threads) = {table[0]['floor_ms']:.0f} ms."
        + (f" BF16 floor: / {header['bf16_gflops']:.0f} GFLOP/s (best BF16 GEMM here, torch) = "
           f"{flops / 1e9 / header['bf16_gflops'] * 1000:.0f} ms." if header.get("bf16_gflops") else "")
        + (f" INT8 floor: / {header['int8_gops']:.0f} GOP/s (best INT8 GEMM here, {header['int8_library']} "
           f"MatMulInteger) = {flops / 1e9 / header['int8_gops'] * 1000:.0f} ms." if header.get("int8_gops") else ""),
        "",
        "| contender | median ms | p90 ms | x eager | first run ms | load s | x floor | peak RSS MB (process) | peak RSS MB (timed runs) | cosine vs eager | rel L2 vs eager | parity |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for e in table:
        p = e["parity_vs_eager"]
        lines.append(f"| {e['contender']} | {e['median_ms']:.0f} | {e['p90_ms']:.0f} | {e['x_eager']:.3f} | "
                     f"{e['first_run_s'] * 1000:.0f} | {e['load_s']:.1f} | {e['x_floor']:.2f} | "
                     f"{e['peak_rss_mb']:.0f} | {'—' if e['run_peak_rss_mb'] is None else format(e['run_peak_rss_mb'], '.0f')} | {p['cosine']:.6f} | {p['rel_l2']:.2e} | "
                     f"{'ok' if p['passed'] else 'FAIL'} ({p['tolerance']['name']}) |")
    for e in table:
        if "parity_vs_fp32_source" in e:
            p = e["parity_vs_fp32_source"]
            lines.append("")
            lines.append(f"{e['contender']} vs its FP32 source ({e['fp32_source']}): cosine {p['cosine']:.6f}, rel L2 "
                         f"{p['rel_l2']:.3g}, max-abs/scale {p['max_abs_rel']:.3g} ({'ok' if p['passed'] else 'FAIL'}, int8 tolerance).")
    for e in table:
        if e.get("provider"):
            lines.append("")
            lines.append(f"{e['contender']}: {e['provider']}.")
    if fusions:
        lines += ["", "ONNX Runtime's optimized graphs (fused kernels / patterns left unfused):", ""]
        for name, check in fusions.items():
            fused = ", ".join(f"{k} {v}/{check['unfused'][k]}" for k, v in check["fused"].items())
            lines.append(f"- {name}: {fused}")
    return "\n".join(lines)


def common_arguments(description: str | None) -> argparse.ArgumentParser:
    """The options this benchmark shares with ``profile_encoder_ops.py`` (same recipe, weights and artifacts)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="sam_vit_b")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workdir", type=Path, default=Path("out/bench_encoder_speed"))
    parser.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", type=Path, default=None, help=argparse.SUPPRESS)
    return parser


def main() -> None:
    parser = common_arguments(__doc__)
    parser.add_argument("--rounds", type=int, default=3, help="alternated rounds (one fresh process per contender each); 0: prepare the artifacts only")
    parser.add_argument("--runs", type=int, default=2, help="timed runs per contender and round")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--targets", nargs="+", default=list(TARGETS), choices=TARGETS)
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    parser.add_argument("--no-int8", action="store_true", help="leave the INT8 row out")
    parser.add_argument("--no-openvino", action="store_true",
                        help="leave out the OpenVINO rows (included when OpenVINO is installed: pip install 'vitdeploy[openvino]')")
    parser.add_argument("--no-dynamic-int8", action="store_true",
                        help="leave out the plain export quantized with onnxruntime's quantize_dynamic (samexporter's INT8)")
    parser.add_argument("--no-nncf", action="store_true",
                        help="leave out OpenVINO's INT8 by NNCF (included with the OpenVINO rows when nncf is installed: "
                             "pip install -c requirements.lock -e '.[dev,bench]')")
    parser.add_argument("--no-fused", action="store_true",
                        help="leave out the rows on vitdeploy's fused rel-pos kernel (included when cpp/build.sh has built it)")
    parser.add_argument("--no-cpp", action="store_true",
                        help="leave out the rows on vitdeploy's C++ backend (included when cpp/build.sh has built "
                             "cpp/build/model_bench)")
    parser.add_argument("--memory-pattern-twins", action="store_true",
                        help="also run each ONNX Runtime row with ONNX Runtime's memory pattern the other way "
                             "(on for vitdeploy's rows, off for the plain export's)")
    parser.add_argument("--skip", action="append", default=[], metavar="REGEX",
                        help="leave out the rows whose name matches (repeatable; the eager row cannot be left out)")
    parser.add_argument("--int8", type=Path, default=None,
                        help="use this INT8 file (calibrated from the onnxruntime-cpu export) instead of calibrating one")
    parser.add_argument("--int8-report", type=Path, default=None, help="the 'vitdeploy calibrate --report' JSON of --int8")
    parser.add_argument("--reuse", action="store_true", help="reuse artifacts already in --workdir")
    parser.add_argument("--out", type=Path, default=None, help="JSON report (default: WORKDIR/report.json)")
    args = parser.parse_args()

    if args.worker:
        result = worker(json.loads(args.worker.read_text()))
        args.worker_out.write_text(json.dumps(result))
        return

    workdir = args.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    from vitdeploy.runtime.forms.relpos_kernel import library_path

    with_fused = not args.no_fused and library_path() is not None
    if not args.no_fused and not with_fused:
        print("note: no fused rel-pos kernel rows: build libvitdeploy_ort_ops.so with 'bash cpp/build.sh'", flush=True)
    with_cpp = not args.no_cpp and MODEL_BENCH.is_file()
    if not args.no_cpp and not with_cpp:
        print("note: no C++ backend rows: build cpp/build/model_bench with 'bash cpp/build.sh'", flush=True)
    from vitdeploy.runtime.backends.openvino_runner import openvino_version

    with_openvino = not args.no_openvino and openvino_version() is not None
    if not args.no_openvino and not with_openvino:
        print("note: no OpenVINO rows: pip install 'vitdeploy[openvino]'", flush=True)
    import importlib.util

    with_nncf = with_openvino and not args.no_nncf and importlib.util.find_spec("nncf") is not None
    if with_openvino and not args.no_nncf and not with_nncf:
        print("note: no NNCF INT8 rows: pip install -c requirements.lock -e '.[dev,bench]'", flush=True)
    rows = contenders(tuple(args.targets), not args.no_compile, not args.no_int8, args.int8, with_fused=with_fused,
                      with_openvino=with_openvino, with_dynamic=not args.no_dynamic_int8, with_nncf=with_nncf,
                      with_pattern_twins=args.memory_pattern_twins, with_cpp=with_cpp, skip=tuple(args.skip))
    if args.rounds == 0:  # the artifacts only: the fusion checks and the FLOP count are made when timing
        prepare_artifacts(args, workdir, rows)
        print(f"artifacts ready in {workdir}: time them with --reuse and --rounds N", flush=True)
        return
    load_before = os.getloadavg()
    info = prepare(args, workdir, rows)
    from vitdeploy.models.recipes import load_recipe

    size = load_recipe(args.recipe).architecture.get("img_size", 1024)
    base = {"workdir": str(workdir), "threads": args.threads, "warmup": args.warmup, "runs": args.runs,
            "recipe": args.recipe, "seed": args.seed}
    results: dict[str, list[dict[str, Any]]] = {r["name"]: [] for r in rows}
    failures: dict[str, str] = {}
    peaks: list[dict[str, Any]] = []
    bf16_peaks: list[dict[str, Any]] = []
    int8_peaks: list[dict[str, Any]] = []
    probes = [*rows, {"name": "GEMM probe", "kind": "gemm"}]
    loads = []
    steal_start = _steal_and_total()
    for rnd in range(args.rounds):
        order = probes[rnd % len(probes):] + probes[:rnd % len(probes)]
        loads.append(os.getloadavg())
        for probe in order:
            if probe["name"] in failures:
                continue  # it could not run in an earlier round: loading it again would fail again
            idx = probes.index(probe)
            spec = {**base, **probe}
            if rnd == 0 and probe["kind"] != "gemm":
                spec["output"] = str(workdir / f"output_{idx}.npy")
            res = run_worker(spec, workdir, f"{rnd}_{idx}")
            if probe["kind"] == "gemm":
                peaks.append(res["gemm_peak"])
                bf16, int8 = res["bf16_gemm_peak"], res["int8_gemm_peak"]
                if bf16 is not None:
                    bf16_peaks.append(bf16)
                int8_peaks.append(int8)
                print(f"round {rnd + 1}: GEMM peak {res['gemm_peak']['gflops']:.0f} GFLOP/s ({res['gemm_peak']['library']}), "
                      + (f"BF16 {bf16['gflops']:.0f} GFLOP/s" if bf16 else "no BF16 units (no BF16 floor)")
                      + f", INT8 {int8['gflops']:.0f} GOP/s ({int8['library']})", flush=True)
                continue
            if "failed" in res:
                failures[probe["name"]] = res["failed"]
                print(f"round {rnd + 1}: {probe['name']}: FAILED: {res['failed']}", flush=True)
                continue
            results[probe["name"]].append(res)
            print(f"round {rnd + 1}: {probe['name']}: " + ", ".join(f"{s:.0f}" for s in res["samples_ms"])
                  + f" ms, peak RSS {res['peak_rss_mb']:.0f} MB", flush=True)
    steal_end = _steal_and_total()
    steal_pct = 100.0 * (steal_end[0] - steal_start[0]) / max(1, steal_end[1] - steal_start[1])
    peak = max(peaks, key=lambda p: p["gflops"])
    flops = info["flops"]["total"]
    table = summarize(rows, results, peak, flops, workdir)
    load_after = os.getloadavg()
    from vitdeploy.cpu_features import cpu_features

    header = {"recipe": args.recipe, "size": size, "threads": args.threads, "rounds": args.rounds, "runs": args.runs,
              "processor": cpu_features().summary(),
              "load_before": " ".join(f"{v:.2f}" for v in load_before), "load_after": " ".join(f"{v:.2f}" for v in load_after),
              "steal_pct": steal_pct, "bf16_gflops": max((p["gflops"] for p in bf16_peaks), default=None)}
    best_int8 = max(int8_peaks, key=lambda p: p["gflops"], default=None)
    if best_int8 is not None:
        header.update(int8_gops=best_int8["gflops"], int8_library=best_int8["library"])
    text = markdown(table, peak, flops, header, info.get("fusions"))
    if failures:
        text += "\n\nContenders that could not run:\n" + "\n".join(f"- {n}: {why}" for n, why in failures.items())
    print("\n" + text)
    from vitdeploy.metadata import tool_versions
    from vitdeploy.runtime.backends.openvino_runner import openvino_version

    report = {"header": header, "table": table, "gemm_peaks": peaks, "gemm_peak": peak, "bf16_gemm_peaks": bf16_peaks,
              "int8_gemm_peaks": int8_peaks, "flops": info["flops"],
              "prepare": info, "load_per_round": loads, "failures": failures, "versions": {**tool_versions(), "openvino": openvino_version()},
              "command": sys.argv}
    out = args.out or workdir / "report.json"
    out.write_text(json.dumps(report, indent=2, default=str))
    (workdir / "table.md").write_text(text + "\n")
    print(f"\nreport: {out}")


if __name__ == "__main__":
    main()
