"""INT8 files against their FP32 source on the images ``bench_encoder_speed.py`` holds out.

Why: the benchmark's table judges every row on one held-out image; vitdeploy's own INT8 report judges
its file on all 4, and this does the same for files vitdeploy did not calibrate (NNCF's IR, a
``quantize_dynamic`` export), so their cosines can stand beside each other. The reference runs on
ONNX Runtime (``OnnxRuntimeRunner``); an OpenVINO IR (``.xml``) runs on OpenVINO with the runner's
properties (:func:`vitdeploy.runtime.openvino_runner.cpu_config`), an ONNX file on ONNX Runtime.

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
from bench_encoder_speed import calibration_split  # noqa: E402  (the benchmark's own split)

from vitdeploy.runtime.runners import OnnxRuntimeRunner  # noqa: E402
from vitdeploy.validation.parity import compare  # noqa: E402


def open_model(path: Path, threads: int) -> Callable[[np.ndarray], np.ndarray]:
    if path.suffix == ".xml":
        from vitdeploy.runtime.openvino_runner import cpu_config, import_openvino

        core = import_openvino().Core()
        compiled = core.compile_model(core.read_model(str(path)), "CPU", cpu_config(threads))
        request = compiled.create_infer_request()
        return lambda x: np.array(request.infer({0: x})[compiled.outputs[0]], copy=True)
    runner = OnnxRuntimeRunner(path, threads=threads)
    return lambda x: next(iter(runner.run({runner.input_names[0]: x}).values()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workdir", type=Path, help="bench_encoder_speed.py's --workdir (its images and files)")
    parser.add_argument("candidates", nargs="+", help="INT8 files in the workdir (.onnx or OpenVINO .xml)")
    parser.add_argument("--reference", default="naive.onnx", help="their FP32 source in the workdir")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    _, held = calibration_split(args.workdir, args.size)
    reference = open_model(args.workdir / args.reference, args.threads)
    expected = [reference(held.inputs[i:i + 1]) for i in range(len(held))]
    del reference
    report = {"reference": args.reference, "images": held.names, "candidates": {}}
    for name in args.candidates:
        run = open_model(args.workdir / name, args.threads)
        results = [compare(expected[i], run(held.inputs[i:i + 1]), "int8", held.names[i]) for i in range(len(held))]
        report["candidates"][name] = [r.to_dict() for r in results]
        cosines = [r.cosine for r in results]
        print(f"{name} vs {args.reference}: cosine {min(cosines):.6f}-{max(cosines):.6f} on {len(held)} held-out images, "
              f"{sum(map(bool, results))}/{len(held)} within 'int8'", flush=True)
    (args.workdir / "int8_heldout_parity.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
