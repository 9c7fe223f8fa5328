"""Load and faults on ``vitdeploy serve``, over real HTTP on 127.0.0.1: the same requests to each server, side by side.

Each contender is a command that starts a server (so another checkout's server is measured the same way: give its
PYTHONPATH). For each, in order:

  1. churn: ``--images`` distinct PNGs uploaded 4 at a time through a cache of ``--cache-size`` (evictions);
  2. prompts: ``--requests`` single-click prompt requests from ``--clients`` concurrent clients, while
     ``--slow-clients`` connections each dribble a request head at one byte per second;
  3. /healthz timed while the slow clients still hold their connections.

Reported per server: p50/p99 ms of the prompts, errors (any answer but 200, or no answer), requests/s, the server's
peak resident memory (the server process and every process below it, sampled every 50 ms) and its memory after
the churn and at the end, /healthz latency under the slow clients.

    python benchmarks/bench_serve_load.py -e tiny.onnx -d tiny_decoder.onnx --ray
    python benchmarks/bench_serve_load.py -e tiny.onnx -d tiny_decoder.onnx \\
        --contender "hand-written (d91e832)=/tmp/old"     # NAME=PYTHONPATH of another checkout
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image


def tree_rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and every process below it, in MB (from /proc)."""
    parents, rss = {}, {}
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        parents[int(status.parent.name)] = int(fields.get("PPid", "0").strip() or 0)
        rss[int(status.parent.name)] = int(fields.get("VmRSS", "0 kB").split()[0] or 0) if "VmRSS" in fields else 0
    tree, frontier = {pid}, {pid}
    while frontier:
        frontier = {c for c, p in parents.items() if p in frontier} - tree
        tree |= frontier
    return sum(rss.get(p, 0) for p in tree) / 1024


class Sampler(threading.Thread):
    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peak, self.running = pid, 0.0, True

    def run(self) -> None:
        while self.running:
            self.peak = max(self.peak, tree_rss_mb(self.pid))
            time.sleep(0.05)


def request(port: int, method: str, path: str, body: bytes | None = None, timeout: float = 60) -> tuple[int, float, bytes]:
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method=method),
                                    timeout=timeout) as answer:
            return answer.status, time.perf_counter() - start, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, time.perf_counter() - start, error.read()
    except OSError:
        return 0, time.perf_counter() - start, b""


def png(seed: int, size: int = 256) -> bytes:
    rng = np.random.default_rng(seed)
    buffer = io.BytesIO()
    Image.fromarray((rng.random((size, size, 3)) * 255).astype(np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def slow_client(port: int, stop: threading.Event, log: list) -> None:
    """A request head at one byte per second until stopped (or closed by the server)."""
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 4000
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            for k in range(len(head)):
                if stop.is_set():
                    log.append("held")
                    return
                conn.sendall(head[k:k + 1])
                time.sleep(1)
    except OSError:
        log.append("closed by the server")


def server_parser(doc: str) -> argparse.ArgumentParser:
    """The options every server benchmark takes: the pair (``-e``, ``-d``) and other checkouts' servers
    (``--contender NAME=PYTHONPATH``, repeatable)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("-e", "--encoder", required=True)
    parser.add_argument("-d", "--decoder", required=True)
    parser.add_argument("--contender", action="append", default=[], metavar="NAME=PYTHONPATH",
                        help="also measure the one-process server of another checkout")
    return parser


def stop_server(process: subprocess.Popen) -> None:
    """SIGTERM to the server's process group, SIGKILL after 120 s."""
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(120)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)


def run_contender(name: str, command: list[str], env: dict[str, str], args: argparse.Namespace) -> dict:
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                               start_new_session=True)
    try:
        line = process.stdout.readline()
        found = re.search(r"127\.0\.0\.1:(\d+)", line)
        if not found:
            raise SystemExit(f"{name}: the server did not start: {line}{process.stderr.read()[-2000:]}")
        port = int(found.group(1))
        sampler = Sampler(process.pid)
        sampler.start()
        started_mb = tree_rss_mb(process.pid)
        with ThreadPoolExecutor(4) as pool:
            uploads = list(pool.map(lambda k: request(port, "POST", "/v1/embeddings", png(k)), range(args.images)))
        churn_errors = sum(status != 200 for status, _, _ in uploads)
        after_churn_mb = tree_rss_mb(process.pid)
        key = json.loads(request(port, "POST", "/v1/embeddings", png(0))[2])["id"]
        stop, slow_log = threading.Event(), []
        slow = [threading.Thread(target=slow_client, args=(port, stop, slow_log), daemon=True)
                for _ in range(args.slow_clients)]
        for thread in slow:
            thread.start()
        prompt = lambda k: json.dumps({"points": [[k % 250, (7 * k) % 250]], "labels": [1]}).encode()  # noqa: E731
        start = time.perf_counter()
        with ThreadPoolExecutor(args.clients) as pool:
            answers = list(pool.map(lambda k: request(port, "POST", f"/v1/embeddings/{key}/masks", prompt(k)),
                                    range(args.requests)))
        wall = time.perf_counter() - start
        health = request(port, "GET", "/healthz", timeout=30)
        stop.set()
        for thread in slow:
            thread.join(10)
        sampler.running = False
        sampler.join()
        ok = sorted(seconds for status, seconds, _ in answers if status == 200)
        row = {"server": name, "requests": args.requests, "clients": args.clients, "slow_clients": args.slow_clients,
               "errors": sum(status != 200 for status, _, _ in answers),
               "statuses": {str(s): sum(1 for a in answers if a[0] == s) for s in sorted({a[0] for a in answers})},
               "p50_ms": round(1e3 * statistics.median(ok), 1) if ok else None,
               "p99_ms": round(1e3 * ok[min(len(ok) - 1, int(0.99 * len(ok)))], 1) if ok else None,
               "requests_per_s": round(args.requests / wall, 1),
               "healthz_under_slow_clients": {"status": health[0], "ms": round(1e3 * health[1], 1)},
               "slow_clients_end": {k: slow_log.count(k) for k in set(slow_log)},
               "churn": {"images": args.images, "cache_size": args.cache_size, "errors": churn_errors},
               "rss_mb": {"start": round(started_mb), "after_churn": round(after_churn_mb),
                          "end": round(tree_rss_mb(process.pid)), "peak": round(sampler.peak)}}
        print(json.dumps(row), flush=True)
        return row
    finally:
        stop_server(process)


def main() -> None:
    parser = server_parser(__doc__)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--slow-clients", type=int, default=8)
    parser.add_argument("--images", type=int, default=40)
    parser.add_argument("--cache-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3, help="one-process contenders run alternately this many times")
    parser.add_argument("--ray", action="store_true", help="also measure serve --ray (Ray Serve), once, after the rounds")
    parser.add_argument("--out", type=Path, default=Path("out/serve_load.json"))
    args = parser.parse_args()
    base = [sys.executable, "-m", "vitdeploy", "serve", "-e", args.encoder, "-d", args.decoder, "--port", "0",
            "--runtime", "onnxruntime", "--threads", "1", "--cache-size", str(args.cache_size)]
    contenders = [(spec.split("=", 1)[0], base, {**os.environ, "PYTHONPATH": spec.split("=", 1)[1]})
                  for spec in args.contender]
    contenders.append(("this checkout, one process (Uvicorn)", base, dict(os.environ)))
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "?")
    print(f"CPU: {cpu}, {os.cpu_count()} cores", flush=True)
    rows = [run_contender(name, command, env, args) for _ in range(args.rounds) for name, command, env in contenders]
    if args.ray:
        rows.append(run_contender("this checkout, --ray (Ray Serve)", [*base, "--ray"], dict(os.environ), args))
    summary = {}
    for name in dict.fromkeys(row["server"] for row in rows):
        mine = [row for row in rows if row["server"] == name]
        summary[name] = {key: statistics.median(row[key] for row in mine) if all(row[key] is not None for row in mine)
                         else None for key in ("p50_ms", "p99_ms", "requests_per_s")}
        summary[name].update(runs=len(mine), errors=sum(row["errors"] for row in mine),
                             peak_rss_mb=max(row["rss_mb"]["peak"] for row in mine))
        print(f"{name}: median of {len(mine)}: {json.dumps(summary[name])}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"cpu": cpu, "rows": rows, "summary": summary}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
