"""The Hiera family at full size (random weights): export, parity against timm eager, latency side by side.

Rows: ``timm_hiera_tiny_224`` (timm Hiera-T, 224, logits) and ``timm_sam2_hiera_tiny`` (SAM 2's
Hiera-T trunk, HieraDet, at SAM 2's 1024, last-stage features). Each is exported through the same
library calls as ``vitdeploy export`` and ``vitdeploy validate`` (reference: timm's module as shipped,
fused attention on), on seeded random inputs and the bundled calibration images through timm's
preprocessing; eager and ONNX Runtime are timed alternated in one run with the same thread count.

Usage:
    .venv/bin/python benchmarks/bench_hiera.py --threads 2 --runs 5 --out out/bench_hiera.json
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

from vitdeploy.cpu_features import cpu_features
from vitdeploy.families import ExportOptions
from vitdeploy.metadata import tool_versions
from vitdeploy.pipeline import export_recipe
from vitdeploy.validation.validate_model import ValidateOptions, validate_model

ROWS = {"timm_hiera_tiny_224": None, "timm_sam2_hiera_tiny": 1024}
IMAGES = str(Path(__file__).resolve().parents[1] / "calibration" / "images")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for recipe, size in ROWS.items():
            path = Path(tmp) / f"{recipe}.onnx"
            start = time.perf_counter()
            exported = export_recipe(recipe, path, ExportOptions(random_seed=0, input_size=size), echo=print)
            export_s = time.perf_counter() - start
            report = validate_model(path, ValidateOptions(images=(IMAGES,), random_inputs=2, runs=args.runs, warmup=1,
                                                          threads=args.threads), echo=print)
            row = {
                "recipe": recipe, "input_size": exported.input_shapes["image"][-1], "export_s": round(export_s, 1),
                "size_mb": round(exported.size_bytes / 1e6, 1), "op_counts": exported.hygiene.op_counts,
                "passed": bool(report), "tolerance": report.tolerance.name,
                "cosine_min": min(p.cosine for p in report.parity), "rel_l2_max": max(p.rel_l2 for p in report.parity),
                "comparisons": len(report.parity),
                "eager_median_ms": report.latency[0].median_ms if report.latency else None,
                "ort_median_ms": report.latency[1].median_ms if report.latency else None,
                "ort_over_eager": report.latency_ratio,
            }
            print(json.dumps(row), flush=True)
            results.append(row)
    out = {"rows": results, "threads": args.threads, "runs": args.runs, "cpu": cpu_features().to_dict(),
           "machine": platform.machine(), "versions": tool_versions()}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=2))
    for r in results:
        print(f"{r['recipe']:<24} {r['input_size']:>5}px export {r['export_s']:>6.1f} s  {r['comparisons']} comparisons "
              f"cosine >= {r['cosine_min']:.7f} rel L2 <= {r['rel_l2_max']:.2e} ({r['tolerance']}: "
              f"{'pass' if r['passed'] else 'FAIL'})  ORT/eager {r['ort_over_eager']:.3f}")


if __name__ == "__main__":
    main()
