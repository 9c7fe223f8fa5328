"""What the full-size part benchmarks share (``bench_sam3_detector.py``, ``bench_sam3_interactive.py``,
``bench_sam3_text.py``): the part exported once into ``--out``, the official eager module and vitdeploy's runners timed
in alternated rounds in one process, and every output compared with the official's."""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def arguments(doc: str, rounds: int, bf16: bool = True) -> argparse.Namespace:
    """``--rounds``, ``--threads``, ``--out`` (made), and ``--no-bf16`` where the part is timed at BF16 too."""
    from benchmarks.options import parsed, timing_options

    parser = timing_options(argparse.ArgumentParser(description=doc.split("\n\n")[0]), out="out/sam3_bench",
                            rounds=rounds, runtime=None)
    if bf16:
        parser.add_argument("--no-bf16", action="store_true", help="leave out OpenVINO at BF16")
    return parsed(parser)


def exported(recipe: str, out: Path, threads: int) -> tuple[Path, dict[str, Any]]:
    """The part's file in ``out`` (exported from ``recipe`` with seeded weights where it is not there yet) and the
    report's head: the CPU, the threads, the export's seconds and the file's bytes (its external data included)."""
    import torch

    from vitdeploy.cpu_features import cpu_features
    from vitdeploy.pipeline import export_from_recipe

    torch.set_num_threads(threads)
    path = out / f"{recipe}.onnx"
    report: dict[str, Any] = {"cpu": cpu_features().summary(), "threads": threads}
    if not path.is_file():
        start = time.perf_counter()
        export_from_recipe(recipe, path, random_weights=True, seed=0)
        report["export_s"] = round(time.perf_counter() - start, 1)
    report["file_bytes"] = sum(p.stat().st_size for p in out.iterdir() if p.name.startswith(path.name))
    return path, report


def runners(path: Path, threads: int, bf16: bool) -> dict[str, Any]:
    """vitdeploy's runners of the part: ONNX Runtime and OpenVINO at FP32, and OpenVINO at BF16 (``bf16``)."""
    from vitdeploy.runtime.deploy.loader import open_runner

    found = {"vitdeploy onnxruntime": open_runner(path, runtime="onnxruntime", threads=threads),
             "vitdeploy openvino f32": open_runner(path, runtime="openvino", threads=threads)}
    if bf16:
        found["openvino bf16"] = open_runner(path, runtime="openvino", threads=threads, precision="bf16")
    return found


def alternate(contenders: dict[str, Callable[[Any], Any]], inputs: Sequence[Any], rounds: int, digits: int = 2,
              warm_every_input: bool = True) -> dict[str, dict[str, Any]]:
    """Each contender warmed up (on every input, or the first), then timed on every input, contenders alternated in
    each of ``rounds``: per contender its median ms and its ratio to the first contender's (the official's)."""
    for fn in contenders.values():  # warm-up (OpenVINO compiles on its first call)
        for item in inputs if warm_every_input else inputs[:1]:
            fn(item)
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, fn in contenders.items():
            for item in inputs:
                t0 = time.perf_counter()
                fn(item)
                times[name].append(time.perf_counter() - t0)
    base = statistics.median(next(iter(times.values())))
    return {name: {"median_ms": round(1e3 * statistics.median(t), digits),
                   "vs_official": round(statistics.median(t) / base, 3)} for name, t in times.items()}


def agreement(names: Sequence[str], want: Sequence[np.ndarray], got: Sequence[np.ndarray]) -> list[dict[str, Any]]:
    """Each output of ours against the official's: cosine and relative L2 (the ``fp32`` budget's measures)."""
    from vitdeploy.parity import compare

    return [{"output": key, "cosine": round(r.cosine, 8), "rel_l2": float(f"{r.rel_l2:.3g}")}
            for key, a, b in zip(names, want, got) for r in [compare(a, np.asarray(b), "fp32", label=key)]]


def time_and_compare(report: dict[str, Any], official: Any, ours: dict[str, Any], prompts: dict[str, dict[str, Any]],
                     input_names: Sequence[str], outputs: Sequence[str], rounds: int, **alternate_options: Any) -> None:
    """The official module (called on ``input_names``' tensors) and each of ``ours`` (their ``outputs``) timed on every
    prompt (:func:`alternate`), each of ours then compared with the official per prompt, and the peak memory: into
    ``report``, printed as JSON."""
    import torch

    def eager(feeds):
        with torch.inference_mode():
            return [t.numpy() for t in official(*(torch.from_numpy(feeds[n]) for n in input_names))]

    def run(name, feeds):
        out = ours[name].run(feeds)
        return [out[n] for n in outputs]

    contenders = {"official eager": eager, **{n: (lambda f, n=n: run(n, f)) for n in ours}}
    report["rows"] = alternate(contenders, list(prompts.values()), rounds, **alternate_options)
    for prompt, feeds in prompts.items():
        want = eager(feeds)
        for name in ours:
            report["rows"][name].setdefault("agreement", {})[prompt] = agreement(outputs, want, run(name, feeds))
    report["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(json.dumps(report, indent=2))
