"""``vitdeploy serve`` under hostile clients, over real HTTP on 127.0.0.1 (issue 76): each server started as a command
(another checkout's by its PYTHONPATH), the same cases in order, side by side:

  1. slow uploads: ``--slow`` connections each send an upload's head (Content-Length 1 MB) and one byte, then hold;
     with them connected, /healthz (3 times) and an upload plus a prompt are timed;
  2. big uploads: ``--big`` concurrent uploads of ``--big-mb`` MB each (not images: the point is what the server holds
     while they arrive); the server's peak memory (its process tree, sampled every 50 ms) and its memory 3 s after;
  3. a decompression bomb: a 20000x20000 grayscale PNG (1.1 MB... as PNG compresses a flat image) uploaded once: its
     answer, time and the server's memory growth.

    python benchmarks/bench_serve_hostile.py -e tiny.onnx -d tiny_decoder.onnx \\
        --contender "190bee5=/tmp/old"     # NAME=PYTHONPATH of another checkout

``--ray``: every server as ``vitdeploy serve --ray`` (a local Ray cluster, started by each; its processes count in the
server's memory).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image

from benchmarks.bench_serve_load import Sampler, png, request, server_parser, stop_server, tree_rss_mb
from benchmarks.options import write_report


def bomb_png() -> bytes:
    buffer = io.BytesIO()
    Image.new("L", (20000, 20000), 128).save(buffer, format="PNG")
    return buffer.getvalue()


def slow_uploads(port: int, count: int) -> list[socket.socket]:
    conns = []
    for _ in range(count):
        try:
            conn = socket.create_connection(("127.0.0.1", port), timeout=10)
            conn.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\nx")
            conns.append(conn)
        except OSError:
            break
    return conns


def upload_and_prompt(port: int) -> tuple[list[int], float]:
    start = time.perf_counter()
    status, _, body = request(port, "POST", "/v1/embeddings", png(int(time.time_ns() % 10007)), timeout=30)
    statuses = [status]
    if status == 200:
        key = json.loads(body)["id"]
        statuses.append(request(port, "POST", f"/v1/embeddings/{key}/masks", json.dumps({"points": [[20, 20]]}).encode(),
                                timeout=30)[0])
    return statuses, time.perf_counter() - start


def run_contender(name: str, command: list[str], env: dict[str, str], args: argparse.Namespace, bomb: bytes) -> dict:
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                               start_new_session=True, cwd=tempfile.gettempdir())  # not this checkout's folder:
    # 'python -m' puts the working directory first on sys.path, before a contender's PYTHONPATH
    row: dict = {"server": name}
    try:
        found = re.search(r"127\.0\.0\.1:(\d+)", process.stdout.readline())
        if not found:
            raise SystemExit(f"{name}: the server did not start: {process.stderr.read()[-2000:]}")
        port = int(found.group(1))
        row["idle_mb"] = round(tree_rss_mb(process.pid))
        conns = slow_uploads(port, args.slow)
        time.sleep(1)
        row["slow_connected"] = len(conns)
        row["healthz"] = [request(port, "GET", "/healthz", timeout=30)[:2] for _ in range(3)]
        row["healthz"] = [[status, round(seconds, 3)] for status, seconds in row["healthz"]]
        statuses, seconds = upload_and_prompt(port)
        row["upload_and_prompt"] = {"statuses": statuses, "s": round(seconds, 3)}
        for conn in conns:
            conn.close()
        time.sleep(2)
        data = np.random.default_rng(0).integers(0, 255, args.big_mb << 20, dtype=np.uint8).tobytes()
        sampler = Sampler(process.pid)
        sampler.start()
        start = time.perf_counter()
        with ThreadPoolExecutor(args.big) as pool:
            answers = list(pool.map(lambda _: request(port, "POST", "/v1/embeddings", data, timeout=120)[0],
                                    range(args.big)))
        sampler.running = False
        row["big_uploads"] = {"statuses": {str(s): answers.count(s) for s in sorted(set(answers))},
                              "s": round(time.perf_counter() - start, 1), "peak_mb": round(sampler.peak)}
        time.sleep(3)
        row["big_uploads"]["after_mb"] = round(tree_rss_mb(process.pid))
        before = tree_rss_mb(process.pid)
        sampler = Sampler(process.pid)
        sampler.start()
        status, seconds, body = request(port, "POST", "/v1/embeddings", bomb, timeout=300)
        sampler.running = False
        row["bomb"] = {"status": status, "s": round(seconds, 2), "growth_mb": round(max(sampler.peak - before, 0)),
                       "error": json.loads(body).get("error", "")[:120] if body.startswith(b"{") else body[:80].decode()}
    finally:
        stop_server(process)
    return row


def main() -> None:
    parser = server_parser(__doc__)
    parser.add_argument("--slow", type=int, default=500)
    parser.add_argument("--big", type=int, default=50)
    parser.add_argument("--big-mb", type=int, default=60)
    parser.add_argument("--ray", action="store_true", help="serve with --ray (a local Ray cluster each)")
    parser.add_argument("--report", default=None)
    args = parser.parse_args()
    bomb = bomb_png()
    print(f"bomb PNG: {len(bomb) / 1e6:.2f} MB for 20000x20000", flush=True)
    serve = ["-m", "vitdeploy", "serve", "-e", args.encoder, "-d", args.decoder, "--port", "0", "--runtime",
             "onnxruntime", "--threads", "1", *(["--ray"] if args.ray else [])]
    here = str(Path(__file__).resolve().parents[1])
    contenders = [("this checkout", {**os.environ, "PYTHONPATH": here})]
    for spec in args.contender:
        label, path = spec.split("=", 1)
        contenders.append((label, {**os.environ, "PYTHONPATH": path}))
    rows = []
    for label, env in contenders:
        rows.append(run_contender(label, [sys.executable, *serve], env, args, bomb))
        print(json.dumps(rows[-1]), flush=True)
    write_report(args.report, rows)


if __name__ == "__main__":
    main()
