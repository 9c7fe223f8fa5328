"""At scale, on one machine: the dataset job in one process and on Ray with 1 and 2 workers, and the server's prompt
latency under a bounded load, in one process and on Ray Serve (issue 38).

Dataset job (``vitdeploy embed``): the same images, the same encoder and the same resolved deployment (``--runtime
auto`` unless ``--runtime``) three ways, each into a fresh folder: in this process with every core; Ray with 1 worker
holding every core; Ray with one worker per core, 1 thread each. Reported: images/s over the job (model loading
included, Ray's start-up not: it is printed apart), and the largest difference of the Ray embeddings from the
in-process ones (0 where the thread counts agree; BF16 kernels may round differently with other thread counts).

Server (``vitdeploy serve``): one image is encoded, then ``--requests`` single-click prompt requests are sent from
``--concurrency`` threads (a bounded loop) over real HTTP on 127.0.0.1: p50/p99 latency, requests/s, errors. Then
the same on Ray Serve with ``--decoder-replicas`` decoder replicas.

Usage (full-size ViT-B with random weights; the files from benchmarks/bench_encoder_speed.py):
    vitdeploy export -r sam_vit_b --random-weights --seed 0 -o out/speed34/vitdeploy_generic.onnx
    vitdeploy export -r sam_vit_b_decoder --random-weights --seed 0 -o out/speed34/decoder.onnx
    PYTHONPATH=. .venv/bin/python benchmarks/bench_scale.py -e out/speed34/vitdeploy_generic.onnx \\
        -d out/speed34/decoder.onnx --images 8 --requests 200 --concurrency 8 --out out/scale38
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

from vitdeploy.cpu_features import available_cores, cpu_features
from vitdeploy.precision.calibration_data import bundled_calibration_dir
from vitdeploy.runtime.apps.datasets.job import job_config, plan_job, run_in_process, run_job
from vitdeploy.runtime.apps.datasets.store import read_embedding_shard
from vitdeploy.runtime.deploy.auto import resolve
from vitdeploy.runtime.deploy.deployment import AUTO, Deployment
from vitdeploy.runtime.deploy.loader import OpenOptions


def embeddings(folder: Path) -> dict[str, np.ndarray]:
    found = {}
    for line in (folder / "manifest.jsonl").read_text().splitlines():
        entry = json.loads(line)
        if entry["shard"]:
            arrays = read_embedding_shard(folder / entry["shard"])
            found.update(zip(arrays["image"].tolist(), arrays["embedding"]))
    return found


def dataset_rows(args: argparse.Namespace, chosen: Deployment, out: Path) -> list[dict]:
    from vitdeploy.runtime.apps.datasets.on_ray import LOCAL, run_on_ray, start_ray, stop_ray

    source = out / "images.txt"
    images = sorted(str(p) for p in bundled_calibration_dir().glob("*") if p.suffix in (".jpg", ".png"))[: args.images]
    source.write_text("\n".join(images) + "\n")
    cores = available_cores()
    asked = OpenOptions(runtime=chosen.runtime, policy=chosen.precision, **dict(chosen.settings))
    runs = [("in process", None, cores, 1), ("Ray, 1 worker", LOCAL, cores, 1), (f"Ray, {cores} workers", LOCAL, 1, cores)]
    rows, reference = [], None
    for label, ray, threads, workers in runs:
        folder = out / f"job_{label.replace(' ', '_').replace(',', '')}"
        shutil.rmtree(folder, ignore_errors=True)
        startup = 0.0
        if ray:
            start = time.perf_counter()
            start_ray(ray, cores)
            startup = time.perf_counter() - start
        config = job_config("embed", {"encoder": args.encoder}, replace(asked, threads=threads), pooled=bool(ray))
        plan = plan_job(config, source, folder, shard_size=1)
        report = run_job(plan, run_on_ray(plan, workers) if ray else run_in_process(plan))
        if ray:
            stop_ray()
        found = embeddings(folder)
        reference = reference or found
        diff = max(float(np.abs(found[k] - reference[k]).max()) for k in reference)
        rows.append({"run": label, "workers": workers, "threads": threads, "images": report.done,
                     "seconds": round(report.seconds, 2), "images_per_s": round(report.done / report.seconds, 3),
                     "ray_start_s": round(startup, 2), "max_abs_diff_vs_in_process": diff})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def load(port: int, key: str, size: tuple[int, int], requests: int, concurrency: int) -> dict:
    height, width = size

    def one(k: int) -> tuple[int, float]:  # a different click inside the image each time
        body = json.dumps({"points": [[(37 * k) % width, (23 * k) % height]], "labels": [1]}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/embeddings/{key}/masks", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        start = time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=120) as answer:
                answer.read()
                status = answer.status
        except urllib.error.HTTPError as error:
            status = error.code
        return status, time.perf_counter() - start

    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(one, range(requests)))
    wall = time.perf_counter() - start
    latencies = sorted(seconds for status, seconds in results if status == 200)
    return {"requests": requests, "concurrency": concurrency, "errors": sum(status != 200 for status, _ in results),
            "p50_ms": round(1e3 * statistics.median(latencies), 1),
            "p99_ms": round(1e3 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))], 1),
            "requests_per_s": round(requests / wall, 1)}


def encode(port: int, image: Path) -> tuple[str, tuple[int, int], float]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/embeddings", data=image.read_bytes(), method="POST")
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=300) as answer:
        posted = json.loads(answer.read())
    return posted["id"], (posted["height"], posted["width"]), time.perf_counter() - start


def server_rows(args: argparse.Namespace, chosen: Deployment) -> list[dict]:
    from vitdeploy.runtime.apps.datasets.on_ray import LOCAL, start_ray, stop_ray
    from vitdeploy.runtime.apps.serving.service import SamService
    from vitdeploy.runtime.apps.serving.server import Server
    from vitdeploy.runtime.apps.serving.ray_serve import RayServeOptions, plan_for_replicas, run_app, stop_app

    image = sorted(bundled_calibration_dir().glob("*.jpg"))[0]
    rows = []
    service = SamService(args.encoder, args.decoder, runtime=chosen.runtime, inference_precision=chosen.precision,
                         threads=available_cores())
    server = Server(service, "127.0.0.1", 0).start()
    key, size, seconds = encode(server.port, image)
    rows.append({"server": "one process", "encode_s": round(seconds, 2),
                 **load(server.port, key, size, args.requests, args.concurrency)})
    print(json.dumps(rows[-1]), flush=True)
    server.stop()
    del service

    start_ray(LOCAL, available_cores())
    asked = OpenOptions(runtime=chosen.runtime, policy=chosen.precision, threads=1)
    options = RayServeOptions(plan_for_replicas(args.encoder, args.decoder, asked),
                              decoder_replicas=(args.decoder_replicas, args.decoder_replicas))
    front = run_app(options, "127.0.0.1", 0).start()
    port = front.port
    key, size, seconds = encode(port, image)
    rows.append({"server": f"Ray Serve, 1 encoder x 1 thread, {args.decoder_replicas} decoder replica(s)",
                 "encode_s": round(seconds, 2), **load(port, key, size, args.requests, args.concurrency)})
    print(json.dumps(rows[-1]), flush=True)
    front.stop()
    stop_app()
    stop_ray()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-e", "--encoder", required=True)
    parser.add_argument("-d", "--decoder", required=True)
    parser.add_argument("--images", type=int, default=8, help="bundled images in the dataset job")
    parser.add_argument("--runtime", default=AUTO)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--decoder-replicas", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("out/scale38"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    chosen = resolve(args.encoder) if args.runtime == AUTO else Deployment(args.runtime)
    print(f"CPU: {cpu_features().summary()}; {available_cores()} cores; encoder as {chosen.describe()}", flush=True)
    report = {"cpu": cpu_features().summary(), "deployment": chosen.label(),
              "dataset": dataset_rows(args, chosen, args.out), "server": server_rows(args, chosen)}
    (args.out / "scale.json").write_text(json.dumps(report, indent=1))
    print(f"wrote {args.out / 'scale.json'}")


if __name__ == "__main__":
    main()
