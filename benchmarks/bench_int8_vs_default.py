"""vitdeploy's INT8 SAM encoder against the FP32 default as ``--runtime auto`` decides it on this machine, side by side:
what ``doctor``'s "at INT8 accuracy" line (``INT8_MEASUREMENTS`` in ``vitdeploy/runtime/deploy/cpu_rows.py``) says.

Contenders, each in a fresh process, three rounds in rotated order, 2 threads, one warm-up then ``--runs`` timed runs of
the encoder graph on one seeded 1024 x 1024 input:

* ``FP32 default (auto)``: the ``generic`` export (``vitdeploy export -r sam_vit_b --random-weights``) as ``auto``
  opens it (a cached decision or the probe's; set ``VITDEPLOY_CACHE_DIR`` to a warm cache to leave the probe out);
* ``INT8, ONNX Runtime + fused kernel``: ``calibrate -p int8`` of the ``onnxruntime-cpu`` export, with the fused rel-pos
  kernel (``VITDEPLOY_ORT_OPS=cpp/build/libvitdeploy_ort_ops.so``, built by ``bash cpp/build.sh``);
* ``INT8 (auto)``: the INT8 file as ``auto`` opens it.

Usage:
    vitdeploy export -r sam_vit_b --random-weights -o out/int8/sam_vit_b.onnx
    vitdeploy export -r sam_vit_b --random-weights --target onnxruntime-cpu -o out/int8/fp32_ortcpu.onnx
    vitdeploy calibrate out/int8/fp32_ortcpu.onnx -p int8 -o out/int8/int8.onnx
    VITDEPLOY_ORT_OPS=cpp/build/libvitdeploy_ort_ops.so .venv/bin/python benchmarks/bench_int8_vs_default.py \\
        --fp32 out/int8/sam_vit_b.onnx --int8 out/int8/int8.onnx
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

CHILD = r"""
import json, sys, time
import numpy as np
from vitdeploy.runtime.deploy.loader import OpenOptions, open_runner
kind, path, out, runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
t0 = time.perf_counter()
options = {"auto": OpenOptions(threads=2),
           "ort-fused": OpenOptions(runtime="onnxruntime", threads=2, fused_attention=True)}[kind]
runner = open_runner(path, options)
load = time.perf_counter() - t0
image = np.random.default_rng(0).standard_normal((1, 3, 1024, 1024)).astype(np.float32)
name = list(runner.input_shapes())[0]
t0 = time.perf_counter(); result = runner.run({name: image}); first = time.perf_counter() - t0
times = []
for _ in range(runs):
    t0 = time.perf_counter(); result = runner.run({name: image}); times.append(time.perf_counter() - t0)
np.save(out, list(result.values())[0])
label = runner.deployment.label() if runner.deployment else runner.name
print(json.dumps({"load": load, "first": first, "runs": times, "label": label}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fp32", required=True, type=Path, help="the generic FP32 export")
    parser.add_argument("--int8", required=True, type=Path, help="calibrate -p int8 of the onnxruntime-cpu export")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    contenders = {"FP32 default (auto)": ("auto", args.fp32), "INT8, ONNX Runtime + fused kernel": ("ort-fused", args.int8),
                  "INT8 (auto)": ("auto", args.int8)}
    names = list(contenders)
    results: dict[str, list[dict]] = {name: [] for name in names}
    from vitdeploy.cpu_features import cpu_features

    print(f"CPU: {cpu_features().summary()}; 2 threads", flush=True)
    with tempfile.TemporaryDirectory() as work:
        outputs = {name: str(Path(work) / f"{i}.npy") for i, name in enumerate(names)}
        for round_index in range(args.rounds):
            for name in names[round_index % len(names):] + names[:round_index % len(names)]:
                kind, path = contenders[name]
                done = subprocess.run([sys.executable, "-c", CHILD, kind, str(path), outputs[name], str(args.runs)],
                                      capture_output=True, text=True)
                if done.returncode:
                    raise SystemExit(f"{name} failed: {done.stderr.strip().splitlines()[-1:]}")
                row = json.loads(done.stdout.strip().splitlines()[-1])
                results[name].append(row)
                print(f"round {round_index + 1} {name}: {row['label']}, load {row['load']:.1f} s, first "
                      f"{row['first'] * 1e3:.0f} ms, runs {[round(t * 1e3) for t in row['runs']]} ms", flush=True)
        reference = np.load(outputs[names[0]]).ravel()
        base = statistics.median(t for row in results[names[0]] for t in row["runs"])
        print("\n| contender | ran as | median ms | vs FP32 default | cosine vs the FP32 default's output |")
        print("|---|---|---:|---:|---:|")
        for name in names:
            median = statistics.median(t for row in results[name] for t in row["runs"])
            got = np.load(outputs[name]).ravel()
            cosine = float(got @ reference / np.linalg.norm(got) / np.linalg.norm(reference))
            print(f"| {name} | {results[name][0]['label']} | {median * 1e3:.0f} | {median / base:.3f} | {cosine:.6f} |")


if __name__ == "__main__":
    main()
