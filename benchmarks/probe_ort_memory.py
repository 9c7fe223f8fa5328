"""ONNX Runtime's CPU memory settings on one ONNX file: run-by-run latency and peak RSS, each setting in a fresh process.

Why: in ``bench_encoder_speed.py`` the full-size SAM encoder's ONNX Runtime rows ran their second run
2-4 s slower than the third, and the plain/generic graphs held ~7 GB, with ONNX Runtime's memory
pattern on (its default; vitdeploy's runner now turns it off on the CPU). This probe opens a file with
``OnnxRuntimeRunner`` (as the verbs do) with the memory pattern on (``mem-pattern``) or off
(``no-mem-pattern``, the runner's default on the CPU) and with the CPU arena off (``no-arena``), each in its own
process (``bench_encoder_speed.run_worker``), and prints every run's time (the first is the run right
after loading) and the process's peak RSS (``VmHWM``). Inputs: ``--input`` for a one-input model, else
seeded random float32 for every input (symbolic dimensions 1, or ``--dims name=value``).

Usage:
    .venv/bin/python benchmarks/probe_ort_memory.py out/speed/naive.onnx --input out/speed/input.npy --threads 2 --runs 4
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_encoder_speed import _vm_hwm_kb, run_worker  # noqa: E402  (the same fresh-process worker and RSS reader)
from profile_encoder_ops import _timed  # noqa: E402

#: Setting name -> OnnxRuntimeRunner keywords (the runner's CPU default is "no-mem-pattern").
SETTINGS = {"mem-pattern": {"memory_pattern": True}, "no-mem-pattern": {"memory_pattern": False},
            "no-arena": {"memory_arena": False}}


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner

    runner = OnnxRuntimeRunner(spec["model"], threads=spec["threads"], **SETTINGS[spec["setting"]])
    rng = np.random.default_rng(0)
    if spec["input"]:
        feeds = {runner.input_names[0]: np.load(spec["input"])}
    else:
        feeds = {name: rng.standard_normal([d if isinstance(d, int) else spec["dims"].get(d, 1) for d in shape])
                 .astype(np.float32) for name, shape in runner.input_shapes().items()}
    runs = _timed(lambda: runner.run(feeds), spec["runs"])
    return {"runs_ms": [round(r) for r in runs], "peak_rss_mb": round(_vm_hwm_kb() / 1024.0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", nargs="?")
    parser.add_argument("--input", default=None, help=".npy input of a one-input model (default: seeded random for every input)")
    parser.add_argument("--dims", nargs="*", default=[], metavar="NAME=VALUE",
                        help="values of symbolic input dimensions for the random inputs (default 1)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        args.worker_out.write_text(json.dumps(worker(json.loads(args.worker.read_text()))))
        return
    if not args.model:
        parser.error("give the ONNX file to probe")
    with tempfile.TemporaryDirectory() as tmp:
        for setting in args.settings:
            spec = {"model": str(Path(args.model).resolve()), "setting": setting, "threads": args.threads,
                    "dims": {k: int(v) for k, v in (d.split("=", 1) for d in args.dims)},
                    "runs": args.runs, "input": str(Path(args.input).resolve()) if args.input else None}
            result = run_worker(spec, Path(tmp), setting, __file__)
            if "failed" in result:
                print(f"{setting}: failed: {result['failed']}", flush=True)
                continue
            print(f"{setting:15s} runs ms {result['runs_ms']}  peak RSS {result['peak_rss_mb']} MB", flush=True)


if __name__ == "__main__":
    main()
