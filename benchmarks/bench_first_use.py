"""What a user gets from ``SamPredictor(encoder, decoder).set_image(image)`` with no profile, on the first use of a
model on a machine (the probe decides and caches) and afterwards (the cached decision), against OpenVINO at its own
defaults on the plain ``torch.onnx`` export and the official eager predictor. One command, one run:

    .venv/bin/python benchmarks/bench_first_use.py --encoder sam_vit_b.onnx --decoder sam_vit_b_decoder.onnx \\
        --threads 2 --rounds 3 --workdir out/first_use

``--encoder``/``--decoder``: the README's default export (``vitdeploy export -r sam_vit_b --random-weights`` and
``-r sam_vit_b_decoder``; seeded random weights, seed 0). The plain export (``torch.onnx.export(..., dynamo=True)``
of the official encoder with the same seeded weights) and the official predictor's embedding are made once into
``--workdir``.

Each round runs three contenders, each in a fresh process, in a rotated order:

* ``first use``: an empty vitdeploy cache folder, so ``--runtime auto`` probes, then decides (the probe's cost is
  inside the first ``set_image``'s construction);
* ``decided``: the cache the first contender of round 1 filled (the decision and OpenVINO's compiled model);
* ``OpenVINO default, plain export``: ``compile_model(read_model(plain), "CPU", {threads, LATENCY})`` with SAM's
  preprocessing in numpy (resize longest side, normalize, pad), no model cache, as its users run it.

Per contender: the construction (load) time, the first ``set_image``, the median of ``--runs`` more, peak RSS
(``VmHWM``; the probe's worker process is reported apart), the embedding's cosine against the official eager
predictor's; and the choice and the probe's own time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

IMAGE = "calibration/images/calib_15_stripes.jpg"

CHILD_VITDEPLOY = r"""
import json, sys, time
import numpy as np
from PIL import Image
t0 = time.perf_counter()
from vitdeploy.runtime.apps.sam.predictor import SamPredictor
predictor = SamPredictor(sys.argv[1], sys.argv[2], threads=int(sys.argv[3]))
load = time.perf_counter() - t0
image = np.asarray(Image.open(sys.argv[4]).convert("RGB"))
t0 = time.perf_counter(); predictor.set_image(image); first = time.perf_counter() - t0
runs = []
for _ in range(int(sys.argv[5])):
    t0 = time.perf_counter(); predictor.set_image(image); runs.append(time.perf_counter() - t0)
np.save(sys.argv[6], predictor.get_image_embedding())
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
import resource
print(json.dumps({"load_s": load, "first_s": first, "runs_s": runs, "peak_mb": hwm / 1024,
                  "worker_peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
                  "chosen": predictor.encoder.deployment.describe() if predictor.encoder.deployment else "",
                  "decoder": predictor.decoder.deployment.label() if predictor.decoder.deployment else ""}))
"""

CHILD_OPENVINO = r"""
import json, sys, time
import numpy as np
from PIL import Image
t0 = time.perf_counter()
import openvino as ov
core = ov.Core()
compiled = core.compile_model(core.read_model(sys.argv[1]), "CPU",
                              {"INFERENCE_NUM_THREADS": int(sys.argv[3]), "PERFORMANCE_HINT": "LATENCY"})
request = compiled.create_infer_request()
load = time.perf_counter() - t0
image = np.asarray(Image.open(sys.argv[4]).convert("RGB"))
mean, std = np.array([123.675, 116.28, 103.53], np.float32), np.array([58.395, 57.12, 57.375], np.float32)

def set_image(img):  # SAM's preprocessing as a user writes it: resize the longest side to 1024, normalize, pad
    h, w = img.shape[:2]; scale = 1024 / max(h, w)
    nh, nw = int(h * scale + 0.5), int(w * scale + 0.5)
    x = (np.asarray(Image.fromarray(img).resize((nw, nh), Image.BILINEAR), np.float32) - mean) / std
    padded = np.zeros((1024, 1024, 3), np.float32); padded[:nh, :nw] = x
    return request.infer({0: padded.transpose(2, 0, 1)[None]})[0]

t0 = time.perf_counter(); out = set_image(image); first = time.perf_counter() - t0
runs = []
for _ in range(int(sys.argv[5])):
    t0 = time.perf_counter(); out = set_image(image); runs.append(time.perf_counter() - t0)
np.save(sys.argv[6], np.asarray(out))
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
print(json.dumps({"load_s": load, "first_s": first, "runs_s": runs, "peak_mb": hwm / 1024,
                  "chosen": "openvino at its defaults: " + compiled.get_property("INFERENCE_PRECISION_HINT").to_string(),
                  "decoder": ""}))
"""


def prepare(workdir: Path, encoder: Path, threads: int) -> tuple[Path, Path]:
    """(the plain export, the official eager predictor's embedding of IMAGE), made once."""
    plain, eager = workdir / "plain.onnx", workdir / "eager_embedding.npy"
    if plain.is_file() and eager.is_file():
        return plain, eager
    import torch
    from PIL import Image
    from segment_anything import SamPredictor as OfficialPredictor
    from segment_anything import sam_model_registry

    from vitdeploy.families import eager_reference
    from vitdeploy.metadata import read_onnx_metadata

    torch.set_num_threads(threads)
    official = eager_reference(read_onnx_metadata(encoder)).eval()  # the official encoder, the file's seeded weights
    with torch.no_grad():
        torch.onnx.export(official, (torch.randn(1, 3, 1024, 1024),), None, dynamo=True, opset_version=18,
                          input_names=["image"], output_names=["image_embeddings"]).save(str(plain))
    sam = sam_model_registry["vit_b"](checkpoint=None)
    sam.image_encoder = official
    predictor = OfficialPredictor(sam.eval())
    predictor.set_image(np.asarray(Image.open(IMAGE).convert("RGB")))
    np.save(eager, predictor.get_image_embedding().numpy())
    return plain, eager


def run(child: str, model: str, decoder: str, threads: int, runs: int, out: Path, cache: Path | None) -> dict:
    env = {**os.environ, "VITDEPLOY_CACHE_DIR": str(cache) if cache else "none", "VITDEPLOY_PROBE": "1"}
    done = subprocess.run([sys.executable, "-c", child, model, decoder, str(threads), IMAGE, str(runs), str(out)],
                          capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(done.stderr)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["stderr"] = [line for line in done.stderr.splitlines() if line.startswith("vitdeploy:")]
    return result


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--encoder", type=Path, required=True)
    parser.add_argument("--decoder", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=2, help="timed set_image calls after the first")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.mkdtemp(prefix="vitdeploy-first-use-")))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    plain, eager_path = prepare(args.workdir, args.encoder, args.threads)
    eager = np.load(eager_path)
    kept = args.workdir / "kept-cache"
    names = ["first use", "decided", "OpenVINO default, plain export"]
    results: dict[str, list[dict]] = {name: [] for name in names}
    for round_index in range(args.rounds):
        order = names[round_index % 3:] + names[:round_index % 3]
        if round_index == 0:  # 'decided' needs a filled cache
            order = ["first use"] + [n for n in order if n != "first use"]
        for name in order:
            embedding = args.workdir / f"{name.split()[0]}.npy"
            if name == "first use":
                fresh = Path(tempfile.mkdtemp(prefix="cache-", dir=args.workdir))
                result = run(CHILD_VITDEPLOY, str(args.encoder), str(args.decoder), args.threads, args.runs, embedding,
                             fresh)
                if not kept.exists():
                    fresh.rename(kept)
            elif name == "decided":
                result = run(CHILD_VITDEPLOY, str(args.encoder), str(args.decoder), args.threads, args.runs, embedding,
                             kept)
            else:
                result = run(CHILD_OPENVINO, str(plain), "", args.threads, args.runs, embedding, None)
            result["cosine_vs_eager"] = cosine(np.load(embedding), eager)
            results[name].append(result)
            print(f"round {round_index + 1} {name}: load {result['load_s']:.1f} s, first {result['first_s'] * 1e3:.0f} "
                  f"ms, then {[round(r * 1e3) for r in result['runs_s']]} ms, cosine {result['cosine_vs_eager']:.6f}, "
                  f"peak {result['peak_mb']:.0f} MB; {result['chosen']}", flush=True)
    base = statistics.median(r for x in results[names[2]] for r in x["runs_s"])
    print("\n| contender | set_image median ms | vs OpenVINO default | load s (median) | first set_image ms | "
          "peak MB | cosine vs eager |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    summary = {}
    for name in names:
        rows = results[name]
        median = statistics.median(r for x in rows for r in x["runs_s"])
        summary[name] = {"median_ms": median * 1e3, "ratio": median / base,
                         "load_s": statistics.median(x["load_s"] for x in rows),
                         "first_ms": statistics.median(x["first_s"] for x in rows) * 1e3,
                         "peak_mb": max(x["peak_mb"] for x in rows),
                         "worker_peak_mb": max(x.get("worker_peak_mb", 0) for x in rows),
                         "cosine": min(x["cosine_vs_eager"] for x in rows), "chosen": rows[0]["chosen"],
                         "said": rows[0]["stderr"]}
        s = summary[name]
        print(f"| {name} | {s['median_ms']:.0f} | {s['ratio']:.3f} | {s['load_s']:.1f} | {s['first_ms']:.0f} | "
              f"{s['peak_mb']:.0f} | {s['cosine']:.6f} |")
    print(f"the probe's worker process peaked at {summary['first use']['worker_peak_mb']:.0f} MB (first use)")
    for line in summary["first use"]["said"]:
        print(line)
    if args.out:
        args.out.write_text(json.dumps({"summary": summary, "rounds": results}, indent=2))


if __name__ == "__main__":
    main()
