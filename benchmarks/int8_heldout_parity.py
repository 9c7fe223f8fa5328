"""INT8 files against their FP32 source on the images ``bench_encoder_speed.py`` holds out.

Why: the benchmark's table judges every row on one held-out image; vitdeploy's own INT8 report judges
its file on all 4, and this does the same for files vitdeploy did not calibrate (NNCF's IR, a
``quantize_dynamic`` export), so their cosines can stand beside each other. The reference runs on
ONNX Runtime; an OpenVINO IR (``.xml``) runs on OpenVINO with the runner's properties
(:func:`vitdeploy.runtime.backends.openvino_runner.cpu_config`), an ONNX file on ONNX Runtime, each loaded as the
benchmark's rows load them.

Usage (after a run of bench_encoder_speed.py with the NNCF rows in out/speed):
    .venv/bin/python benchmarks/int8_heldout_parity.py out/speed --reference naive.onnx \\
        naive_nncf_int8.xml naive_nncf_int8_overflow_fix.xml --threads 2
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_encoder_speed import _build_deployed, calibration_split  # noqa: E402  (the benchmark's own loader and split)

from vitdeploy.parity import compare  # noqa: E402


def open_model(workdir: Path, name: str, threads: int) -> Callable[[np.ndarray], np.ndarray]:
    """The file loaded as the benchmark's rows load it (runner defaults for an ONNX file); returns copies."""
    kind = "openvino-ir" if name.endswith(".xml") else "ort"
    run, _ = _build_deployed({"workdir": str(workdir), "model": name, "kind": kind, "threads": threads, "settings": {}})
    return lambda x: np.array(run(x), copy=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workdir", type=Path, help="bench_encoder_speed.py's --workdir (its images and files)")
    parser.add_argument("candidates", nargs="+", help="INT8 files in the workdir (.onnx or OpenVINO .xml)")
    parser.add_argument("--reference", default="naive.onnx", help="their FP32 source in the workdir")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    _, held = calibration_split(args.workdir, args.size)
    reference = open_model(args.workdir, args.reference, args.threads)
    expected = [reference(held.inputs[i:i + 1]) for i in range(len(held))]
    del reference
    report = {"reference": args.reference, "images": held.names, "candidates": {}}
    for name in args.candidates:
        run = open_model(args.workdir, name, args.threads)
        results = [compare(expected[i], run(held.inputs[i:i + 1]), "int8", held.names[i]) for i in range(len(held))]
        report["candidates"][name] = [r.to_dict() for r in results]
        cosines = [r.cosine for r in results]
        print(f"{name} vs {args.reference}: cosine {min(cosines):.6f}-{max(cosines):.6f} on {len(held)} held-out images, "
              f"{sum(map(bool, results))}/{len(held)} within 'int8'", flush=True)
    (args.workdir / "int8_heldout_parity.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
