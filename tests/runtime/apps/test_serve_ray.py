"""``vitdeploy serve --ray``: Ray Serve (a local 2-CPU cluster) answers as the one-process server, through the same
front door in this process (Ray Serve runs no HTTP proxy), and survives a killed encoder or cache replica."""

from __future__ import annotations

import time

import numpy as np
import pytest

from tests.runtime.apps.test_sam_service import PROMPTS, Client, png_bytes
from tests.sam_tiny import TinySamArtifacts, sample_image
from vitdeploy.runtime.apps.serving.server import Server
from vitdeploy.runtime.apps.serving.schemas import parse_prompts
from vitdeploy.runtime.apps.serving.service import SamService

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'vitdeploy[ray]'; the dev extra has it)")

pytestmark = pytest.mark.ray
pytest_plugins = ["tests.sam_tiny_fixtures"]
#: Seconds a replaced replica may take to answer again (bounded loop, not a timing test).
RECOVERY_S = 90


@pytest.fixture(scope="module")
def ray_served(tiny_sam_artifacts: TinySamArtifacts):
    from vitdeploy.runtime.apps.datasets.on_ray import LOCAL, start_ray, stop_ray
    from vitdeploy.runtime.apps.serving.ray_serve import RayServeOptions, plan_for_replicas, run_app, stop_app
    from vitdeploy.runtime.deploy.loader import OpenOptions

    started = start_ray(LOCAL, 2)
    plan = plan_for_replicas(str(tiny_sam_artifacts.encoder), str(tiny_sam_artifacts.decoder),
                             OpenOptions(runtime="onnxruntime", threads=1))
    options = RayServeOptions(plan, cache_size=8, cors_origins=("http://page.example",), max_image_pixels=1_000_000)
    server = run_app(options, "127.0.0.1", 0).start()
    yield Client(server.port)
    server.stop()
    stop_app()
    if started:
        stop_ray()


def test_ray_serve_answers_as_one_process(tiny_sam_artifacts: TinySamArtifacts, ray_served) -> None:
    local = SamService(tiny_sam_artifacts.encoder, tiny_sam_artifacts.decoder, runtime="onnxruntime", threads=1)
    image = png_bytes(sample_image(48, 80, seed=3))
    status, _, posted = ray_served("POST", "/v1/embeddings", image)
    expected = local.encode(image)
    assert status == 200 and posted == expected  # same id (image + encoder file), same size, not cached before
    assert ray_served("POST", "/v1/embeddings", image)[2]["cached"] is True
    status, _, answer = ray_served("POST", f"/v1/embeddings/{posted['id']}/masks", {"prompts": PROMPTS})
    assert status == 200
    assert answer == local.masks(expected["id"], parse_prompts({"prompts": PROMPTS}))  # the same RLEs and scores
    one_process = Server(local, "127.0.0.1", 0).start()
    try:  # the same requests to the one-process server: the same statuses and errors (one FastAPI app in both)
        local_client = Client(one_process.port)
        local_client("POST", "/v1/embeddings", image)
        for method, path, body, code in (("POST", "/v1/embeddings", b"not an image", 400),
                                         ("POST", "/v1/embeddings/feedface/masks", {"box": [1, 1, 4, 4]}, 404),
                                         ("POST", f"/v1/embeddings/{posted['id']}/masks", {"points": [[500, 1]]}, 400),
                                         ("POST", f"/v1/embeddings/{posted['id']}/masks", {"point": [[5, 1]]}, 400),
                                         ("GET", "/v1/embeddings", None, 405), ("GET", "/nope", None, 404)):
            got, head, body_out = ray_served(method, path, body)
            local_status, _, local_body = local_client(method, path, body)
            assert got == code == local_status, body_out
            assert body_out["error"] == local_body["error"].replace("cache of 64", "cache of 8")
            assert len(head["X-Request-Id"]) >= 32
        assert ray_served("GET", "/")[2] == local_client("GET", "/")[2]  # the page
        ray_schema, local_schema = ray_served("GET", "/openapi.json")[2], local_client("GET", "/openapi.json")[2]
        assert ray_schema == local_schema
        ray_health, local_health = ray_served("GET", "/healthz")[2], local_client("GET", "/healthz")[2]
        assert ray_health["browser_decoder"] == local_health["browser_decoder"]
        assert ray_health["limits"] == {**local_health["limits"], "max_image_pixels": 1_000_000}  # the enforced ones
    finally:
        one_process.stop()
    status, _, text = ray_served("GET", "/metrics")
    assert status == 200 and 'vitdeploy_requests_total{route="masks",status="200"} 1.0' in text
    from tests.runtime.apps.test_sam_service import _raw  # --cors-origin reaches the Ray front too

    port = int(ray_served.base.rsplit(":", 1)[1])
    answer = _raw(port, b"OPTIONS /v1/embeddings HTTP/1.1\r\nHost: x\r\nOrigin: http://page.example\r\n"
                        b"Access-Control-Request-Method: POST\r\nConnection: close\r\n\r\n").lower()
    assert answer.startswith(b"http/1.1 204") and b"access-control-allow-origin: http://page.example" in answer, answer


def test_the_front_is_this_process_with_the_one_process_guards(ray_served) -> None:
    """Issue 76.3: Ray Serve runs no HTTP proxy (its proxy answered a killed ingress replica's requests with a
    plain-text 500, had none of the front door's guards, and listened beside it): the front door is this process's, so
    100 uploads trickling their bodies starve nobody, a PNG claiming 20000x20000 is refused 413 from its header in
    under a second, and the one socket serving HTTP listens on the address asked for."""
    from tests.runtime.apps.test_serve_hostile import (ANSWERED_WITHIN_S, _png_header, _slow_uploads, _timed,
                                                       _upload_and_prompt)

    named = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)]
    assert not [name for name in named if "PROXY" in name.upper()], named
    port = int(ray_served.base.rsplit(":", 1)[1])
    assert _listening_on(port) == {"127.0.0.1"}
    conns = _slow_uploads(port, 100)
    try:
        time.sleep(0.5)
        (status, _, _), took = _timed(ray_served, "GET", "/healthz")
        assert status == 200 and took < ANSWERED_WITHIN_S, (status, took)
        statuses, took = _timed(_upload_and_prompt, ray_served)
        assert statuses == (200, 200) and took < 2 * ANSWERED_WITHIN_S, (statuses, took)
    finally:
        for conn in conns:
            conn.close()
    (status, _, body), took = _timed(ray_served, "POST", "/v1/embeddings", _png_header(20000, 20000))
    assert status == 413 and took < 1.0, (status, took, body)
    assert "over the limit of 1.0 megapixels" in body["error"] and "--max-image-pixels" in body["error"], body


def _listening_on(port: int) -> set[str]:
    """The addresses a TCP socket listens on ``port`` at, from /proc/net/tcp and tcp6 (IPv4 ones only written out)."""
    import ipaddress
    from pathlib import Path

    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(str(ipaddress.IPv4Address(bytes.fromhex(address)[::-1])) if len(address) == 8 else address)
    return found


def test_a_killed_encoder_replica_is_replaced(ray_served) -> None:
    key = ray_served("POST", "/v1/embeddings", png_bytes(sample_image(40, 60, seed=31)))[2]["id"]
    named = ray.util.list_named_actors(all_namespaces=True)
    encoders = [a for a in named if "SERVE_REPLICA" in a["name"] and "#encoder#" in a["name"]]
    assert len(encoders) == 1, named
    ray.kill(ray.get_actor(encoders[0]["name"], namespace=encoders[0]["namespace"]), no_restart=True)
    seen, deadline = [], time.monotonic() + RECOVERY_S
    while time.monotonic() < deadline:
        status, _, answer = ray_served("POST", "/v1/embeddings", png_bytes(sample_image(40, 60, seed=32 + len(seen))))
        seen.append(status)
        if status == 200:
            break
        assert status == 503 and "retry" in answer["error"], answer
        time.sleep(1)
    assert seen[-1] == 200, f"no recovery in {RECOVERY_S} s: {seen}"
    now = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if "#encoder#" in a["name"]]
    assert len(now) == 1 and now[0] != encoders[0]["name"], "the killed replica was not replaced"
    # the cache is its own replica: an image sent before the kill still answers prompts
    assert ray_served("POST", f"/v1/embeddings/{key}/masks", {"points": [[10, 10]], "labels": [1]})[0] == 200


def test_a_killed_cache_replica_says_what_was_lost(ray_served) -> None:
    """The cache's embeddings live in its replica: killed, the replacement starts empty, and a prompt on an image sent
    before is answered 404 saying the cache was replaced (it said only 'never sent, or evicted'), its prompts too (a
    decoder's local copy answered them 200 for about 40 s); the image sent again works."""
    image = png_bytes(sample_image(40, 60, seed=41))
    key = ray_served("POST", "/v1/embeddings", image)[2]["id"]
    (cache,) = [a for a in ray.util.list_named_actors(all_namespaces=True) if "#cache#" in a["name"]]
    ray.kill(ray.get_actor(cache["name"], namespace=cache["namespace"]), no_restart=True)
    seen, deadline = [], time.monotonic() + RECOVERY_S
    while time.monotonic() < deadline:
        status, _, answer = ray_served("GET", f"/v1/embeddings/{key}")
        seen.append(status)
        if status != 503:
            break
        time.sleep(1)
    assert seen[-1] == 404 and "cache replica was replaced" in answer["error"], (seen, answer)
    status, _, answer = ray_served("POST", f"/v1/embeddings/{key}/masks", {"points": [[10, 10]], "labels": [1]})
    assert status == 404 and "cache replica was replaced" in answer["error"], answer  # no decoder's copy answers 200
    assert ray_served("POST", "/v1/embeddings", image)[2]["cached"] is False
    assert ray_served("POST", f"/v1/embeddings/{key}/masks", {"points": [[10, 10]], "labels": [1]})[0] == 200


class _Failing:
    """A deployment method whose call fails with ``error`` (Ray's own exception types; no cluster needed)."""

    def __init__(self, error: BaseException):
        self.error = error

    def remote(self, *_args):
        return self

    def result(self):
        raise self.error


def test_ray_failures_become_clear_answers() -> None:
    """A replica lost in the middle of a request and Ray Serve's back-pressure are 503 with Retry-After; a domain error
    raised in a replica keeps its status (the API's one mapping of the service's errors)."""
    from ray.exceptions import RayActorError
    from ray.serve.exceptions import BackPressureError

    from vitdeploy.runtime.apps.serving.api import STATUSES
    from vitdeploy.runtime.apps.serving.service import Busy, NotFound
    from vitdeploy.runtime.apps.serving.ray_serve import RayFront, RayServeOptions
    from vitdeploy.runtime.deploy.deployment import Deployment
    from vitdeploy.runtime.deploy.plan import ModelPlan, PlannedFile

    plan = ModelPlan("SAM's pair", tuple(PlannedFile(role, f"{role[0]}.onnx", Deployment("onnxruntime"))
                                         for role in ("encoder", "decoder")))
    front = RayFront(RayServeOptions(plan, max_pending=2), None, None, None, "x")

    def status(exc: Exception) -> int:
        return next(code for kind, code in STATUSES if isinstance(exc, kind))

    for error, needle in ((RayActorError(error_msg="the actor died"), "replica stopped"),
                          (BackPressureError(num_queued_requests=2, max_queued_requests=2), "busy")):
        with pytest.raises(Busy) as caught:
            front._call(_Failing(error))
        assert status(caught.value) == 503 and needle in str(caught.value) and caught.value.retry_after == 1
    with pytest.raises(NotFound) as caught:
        front._call(_Failing(NotFound("no embedding")))
    assert status(caught.value) == 404


class _Answering:
    """A deployment method that answers ``value`` and counts its calls (no cluster needed)."""

    def __init__(self, value):
        self.value, self.calls = value, 0

    def remote(self, *_args):
        self.calls += 1
        return self

    def result(self):
        return self.value


def test_the_front_refuses_what_cannot_be_decoded_before_it_enters_ray() -> None:
    """A body that is not an image (400) and an image over --max-image-pixels (413, from its header) are answered by
    the front: the encoder replica is never called, so the bytes never travel through Ray's object store (50 uploads
    of 60 MB that are not images took the Ray processes from 1684 to 3568 MB, and 3114 MB stayed after)."""
    from types import SimpleNamespace

    from vitdeploy.runtime.apps.serving.api import STATUSES
    from vitdeploy.runtime.apps.serving.ray_serve import RayFront, RayServeOptions
    from vitdeploy.runtime.deploy.deployment import Deployment
    from vitdeploy.runtime.deploy.plan import ModelPlan, PlannedFile
    from vitdeploy.errors import InputError

    plan = ModelPlan("SAM's pair", tuple(PlannedFile(role, f"{role[0]}.onnx", Deployment("onnxruntime"))
                                         for role in ("encoder", "decoder")))
    encode = _Answering(None)
    cache = SimpleNamespace(started_at=_Answering(1.0), get=_Answering(None), put=_Answering(None))
    front = RayFront(RayServeOptions(plan, max_image_pixels=64 * 64), SimpleNamespace(encode=encode), None, cache, "x")
    over_limit = png_bytes(np.zeros((64, 65, 3), np.uint8))
    for body, code, needle in ((b"\x00" * 4096, 400, "cannot be decoded"), (over_limit, 413, "--max-image-pixels"),
                               (b"", 400, "empty")):
        with pytest.raises(InputError) as caught:
            front.encode(body)
        assert next(c for kind, c in STATUSES if isinstance(caught.value, kind)) == code and needle in str(caught.value)
    assert encode.calls == 0


def _descendants(pid: int) -> set[int]:
    """The processes below ``pid`` now (from /proc)."""
    from pathlib import Path

    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def test_serve_ray_stops_on_sigterm_and_leaves_no_process(tiny_sam_artifacts: TinySamArtifacts) -> None:
    """SIGTERM (docker stop, systemd, Kubernetes) stops Ray Serve and the local cluster it started: exit 143, one line,
    no native stack dump (it aborted with 134) and none of its processes left (two Ray agents stayed, with PPID 1)."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    process = subprocess.Popen([sys.executable, "-m", "vitdeploy", "serve", "-e", str(tiny_sam_artifacts.encoder), "-d",
                                str(tiny_sam_artifacts.decoder), "--ray", "--port", "0", "--runtime", "onnxruntime"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ})
    try:
        line = process.stdout.readline()
        assert "on Ray Serve at http://127.0.0.1:" in line, process.stderr.read()[-3000:]
        port = int(line.split("127.0.0.1:")[1].split()[0])
        assert Client(port)("GET", "/healthz")[0] == 200
        spawned = _descendants(process.pid)
        assert spawned  # the cluster's processes (GCS, raylet, agents, replicas)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 143, (process.returncode, err[-3000:])
    assert "stopped by SIGTERM" in out and "SIGTERM received" not in err and "Traceback" not in err
    deadline = time.monotonic() + 30
    while (left := {p for p in spawned if Path(f"/proc/{p}").exists()}) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, [Path(f"/proc/{p}/cmdline").read_bytes()[:80] for p in left if Path(f"/proc/{p}").exists()]
