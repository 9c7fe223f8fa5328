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
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_encoder_speed import VITDEPLOY_ORT_SETTINGS, prepare  # noqa: E402  (the same artifacts)

from vitdeploy.benchmark.op_profile import KINDS  # noqa: E402


def contenders(with_int8: bool, with_fused: bool, with_dynamic: bool) -> list[dict[str, Any]]:
    rows = [{"name": "plain export (ORT defaults)", "model": "naive.onnx", "precision": "fp32", "settings": {}}]
    if with_dynamic:
        rows.append({"name": "plain export, quantize_dynamic INT8", "model": "naive_dynamic_int8.onnx",
                     "precision": "int8", "settings": {}})
    for target in ("generic", "onnxruntime-cpu"):
        rows.append({"name": f"vitdeploy --target {target}", "model": f"vitdeploy_{target}.onnx", "precision": "fp32",
                     "settings": VITDEPLOY_ORT_SETTINGS, "target": target})
    if with_fused:
        rows.append({"name": "vitdeploy onnxruntime-cpu + fused kernel", "model": "vitdeploy_onnxruntime-cpu.onnx",
                     "precision": "fp32", "settings": {**VITDEPLOY_ORT_SETTINGS, "fused_attention": True}})
    if with_int8:
        rows.append({"name": "vitdeploy INT8 (Q/DQ)", "model": "vitdeploy_int8.onnx", "precision": "int8",
                     "settings": VITDEPLOY_ORT_SETTINGS})
        if with_fused:
            rows.append({"name": "vitdeploy INT8 + fused kernel", "model": "vitdeploy_int8.onnx", "precision": "int8",
                         "settings": {**VITDEPLOY_ORT_SETTINGS, "fused_attention": True}})
    return rows


def _vm_hwm_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def eager_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """The official encoder in PyTorch (the ratios' denominator), in this fresh process: 1 + ``runs`` runs."""
    import torch

    from vitdeploy.models.recipes import load_recipe
    from vitdeploy.models.sam_encoder import SamEncoderArch, load_sam_image_encoder

    torch.set_num_threads(spec["threads"])
    encoder = load_sam_image_encoder(SamEncoderArch.from_recipe(load_recipe(spec["recipe"])), random_seed=spec["seed"])
    x = torch.from_numpy(np.load(Path(spec["workdir"]) / "input.npy"))
    walls = []
    with torch.inference_mode():
        for _ in range(1 + spec["runs"]):
            t0 = time.perf_counter()
            encoder(x)
            walls.append((time.perf_counter() - t0) * 1000.0)
    return {"wall_ms": [round(w, 1) for w in walls], "first_ms": walls[0], "steady_ms": float(np.median(walls[1:])),
            "peak_rss_mb": round(_vm_hwm_mb(), 1)}


#: The probe's GEMM: ViT-B's MLP (4096 tokens x 768 -> 3072), the commonest linear-layer shape of the encoder.
PROBE_SHAPE = (4096, 768, 3072)


def probe_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """The best rate of one GEMM on ONNX Runtime's CPU kernels, float and integer (ops/s, best of 10)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    m, k, n = PROBE_SHAPE
    rng = np.random.default_rng(0)
    forms = {
        "fp32 MatMul": ("MatMul", TensorProto.FLOAT, rng.standard_normal((k, n)).astype(np.float32), {},
                        rng.standard_normal((m, k)).astype(np.float32)),
        "int8 u8s8 MatMulInteger (ORT's default)": ("MatMulInteger", TensorProto.UINT8,
                                                    rng.integers(-64, 64, (k, n)).astype(np.int8), {},
                                                    rng.integers(0, 256, (m, k)).astype(np.uint8)),
        "int8 u8u8 MatMulInteger (x64quantprecision=1, vitdeploy's pick without VNNI)": (
            "MatMulInteger", TensorProto.UINT8, rng.integers(-64, 64, (k, n)).astype(np.int8),
            {"session.x64quantprecision": "1"}, rng.integers(0, 256, (m, k)).astype(np.uint8)),
    }
    rates = {}
    for label, (op, in_type, weight, config, x) in forms.items():
        out_type = TensorProto.FLOAT if op == "MatMul" else TensorProto.INT32
        graph = helper.make_graph([helper.make_node(op, ["x", "W"], ["y"])], "probe",
                                  [helper.make_tensor_value_info("x", in_type, [m, k])],
                                  [helper.make_tensor_value_info("y", out_type, [m, n])],
                                  [numpy_helper.from_array(weight, "W")])
        options = ort.SessionOptions()
        options.intra_op_num_threads = spec["threads"]
        for key, value in config.items():
            options.add_session_config_entry(key, value)
        session = ort.InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
                                       .SerializeToString(), options, providers=["CPUExecutionProvider"])
        for _ in range(3):
            session.run(None, {"x": x})
        best = float("inf")
        for _ in range(10):
            t0 = time.perf_counter()
            session.run(None, {"x": x})
            best = min(best, time.perf_counter() - t0)
        rates[label] = 2.0 * m * k * n / best / 1e9
    return {"rates_per_s_g": rates}


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    """One contender in this fresh process: open with the profiler on, run 1 + ``runs`` times, sum the trace."""
    if spec.get("kind") == "eager":
        return eager_worker(spec)
    if spec.get("kind") == "probe":
        return probe_worker(spec)
    from vitdeploy.benchmark.op_profile import read_ort_profile, weight_nodes
    from vitdeploy.runtime.runners import OnnxRuntimeRunner

    workdir = Path(spec["workdir"])
    tag = spec["tag"]
    optimized = workdir / f"profiled_{tag}.onnx"
    feeds = {"image": np.load(workdir / "input.npy")}
    start = time.perf_counter()
    runner = OnnxRuntimeRunner(workdir / spec["model"], threads=spec["threads"], optimized_model_path=optimized,
                               profile_prefix=workdir / f"profile_{tag}", **spec["settings"])
    load_s = time.perf_counter() - start
    walls = []
    for _ in range(1 + spec["runs"]):
        t0 = time.perf_counter()
        runner.run(feeds)
        walls.append((time.perf_counter() - t0) * 1000.0)
    trace = runner.end_profiling()
    profile = read_ort_profile(trace, weight_nodes(optimized) if optimized.is_file() else ())
    fusion = getattr(runner, "fusion", None)
    return {**profile.to_dict(), "load_s": round(load_s, 2), "wall_ms": [round(w, 1) for w in walls],
            "peak_rss_mb": round(_vm_hwm_mb(), 1), "trace": str(trace),
            "int8_kernels": getattr(runner, "int8_kernels", None),
            "fused": fusion.summary() if fusion is not None else None}


def run_worker(spec: dict[str, Any], workdir: Path) -> dict[str, Any]:
    spec_path, out_path = workdir / f"profile_spec_{spec['tag']}.json", workdir / f"profile_result_{spec['tag']}.json"
    spec_path.write_text(json.dumps(spec))
    done = subprocess.run([sys.executable, __file__, "--worker", str(spec_path), "--worker-out", str(out_path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.strip().splitlines() if ln.strip()]
        return {"failed": lines[-1][:400] if lines else f"exit code {done.returncode}"}
    return json.loads(out_path.read_text())


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
    rates = probe["rates_per_s_g"]
    best_float = rates["fp32 MatMul"]
    best_int = max(v for k, v in rates.items() if k.startswith("int8"))
    lines = [f"Eager official encoder: {eager['steady_ms']:.0f} ms (first run {eager['first_ms']:.0f} ms, peak RSS "
             f"{eager['peak_rss_mb']:.0f} MB). GEMM probe {PROBE_SHAPE}: "
             + ", ".join(f"{k} {v:.1f} G/s" for k, v in rates.items()) + ".", "",
             "| contender | linear GFLOP | linear ms | rate G/s | linear at the probe's best rate: ms, × eager |",
             "|---|---:|---:|---:|---|"]
    for row in rows:
        res = results[row["name"]]
        if "failed" in res:
            continue
        steady = res["steady"]
        best = best_int if row["precision"] == "int8" else best_float
        floor_ms = steady["linear_gflop"] / best * 1000.0
        lines.append(f"| {row['name']} | {steady['linear_gflop']:.1f} | {steady['by_kind']['linear']:.0f} | "
                     f"{steady['linear_gflops_per_s']:.1f} | {floor_ms:.0f} ms, {floor_ms / eager['steady_ms']:.3f}× |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="sam_vit_b")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3, help="steady-state runs after the first")
    parser.add_argument("--no-int8", action="store_true", help="leave the INT8 rows out (no calibration)")
    parser.add_argument("--no-dynamic-int8", action="store_true", help="leave out quantize_dynamic of the plain export")
    parser.add_argument("--no-fused", action="store_true", help="leave out the rows on vitdeploy's fused kernel")
    parser.add_argument("--workdir", type=Path, default=Path("out/bench_encoder_speed"))
    parser.add_argument("--out", type=Path, default=None, help="JSON report (default: WORKDIR/profile_report.json)")
    parser.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        args.worker_out.write_text(json.dumps(worker(json.loads(args.worker.read_text()))))
        return

    from vitdeploy.cpu_features import cpu_features
    from vitdeploy.metadata import tool_versions

    with_fused = not args.no_fused
    if with_fused:
        from vitdeploy.runtime.relpos_kernel import library_path

        with_fused = library_path() is not None
    rows = contenders(not args.no_int8, with_fused, not args.no_dynamic_int8)
    args.workdir.mkdir(parents=True, exist_ok=True)
    # bench_encoder_speed's preparation, reusing what is there (its INT8 rows are named by precision).
    prep_args = argparse.Namespace(recipe=args.recipe, seed=args.seed, threads=args.threads, reuse=True, int8=None,
                                   int8_report=None)
    # --no-int8: no calibration, even for the quantize_dynamic row (precision is what prepare() reads).
    info = prepare(prep_args, args.workdir, [{**r, "kind": "ort", "precision": "fp32" if args.no_int8 else r["precision"]}
                                             for r in rows])
    cpu = cpu_features().summary()
    print(f"CPU: {cpu}; {args.threads} threads; onnxruntime {tool_versions().get('onnxruntime')}", flush=True)
    base = {"workdir": str(args.workdir.resolve()), "threads": args.threads, "runs": args.runs, "recipe": args.recipe,
            "seed": args.seed}
    print("timing the official encoder in PyTorch (eager) ...", flush=True)
    eager = run_worker({**base, "kind": "eager", "tag": "eager"}, args.workdir)
    print(f"  {eager}", flush=True)
    print(f"probing ONNX Runtime's GEMM rates at {PROBE_SHAPE} ...", flush=True)
    probe = run_worker({**base, "kind": "probe", "tag": "probe"}, args.workdir)
    print(f"  {probe}", flush=True)
    results: dict[str, dict[str, Any]] = {}
    for index, row in enumerate(rows):
        spec = {**row, **base, "tag": str(index)}
        print(f"profiling {row['name']} ...", flush=True)
        results[row["name"]] = run_worker(spec, args.workdir)
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
                               "results": results, "eager": eager, "probe": probe, "fusions": info.get("fusions"), "markdown": lines,
                               "pid_env": {"VITDEPLOY_ORT_OPS": os.environ.get("VITDEPLOY_ORT_OPS")}}, indent=2))
    print(f"report: {out}")


if __name__ == "__main__":
    main()
