"""ONNX Runtime's CPU memory settings on one ONNX file: run-by-run latency and peak RSS, each setting in a fresh process.

Why: in ``bench_encoder_speed.py`` the full-size SAM encoder's ONNX Runtime rows ran their second run
2-4 s slower than the third, and the plain/generic graphs held ~7 GB. This probe runs the same file
with ONNX Runtime's defaults, with ``enable_mem_pattern`` off and with the CPU arena off, and prints
every run's time (the first is the run right after loading) and the process's peak RSS.

Usage:
    .venv/bin/python benchmarks/probe_ort_memory.py out/speed/naive.onnx --input out/speed/input.npy --threads 2 --runs 4
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

SETTINGS = ("default", "no-mem-pattern", "no-arena")


def worker(model: str, setting: str, input_path: str | None, threads: int, runs: int) -> dict:
    import numpy as np
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.enable_mem_pattern = setting != "no-mem-pattern"
    options.enable_cpu_mem_arena = setting != "no-arena"
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    first = session.get_inputs()[0]
    if input_path:
        x = np.load(input_path)
    else:
        x = np.random.default_rng(0).standard_normal([d if isinstance(d, int) else 1 for d in first.shape]).astype(np.float32)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, {first.name: x})
        times.append(round((time.perf_counter() - start) * 1000))
    return {"setting": setting, "runs_ms": times, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("--input", default=None, help=".npy input (default: seeded random of the input's shape)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=SETTINGS)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.model, args.worker, args.input, args.threads, args.runs)))
        return
    for setting in args.settings:
        command = [sys.executable, __file__, args.model, "--worker", setting, "--threads", str(args.threads),
                   "--runs", str(args.runs)] + (["--input", args.input] if args.input else [])
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            print(f"{setting}: failed: {done.stderr.strip().splitlines()[-1:]}", flush=True)
            continue
        result = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{setting:15s} runs ms {result['runs_ms']}  peak RSS {result['peak_rss_mb']} MB", flush=True)


if __name__ == "__main__":
    main()
