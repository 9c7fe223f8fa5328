"""Where the full-size SAM encoder's time goes on this CPU: ONNX Runtime's profiler on the plain export and on
every vitdeploy form, summed by operator kind, first run and steady state, side by side.

One command (the artifacts are those of ``bench_encoder_speed.py``; missing ones are made the same way):

    .venv/bin/python benchmarks/profile_encoder_ops.py --threads 2 --runs 3 --workdir out/bench_encoder_speed

Each contender runs in its own fresh process (as in ``bench_encoder_speed.py``): the session is opened
with ONNX Runtime's profiler on and its optimized graph saved, run once (the first run: arena growth,
prepacking, lazy initialization) and ``--runs`` more times; the trace is summed per run by
:mod:`vitdeploy.benchmark.op_profile` (``linear`` = weight GEMMs, ``attention`` = attention ops and
activation products, ``layout`` = Transpose/Reshape/Pad/Slice/...: what windows and head splits cost).
Contenders run one after the other in one pass, so compare rows within a run, not across runs: this
machine's speed drifts between minutes. Kernel times sum the nodes' own durations: the run's wall time
minus their sum is the executor's overhead (thread hand-offs, output copies).

Reported per contender: kernel ms by kind in the steady state and in the first run, the run's wall time,
session initialization, the arena's size, the process's peak RSS (VmHWM), the top operator types.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_encoder_speed import (  # noqa: E402  (the same artifacts, workers and options)
    STOCK_ORT_SETTINGS, VITDEPLOY_ORT_SETTINGS, _build_torch, _vm_hwm_kb, common_arguments, prepare_artifacts, run_worker)

from vitdeploy.benchmark.op_profile import KINDS  # noqa: E402


def contenders(with_int8: bool, with_fused: bool, with_dynamic: bool) -> list[dict[str, Any]]:
    rows = [{"kind": "ort", "name": "plain export (ORT defaults)", "model": "naive.onnx", "precision": "fp32",
             "settings": STOCK_ORT_SETTINGS}]
    if with_dynamic:
        rows.append({"kind": "ort", "name": "plain export, quantize_dynamic INT8", "model": "naive_dynamic_int8.onnx",
                     "precision": "int8", "settings": STOCK_ORT_SETTINGS})
    for target in ("generic", "onnxruntime-cpu"):
        rows.append({"kind": "ort", "name": f"vitdeploy --target {target}", "model": f"vitdeploy_{target}.onnx", "precision": "fp32",
                     "settings": VITDEPLOY_ORT_SETTINGS, "target": target})
    if with_fused:
        rows.append({"kind": "ort", "name": "vitdeploy onnxruntime-cpu + fused kernel", "model": "vitdeploy_onnxruntime-cpu.onnx",
                     "precision": "fp32", "settings": {**VITDEPLOY_ORT_SETTINGS, "fused_attention": True}})
    if with_int8:
        rows.append({"kind": "ort", "name": "vitdeploy INT8 (Q/DQ)", "model": "vitdeploy_int8.onnx", "precision": "int8",
                     "settings": VITDEPLOY_ORT_SETTINGS})
        if with_fused:
            rows.append({"kind": "ort", "name": "vitdeploy INT8 + fused kernel", "model": "vitdeploy_int8.onnx", "precision": "int8",
                         "settings": {**VITDEPLOY_ORT_SETTINGS, "fused_attention": True}})
    return rows


def eager_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """The official encoder in PyTorch (the ratios' denominator), in this fresh process: 1 + ``runs`` runs."""
    run, _ = _build_torch(spec)
    x = np.load(Path(spec["workdir"]) / "input.npy")
    walls = _timed(lambda: run(x), 1 + spec["runs"])
    return {"wall_ms": walls, "first_ms": walls[0], "steady_ms": float(np.median(walls[1:])),
            "peak_rss_mb": round(_vm_hwm_kb() / 1024.0, 1)}


def probe_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """The machine's GEMM rates at ViT-B's GEMM shapes: the FP32 peak as ``bench_encoder_speed.py`` measures it
    (PyTorch and ONNX Runtime), and ONNX Runtime's integer GEMMs in both kernel forms."""
    from vitdeploy.validation.floor import measure_gemm_peak, onnxruntime_int8_gemm_gops

    peak = measure_gemm_peak(spec["threads"])
    int8 = onnxruntime_int8_gemm_gops(spec["threads"])
    best = max(int8, key=int8.get)
    return {"fp32": {"rate": peak.gflops, "where": max(peak.measured, key=peak.measured.get)},
            "int8": {"rate": int8[best], "where": best}, "measured": {**peak.measured, **int8}}


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    """One contender in this fresh process: open with the profiler on, run 1 + ``runs`` times, sum the trace."""
    if spec["kind"] == "eager":
        return eager_worker(spec)
    if spec["kind"] == "probe":
        return probe_worker(spec)
    from vitdeploy.benchmark.op_profile import read_ort_profile, weight_nodes
    from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner

    workdir = Path(spec["workdir"])
    optimized = workdir / f"profiled_{spec['tag']}.onnx"
    feeds = {"image": np.load(workdir / "input.npy")}
    start = time.perf_counter()
    runner = OnnxRuntimeRunner(workdir / spec["model"], threads=spec["threads"], optimized_model_path=optimized,
                               profile_prefix=workdir / f"profile_{spec['tag']}", **spec["settings"])
    load_s = time.perf_counter() - start
    walls = _timed(lambda: runner.run(feeds), 1 + spec["runs"])
    trace = runner.end_profiling()
    profile = read_ort_profile(trace, weight_nodes(optimized))
    return {**profile.to_dict(), "load_s": round(load_s, 2), "wall_ms": walls,
            "peak_rss_mb": round(_vm_hwm_kb() / 1024.0, 1), "trace": str(trace), "int8_kernels": runner.int8_kernels,
            "fused": runner.fusion.summary() if runner.fusion is not None else None}


def _timed(fn, times: int) -> list[float]:
    walls = []
    for _ in range(times):
        start = time.perf_counter()
        fn()
        walls.append(round((time.perf_counter() - start) * 1000.0, 1))
    return walls


def table(rows: list[dict[str, Any]], results: dict[str, dict[str, Any]], phase: str) -> list[str]:
    """Markdown: one column per contender, one line per kind (kernel ms), then the run's wall time."""
    ok = [r for r in rows if "failed" not in results[r["name"]]]
    lines = ["| " + phase + " ms | " + " | ".join(r["name"] for r in ok) + " |",
             "|---|" + "---:|" * len(ok)]
    for kind in KINDS:
        values = [results[r["name"]][phase]["by_kind"][kind] for r in ok]
        if any(v >= 0.5 for v in values):
            lines.append(f"| {kind} | " + " | ".join(f"{v:.0f}" for v in values) + " |")
    lines.append("| **kernels** | " + " | ".join(f"**{results[r['name']][phase]['kernel_ms']:.0f}**" for r in ok) + " |")
    lines.append("| run (wall) | " + " | ".join(f"{results[r['name']][phase]['run_ms']:.0f}" for r in ok) + " |")
    return lines


def limits(rows: list[dict[str, Any]], results: dict[str, dict[str, Any]], eager: dict[str, Any],
           probe: dict[str, Any]) -> list[str]:
    """The floor each row's linear layers set: their arithmetic at the best GEMM rate the probe measured."""
    if "failed" in eager or "failed" in probe:
        return [f"(no limits: eager {eager.get('failed', 'ok')}, probe {probe.get('failed', 'ok')})"]
    lines = [f"Eager official encoder: {eager['steady_ms']:.0f} ms (first run {eager['first_ms']:.0f} ms, peak RSS "
             f"{eager['peak_rss_mb']:.0f} MB). GEMM probe, best rates: FP32 {probe['fp32']['rate']:.1f} GFLOP/s "
             f"({probe['fp32']['where']}), INT8 {probe['int8']['rate']:.1f} GOP/s ({probe['int8']['where']}); all: "
             + ", ".join(f"{k} {v:.1f}" for k, v in probe["measured"].items()) + ".", "",
             "| contender | linear GFLOP | linear ms | rate G/s | linear at the probe's best rate: ms, × eager |",
             "|---|---:|---:|---:|---|"]
    for row in rows:
        res = results[row["name"]]
        if "failed" in res:
            continue
        steady = res["steady"]
        floor_ms = steady["linear_gflop"] / probe[row["precision"]]["rate"] * 1000.0
        lines.append(f"| {row['name']} | {steady['linear_gflop']:.1f} | {steady['by_kind']['linear']:.0f} | "
                     f"{steady['linear_gflops_per_s']:.1f} | {floor_ms:.0f} ms, {floor_ms / eager['steady_ms']:.3f}× |")
    return lines


def main() -> None:
    parser = common_arguments(__doc__)
    parser.add_argument("--runs", type=int, default=3, help="steady-state runs after the first")
    parser.add_argument("--no-int8", action="store_true", help="leave the INT8 rows out (no calibration)")
    parser.add_argument("--no-dynamic-int8", action="store_true", help="leave out quantize_dynamic of the plain export")
    parser.add_argument("--no-fused", action="store_true", help="leave out the rows on vitdeploy's fused kernel")
    parser.add_argument("--out", type=Path, default=None, help="JSON report (default: WORKDIR/profile_report.json)")
    args = parser.parse_args()
    if args.worker:
        args.worker_out.write_text(json.dumps(worker(json.loads(args.worker.read_text()))))
        return

    from vitdeploy.cpu_features import cpu_features
    from vitdeploy.metadata import tool_versions

    with_fused = not args.no_fused
    if with_fused:
        from vitdeploy.runtime.forms.relpos_kernel import library_path

        with_fused = library_path() is not None
    rows = contenders(not args.no_int8, with_fused, not args.no_dynamic_int8)
    args.workdir.mkdir(parents=True, exist_ok=True)
    # bench_encoder_speed's preparation, reusing what is there (its INT8 rows are named by precision).
    prep_args = argparse.Namespace(recipe=args.recipe, seed=args.seed, threads=args.threads, reuse=True, int8=None,
                                   int8_report=None)
    # --no-int8: no calibration, even for the quantize_dynamic row (precision is what prepare_artifacts reads).
    prepare_artifacts(prep_args, args.workdir, [{**r, "precision": "fp32" if args.no_int8 else r["precision"]} for r in rows])
    cpu = cpu_features().summary()
    print(f"CPU: {cpu}; {args.threads} threads; onnxruntime {tool_versions().get('onnxruntime')}", flush=True)
    base = {"workdir": str(args.workdir.resolve()), "threads": args.threads, "runs": args.runs, "recipe": args.recipe,
            "seed": args.seed}
    print("timing the official encoder in PyTorch (eager) ...", flush=True)
    eager = run_worker({**base, "kind": "eager"}, args.workdir, "profile_eager", __file__)
    print(f"  {eager}", flush=True)
    print("probing the GEMM rates (FP32: PyTorch and ONNX Runtime; INT8: ONNX Runtime u8s8 and u8u8) ...", flush=True)
    probe = run_worker({**base, "kind": "probe"}, args.workdir, "profile_probe", __file__)
    print(f"  {probe}", flush=True)
    results: dict[str, dict[str, Any]] = {}
    for index, row in enumerate(rows):
        spec = {**row, **base, "tag": str(index)}
        print(f"profiling {row['name']} ...", flush=True)
        results[row["name"]] = run_worker(spec, args.workdir, f"profile_{index}", __file__)
        result = results[row["name"]]
        if "failed" in result:
            print(f"  failed: {result['failed']}", flush=True)
            continue
        print(f"  first run {result['first']['run_ms']:.0f} ms, steady {result['steady']['run_ms']:.0f} ms, "
              f"peak RSS {result['peak_rss_mb']:.0f} MB, load {result['load_s']:.1f} s", flush=True)
    lines = [f"CPU: {cpu}, {args.threads} threads, onnxruntime {tool_versions().get('onnxruntime')}, "
             f"{args.recipe} @ its recipe size, 1 + {args.runs} runs per contender, one pass", ""]
    lines += table(rows, results, "steady") + [""] + table(rows, results, "first") + [""]
    lines += limits(rows, results, eager, probe) + [""]
    lines.append("| contender | × eager (steady) | session init s | first − steady ms | arena MB | peak RSS MB | "
                 "top ops (steady ms) |")
    lines.append("|---|---:|---:|---:|---:|---:|---|")
    for row in rows:
        res = results[row["name"]]
        if "failed" in res:
            lines.append(f"| {row['name']} | failed: {res['failed']} | | | | | |")
            continue
        top = ", ".join(f"{op} {ms:.0f}" for op, ms in list(res["steady"]["by_op"].items())[:5])
        ratio = res["steady"]["run_ms"] / eager["steady_ms"] if "steady_ms" in eager else float("nan")
        lines.append(f"| {row['name']} | {ratio:.3f} | {res['session_init_ms'] / 1000:.1f} | "
                     f"{res['first']['run_ms'] - res['steady']['run_ms']:.0f} | {res['steady']['arena_mb']:.0f} | "
                     f"{res['peak_rss_mb']:.0f} | {top} |")
    print("\n".join(lines))
    out = args.out or args.workdir / "profile_report.json"
    out.write_text(json.dumps({"cpu": cpu, "threads": args.threads, "versions": tool_versions(), "rows": rows,
                               "results": results, "eager": eager, "probe": probe, "markdown": lines,
                               "env": {"VITDEPLOY_ORT_OPS": os.environ.get("VITDEPLOY_ORT_OPS")}}, indent=2))
    print(f"report: {out}")


if __name__ == "__main__":
    main()
