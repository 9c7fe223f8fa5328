"""The one-process server under hostile clients, over real HTTP on 127.0.0.1 (issue 76): slow clients cannot
starve others, bodies are admitted against one budget, a huge image is refused from its header, a shutdown refuses
the uploads still arriving, and the forms are strict. Counts and times are bounded (a few hundred sockets, seconds);
the full-size load cases are ``benchmarks/bench_serve_hostile.py``."""

from __future__ import annotations

import socket
import struct
import threading
import time
import urllib.error
import urllib.request
import zlib

import pytest

from tests.runtime.apps.test_sam_service import Client, _raw, png_bytes
from tests.sam_tiny import TinySamArtifacts, sample_image
from vitdeploy.runtime.apps.serving import front_door, server as one_process
from vitdeploy.runtime.apps.serving.server import Server
from vitdeploy.runtime.apps.serving.service import SamService

pytest_plugins = ["tests.sam_tiny_fixtures"]

#: Each answer under load within this (the issue's bound for /healthz and an upload plus a prompt).
ANSWERED_WITHIN_S = 2.0


@pytest.fixture(scope="module")
def served(tiny_sam_artifacts: TinySamArtifacts):
    service = SamService(tiny_sam_artifacts.encoder, tiny_sam_artifacts.decoder, runtime="onnxruntime", threads=1,
                         cache_size=8, max_pending=2, max_image_pixels=1_000_000)
    server = Server(service, "127.0.0.1", 0).start()
    yield service, server, Client(server.port)
    server.stop()


def _timed(call, *args, **kwargs):
    start = time.monotonic()
    return call(*args, **kwargs), time.monotonic() - start


def _slow_uploads(port: int, count: int, declared: int = 1_000_000) -> list[socket.socket]:
    """``count`` connections that each sent an upload's head and one byte of its body, and then nothing."""
    conns = []
    for _ in range(count):
        conn = socket.create_connection(("127.0.0.1", port), timeout=10)
        conn.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\nx" % declared)
        conns.append(conn)
    return conns


def _answer(conn: socket.socket) -> bytes:
    """One whole HTTP response from ``conn``: its head, then as many body bytes as its Content-Length says (one
    ``recv`` may return the head alone: the body can travel in the next segment)."""
    answer = b""
    while b"\r\n\r\n" not in answer and (chunk := conn.recv(65536)):
        answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")[1:]
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length and (chunk := conn.recv(65536)):
        body += chunk
    return head + b"\r\n\r\n" + body


def _settled(server: Server) -> None:
    """Wait (at most 10 s) until the server holds no body: the closed connections of a case are released before the
    next one counts on the budget."""
    front = server.uvicorn.config.app
    deadline = time.monotonic() + 10
    while (front.body_bytes or front.uploads) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert front.body_bytes == 0 and front.uploads == 0, (front.body_bytes, front.uploads)


def _upload_and_prompt(client: Client) -> tuple[int, int]:
    status, _, created = client("POST", "/v1/embeddings", png_bytes(sample_image(24, 32, seed=int(time.time_ns() % 997))))
    if status != 200:
        return status, 0
    return status, client("POST", f"/v1/embeddings/{created['id']}/masks", {"points": [[10, 8]]})[0]


def test_slow_uploads_starve_nobody_and_are_closed_by_their_rate(served, monkeypatch: pytest.MonkeyPatch) -> None:
    """200 uploads trickling their bodies (a head promising 1 MB, one byte sent) do not count as in flight: with
    MAX_IN_FLIGHT at 4 (it was: a request counted from its head, so 260 such clients kept every /healthz at 503),
    /healthz, /metrics and an upload plus a prompt are each answered 200 within 2 s; each trickling one is answered 408
    when its body falls behind MIN_BODY_RATE after BODY_TIMEOUT_S (the old 30 s piece timeout restarted with every
    byte)."""
    service, server, client = served
    monkeypatch.setattr(front_door, "MAX_IN_FLIGHT", 4)
    monkeypatch.setattr(front_door, "BODY_TIMEOUT_S", 3.0)
    conns = _slow_uploads(server.port, 200)
    try:
        time.sleep(0.5)
        for path in ("/healthz", "/metrics"):
            (status, _, _), took = _timed(client, "GET", path)
            assert status == 200 and took < ANSWERED_WITHIN_S, (path, status, took)
        statuses, took = _timed(_upload_and_prompt, client)
        assert statuses == (200, 200) and took < 2 * ANSWERED_WITHIN_S, (statuses, took)
        assert service.metrics.value("rejected_total", reason="in_flight") == 0
        conns[0].sendall(b"y")  # 2 bytes in: the deadline moves on by 4 ms, not by 20 s
        start = time.monotonic()
        answer = _answer(conns[0])
        assert answer.startswith(b"HTTP/1.1 408") and b"slower than 500 bytes a second" in answer, answer[:200]
        assert time.monotonic() - start < 5
    finally:
        for conn in conns:
            conn.close()


def test_the_upload_pool_and_the_body_budget_refuse_before_reading(served, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past MAX_UPLOADS bodies arriving at once, one more upload is answered 503 at once (JSON, Retry-After) while
    /healthz is answered; an upload whose Content-Length does not fit what BODY_BUDGET_BYTES has left is 503 before
    its body is read (50 uploads of 60 MB took a server to 3.1 GB before); once they are gone the budget is whole."""
    service, server, client = served
    _settled(server)
    monkeypatch.setattr(front_door, "MAX_UPLOADS", 5)
    conns = _slow_uploads(server.port, 5)
    try:
        time.sleep(0.3)
        answer = _raw(server.port, b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
        assert answer.startswith(b"HTTP/1.1 503") and b"5 uploads are being received" in answer, answer[:300]
        assert b"retry-after: 1" in answer.lower()
        assert client("GET", "/healthz")[0] == 200
    finally:
        for conn in conns:
            conn.close()
    _settled(server)
    monkeypatch.setattr(front_door, "MAX_UPLOADS", 768)
    monkeypatch.setattr(front_door, "BODY_BUDGET_BYTES", 3_000_000)
    conns = _slow_uploads(server.port, 2, declared=1_400_000)  # 2.8 MB of the 3 MB promised
    try:
        time.sleep(0.3)
        status, headers, body = client("POST", "/v1/embeddings", b"z" * 400_000)
        assert status == 503 and headers["Retry-After"] == "1" and "of the server's 3000000" in body["error"], body
    finally:
        for conn in conns:
            conn.close()
    _settled(server)  # once they are gone, the budget is whole again
    assert _upload_and_prompt(client) == (200, 200)


def test_connections_trickling_heads_make_room_for_new_clients(served, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past MAX_CONNECTIONS open connections the one waiting longest for its request head is closed, so a new client
    is served (520 connections trickling heads made every other request Uvicorn's plain-text 503 for 24 s), and the
    ones closed are the oldest (ordered by uvloop's millisecond clock, the 40 accepted in one tick tied and the ones
    closed were arbitrary: it failed in CI and once in 2 runs here)."""
    _, server, client = served
    monkeypatch.setattr(one_process, "MAX_CONNECTIONS", 30)
    conns = []
    try:
        for _ in range(40):
            conn = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHo")  # a request head, trickled
            conns.append(conn)
        time.sleep(0.3)
        for _ in range(5):
            (status, _, _), took = _timed(client, "GET", "/healthz")
            assert status == 200 and took < ANSWERED_WITHIN_S, (status, took)
        closed = _closed_by_server(conns, at_least=len(conns) - 30, within_s=15.0)
        assert 0 in closed and len(closed) >= len(conns) - 30, closed  # the oldest ones were closed to make room
    finally:
        for conn in conns:
            conn.close()


def _closed_by_server(conns: list[socket.socket], at_least: int, within_s: float) -> list[int]:
    """The indices of ``conns`` the server closed (EOF or reset), once ``at_least`` of them are or ``within_s`` has
    passed (a loaded machine can take the server's loop a while to accept 40 connections)."""
    import select

    closed: set[int] = set()
    deadline = time.monotonic() + within_s
    while len(closed) < at_least and time.monotonic() < deadline:
        readable, _, _ = select.select([c for i, c in enumerate(conns) if i not in closed], [], [], 0.2)
        for conn in readable:
            try:
                data = conn.recv(100)
            except OSError:
                data = b""
            if not data:
                closed.add(conns.index(conn))
    return sorted(closed)


def _png_header(width: int, height: int) -> bytes:
    """A PNG that claims ``width`` x ``height`` (a 1.1 MB file can: a decompression bomb); its pixels need not follow,
    since the server must refuse it from this header."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00" * 1000)) + chunk(b"IEND", b""))


def test_an_image_over_the_pixel_limit_is_refused_from_its_header(served) -> None:
    """A PNG claiming 20000x20000 is answered 413 naming the limit and the option, in well under a second (a 1.1 MB
    one took a SAM 3 server to 10.9 GB for 61 s); an image within the limit is encoded."""
    service, _, client = served
    (status, _, body), took = _timed(client, "POST", "/v1/embeddings", _png_header(20000, 20000))
    assert status == 413 and took < 1.0, (status, took)
    assert "20000x20000 (400.0 megapixels), over the limit of 1.0 megapixels" in body["error"], body
    assert "--max-image-pixels" in body["error"]
    assert client("POST", "/v1/embeddings", png_bytes(sample_image(40, 30, seed=9)))[0] == 200
    limits = client("GET", "/healthz")[2]["limits"]
    assert limits["max_image_pixels"] == 1_000_000 == service.encoder.limit.pixels
    assert limits["max_body_bytes"] == front_door.MAX_BODY_BYTES


def test_a_413_is_read_by_an_ordinary_client(served, monkeypatch: pytest.MonkeyPatch) -> None:
    """Python's urllib sends the whole body before it reads: the server reads and drops a refused body for LINGER_S
    before it answers, so urllib reads the 413 (it got a reset connection)."""
    _, server, _ = served
    monkeypatch.setattr(front_door, "MAX_BODY_BYTES", 100_000)
    request = urllib.request.Request(f"http://127.0.0.1:{server.port}/v1/embeddings", data=b"q" * 1_500_000,
                                     method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 413 and b"at most 100000" in refused.value.read()


def test_forms_are_strict_head_is_get_and_the_limits_are_the_enforced_ones(served) -> None:
    """A string or a boolean where the schema says a number (or a boolean) is 400, not converted ('yes', ["1"], [true]
    were taken); HEAD on a GET route is answered as GET without a body (it was 405); /healthz's clicks are the ones a
    prompt may have (it said max_points 16 while 16 clicks were refused)."""
    _, server, client = served
    status, _, created = client("POST", "/v1/embeddings", png_bytes(sample_image(30, 40, seed=3)))
    key = created["id"]
    for body, where in (({"points": [[5, 5]], "multimask_output": "yes"}, "multimask_output"),
                        ({"points": [[5, 5]], "labels": ["1"]}, "labels[0]"),
                        ({"points": [[5, 5]], "labels": [True]}, "labels[0]"),
                        ({"points": [["5", 5]]}, "points[0][0]"), ({"box": [1, 2, 3, True]}, "box[3]")):
        status, _, answer = client("POST", f"/v1/embeddings/{key}/masks", body)
        assert status == 400 and answer["error"].startswith(where), (body, answer)
    answer = _raw(server.port, b"HEAD /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"\r\n\r\n"), answer  # headers, no body
    answer = _raw(server.port, b"HEAD /v1/embeddings HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 405"), answer
    limits = client("GET", "/healthz")[2]["limits"]
    clicks = limits["max_clicks"]
    assert clicks is not None and limits["max_clicks_with_box"] == clicks - 1
    assert client("POST", f"/v1/embeddings/{key}/masks", {"points": [[5, 5]] * clicks})[0] == 200
    status, _, answer = client("POST", f"/v1/embeddings/{key}/masks", {"points": [[5, 5]] * (clicks + 1)})
    assert status == 400 and "give fewer clicks" in answer["error"], answer
    assert client("POST", f"/v1/embeddings/{key}/masks", {"points": [[5, 5]] * clicks, "box": [1, 1, 9, 9]})[0] == 400


def test_a_stop_refuses_the_uploads_still_arriving_at_once(tiny_sam_artifacts: TinySamArtifacts) -> None:
    """SIGTERM (Uvicorn's should_exit) during a slow upload: that client is answered 503 in JSON at once and the server
    stops within seconds (it waited the whole 30 s grace, answered a plain-text 500 and logged tracebacks)."""
    service = SamService(tiny_sam_artifacts.encoder, tiny_sam_artifacts.decoder, runtime="onnxruntime", threads=1)
    server = Server(service, "127.0.0.1", 0).start()
    (conn,) = _slow_uploads(server.port, 1)
    try:
        time.sleep(0.3)
        stopping = threading.Thread(target=server.stop)
        start = time.monotonic()
        stopping.start()
        answer = _answer(conn)
        assert answer.startswith(b"HTTP/1.1 503") and b"the server is stopping" in answer, answer[:300]
        stopping.join(30)
        assert not server._thread.is_alive() and time.monotonic() - start < 10
    finally:
        conn.close()
        server.stop()



@pytest.mark.parametrize("shape", [(1, 2000), (2000, 1), (1, 1), (3, 700)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_every_image_shape_is_encoded_and_prompted(served, shape: tuple[int, int]) -> None:
    """An image 1 pixel high (or wide) resizes to at least a pixel a side: the official rounds its short side to 0
    and a 1x100000 image was a 500 (a 'vitdeploy bug' line in predict, a stopped job)."""
    _, _, client = served
    status, _, created = client("POST", "/v1/embeddings", png_bytes(sample_image(*shape, seed=11)))
    assert status == 200 and (created["height"], created["width"]) == shape, created
    status, _, answer = client("POST", f"/v1/embeddings/{created['id']}/masks", {"points": [[0, 0]]})
    assert status == 200 and answer["results"][0]["masks"][0]["size"] == list(shape), answer


def test_sigterm_during_an_upload_is_a_clean_stop_of_the_verb(tiny_sam_artifacts: TinySamArtifacts) -> None:
    """``vitdeploy serve`` gets SIGTERM while an upload trickles in: that client is answered 503 in JSON, the verb exits
    143 within seconds, and its log holds the request's line and no traceback (it logged tracebacks, answered a
    plain-text 500 after the whole 30 s grace, then said the requests in flight were answered)."""
    import json
    import os
    import signal
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-m", "vitdeploy", "serve", "-e", str(tiny_sam_artifacts.encoder), "-d",
                                str(tiny_sam_artifacts.decoder), "--port", "0", "--runtime", "onnxruntime", "--threads",
                                "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ})
    try:
        line = process.stdout.readline()
        assert "at http://127.0.0.1:" in line, process.stderr.read()
        port = int(line.split("127.0.0.1:")[1].split()[0])
        assert Client(port)("GET", "/healthz")[0] == 200  # serving, not starting
        (conn,) = _slow_uploads(port, 1)
        time.sleep(1.0)  # its head read: the upload is arriving
        start = time.monotonic()
        process.send_signal(signal.SIGTERM)
        answer = _answer(conn)
        conn.close()
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503") and "the server is stopping" in json.loads(body)["error"], answer
    assert process.returncode == 143 and time.monotonic() - start < 10, (process.returncode, err)
    assert "stopped by SIGTERM" in out and "Traceback" not in err and "POST /v1/embeddings 503" in err, err
