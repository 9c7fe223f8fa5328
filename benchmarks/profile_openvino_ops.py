"""Where OpenVINO's CPU plugin spends its time on one model: per-node performance counters, grouped.

Why: in ``bench_encoder_speed.py`` OpenVINO's INT8 files (NNCF's and vitdeploy's Q/DQ file) ran slower
than eager on an AMD EPYC without VNNI, where OpenVINO's FP32 was the fastest plain contender. This
compiles a model (ONNX or OpenVINO IR) with the properties vitdeploy's ``OpenVinoRunner`` uses
(:func:`vitdeploy.runtime.backends.openvino_runner.cpu_config`) plus ``PERF_COUNT``, runs one warm-up and one
measured inference and prints the measured time per (node type, kernel) pair, largest first: the kernel
names say which path ran (e.g. ``jit_gemm_i8``, oneDNN's integer GEMM without VNNI, against
``brgemm_avx2_f32``).

Usage:
    .venv/bin/python benchmarks/profile_openvino_ops.py out/speed/naive_nncf_int8.xml out/speed/naive.onnx \\
        --input out/speed/input.npy --threads 2
"""

from __future__ import annotations

import argparse
import collections
import time

import numpy as np

from vitdeploy.cpu_features import cpu_features
from vitdeploy.runtime.backends.openvino_runner import cpu_config, import_openvino


def profile(path: str, x: np.ndarray, threads: int, top: int, precision: str = "f32", runs: int = 1) -> None:
    ov = import_openvino()
    core = ov.Core()
    compiled = core.compile_model(core.read_model(path), "CPU", {**cpu_config(threads, precision), "PERF_COUNT": True})
    request = compiled.create_infer_request()
    request.infer({0: x})  # warm-up: first-run allocations and JIT
    times: collections.Counter = collections.Counter()
    counts: collections.Counter = collections.Counter()
    wall = []
    for _ in range(runs):  # per-node times averaged over the runs
        start = time.perf_counter()
        request.infer({0: x})
        wall.append((time.perf_counter() - start) * 1e3)
        for node in request.profiling_info:
            times[(node.node_type, node.exec_type)] += node.real_time.total_seconds() * 1e3 / runs
            counts[(node.node_type, node.exec_type)] += 1
    counts = collections.Counter({k: v // runs for k, v in counts.items()})
    total = sum(times.values())
    print(f"{path}: {total:.0f} ms in all nodes, {float(np.median(wall)):.0f} ms wall (median of {runs}; OpenVINO "
          f"{ov.__version__}, {threads} thread(s), {precision})")
    for (node_type, kernel), ms in times.most_common(top):
        print(f"  {node_type:<30} {kernel:<22} {counts[(node_type, kernel)]:>4} nodes {ms:9.0f} ms {100 * ms / total:5.1f} %")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", help="ONNX files or OpenVINO IR (.xml) with one input")
    parser.add_argument("--input", required=True, help="the input array (.npy)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--top", type=int, default=12, help="(node type, kernel) pairs printed per model")
    parser.add_argument("--runs", type=int, default=1, help="measured runs after one warm-up; node times are averaged")
    parser.add_argument("--inference-precision", default="f32", choices=("f32", "bf16"),
                        help="OpenVINO's INFERENCE_PRECISION_HINT (bf16: its default on CPUs with AMX or AVX512-BF16)")
    args = parser.parse_args()
    print(f"CPU: {cpu_features().summary()}")
    x = np.load(args.input)
    for path in args.models:
        profile(path, x, args.threads, args.top, args.inference_precision, args.runs)


if __name__ == "__main__":
    main()
