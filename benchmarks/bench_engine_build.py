"""TensorRT-RTX engine builds at full size, on this CPU-only machine: build time, peak memory, engine size.

For each recipe (default ``sam_vit_b`` and ``sam_vit_h``, random weights) the encoder is exported with
``--target tensorrt`` (ViT-H's weights go to external data past 2 GB), then ``vitdeploy build-engine
--builder tensorrt-rtx`` runs in a fresh process of its own, timed as a whole and by the builder's own
clock (the sidecar's ``build_seconds``), its peak resident memory read from the kernel
(``RUSAGE_CHILDREN`` of a process that ran nothing else). FP32 always; ``--precisions fp16 int8`` also
builds the files ``vitdeploy calibrate`` makes from the same export. The layer counts per precision are
the engine's own (its layer list, as ``vitdeploy inspect`` shows it).

Nothing here runs an engine: that needs an NVIDIA GPU (scripts/gpu-check.sh).

Usage:
    .venv/bin/python benchmarks/bench_engine_build.py --out out/bench_engine_build.json
    .venv/bin/python benchmarks/bench_engine_build.py --recipes sam_vit_b --precisions fp16 int8
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vitdeploy.cpu_features import cpu_features
from vitdeploy.metadata import tool_versions

CHILD = """
import resource, sys, time
from vitdeploy.engine.builder import BuildOptions, build_engine
start = time.perf_counter()
result = build_engine(sys.argv[1], sys.argv[2], BuildOptions(builder="tensorrt-rtx"))
wall = time.perf_counter() - start
print(wall, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0)
"""


def vitdeploy(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "vitdeploy", *args], check=True, stdout=subprocess.DEVNULL)


def build_row(onnx_path: Path, plan: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, str(onnx_path), str(plan)], capture_output=True, text=True, check=True)
    wall, peak = (float(v) for v in done.stdout.split()[-2:])
    side = json.loads(Path(str(plan) + ".json").read_text())
    return {"build_engine_wall_s": round(wall, 1), "builder_s": side["build_seconds"], "peak_rss_mb": round(peak),
            "engine_mb": round(plan.stat().st_size / 1e6, 1), "layers": side["layers"]["count"],
            "layers_by_precision": side["layers"]["by_precision"], "onnx_mb": round(
                sum(f.stat().st_size for f in onnx_path.parent.glob(onnx_path.name + "*")) / 1e6, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", nargs="+", default=["sam_vit_b", "sam_vit_h"])
    parser.add_argument("--precisions", nargs="*", default=[], choices=["fp16", "int8"])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for recipe in args.recipes:
            folder = Path(tmp) / recipe
            folder.mkdir()
            onnx_path = folder / f"{recipe}.onnx"
            start = time.perf_counter()
            vitdeploy("export", "-r", recipe, "--random-weights", "--target", "tensorrt", "-o", str(onnx_path))
            export_s = time.perf_counter() - start
            files = {"fp32": onnx_path}
            for precision in args.precisions:
                files[precision] = folder / f"{recipe}.{precision}.onnx"
                vitdeploy("calibrate", str(onnx_path), "-p", precision, "--no-eager", "-o", str(files[precision]))
            for precision, path in files.items():
                row = {"recipe": recipe, "precision": precision, "export_s": round(export_s, 1),
                       **build_row(path, path.with_suffix(".plan"))}
                print(json.dumps(row))
                rows.append(row)
            for f in folder.iterdir():  # ViT-H: ~2.5 GB of weights and a plan as large; free the disk before the next
                f.unlink()
    import tensorrt_rtx_bindings

    report = {"machine": {"cpu": cpu_features().summary(), "platform": platform.platform()},
              "versions": {**tool_versions(), "tensorrt-rtx": tensorrt_rtx_bindings.__version__},
              "parent_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0), "rows": rows}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2))
    print(json.dumps(report["machine"]), json.dumps(report["versions"]))


if __name__ == "__main__":
    main()
