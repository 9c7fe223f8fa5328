"""OpenVINO's first and later loads of one ONNX file, with vitdeploy's model cache and without it.

Each load is a fresh process (``OpenVinoRunner`` as ``--runtime openvino`` opens the file), timed by the runner's
``load_seconds`` (read + compile, or read + load from the cache), then one run at the file's input shape. Rows: the
first load into an empty cache folder (it compiles and writes the blob), ``--loads - 1`` loads from that cache, and
one load with the cache off (``VITDEPLOY_CACHE_DIR=none``).

    .venv/bin/python benchmarks/bench_openvino_load.py sam2.1_hiera_tiny.onnx --precision bf16 --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, resource, sys, time
import numpy as np
from vitdeploy.runtime.backends.openvino_runner import OpenVinoRunner
runner = OpenVinoRunner(sys.argv[1], threads=int(sys.argv[3]), inference_precision=sys.argv[2])
feeds = {name: np.random.default_rng(0).standard_normal([d if isinstance(d, int) and d > 0 else 1 for d in shape]).astype(np.float32)
         for name, shape in runner.input_shapes().items()}
start = time.perf_counter()
runner.run(feeds)
print(json.dumps({"load_s": runner.load_seconds, "first_run_s": time.perf_counter() - start,
                  "cache": str(runner.compile_cache) if runner.compile_cache else None,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def load(model: str, precision: str, threads: int, cache: str) -> dict:
    env = {**os.environ, "VITDEPLOY_CACHE_DIR": cache}
    done = subprocess.run([sys.executable, "-c", CHILD, model, precision, str(threads)], capture_output=True, text=True,
                          env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="an ONNX file from 'vitdeploy export'")
    parser.add_argument("--precision", default="f32", choices=["f32", "bf16"], help="OpenVINO's inference precision")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--loads", type=int, default=2, help="loads with the cache: the first compiles, the rest read it")
    parser.add_argument("--report", help="write the rows as JSON here")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as cache:
        for index in range(args.loads):
            rows.append({"load": "first, cache empty" if index == 0 else f"again, from the cache ({index})",
                         **load(args.model, args.precision, args.threads, cache)})
        size = sum(f.stat().st_size for f in Path(cache).rglob("*") if f.is_file())
    rows.append({"load": "cache off", **load(args.model, args.precision, args.threads, "none")})
    print(f"{Path(args.model).name}, OpenVINO {args.precision}, {args.threads} thread(s); cache {size / 1e6:.0f} MB")
    print(f"{'load':32s} {'load s':>8s} {'first run s':>12s} {'peak RSS MB':>12s}")
    for row in rows:
        print(f"{row['load']:32s} {row['load_s']:8.2f} {row['first_run_s']:12.2f} {row['peak_rss_mb']:12.0f}")
    if args.report:
        Path(args.report).write_text(json.dumps({"model": args.model, "precision": args.precision, "threads": args.threads,
                                                 "cache_bytes": size, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
