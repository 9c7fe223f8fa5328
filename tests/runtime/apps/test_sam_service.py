"""``vitdeploy serve`` in one process: real HTTP on 127.0.0.1, masks as the official predictor's, every error code."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from tests.sam_tiny import SEED, TinySamArtifacts, sample_image, tiny_official_sam
from vitdeploy.runtime.apps.serving import front_door, server as one_process
from vitdeploy.runtime.apps.serving.server import Server
from vitdeploy.runtime.apps.serving.service import MAX_PROMPTS, SamService
from vitdeploy.validation.masks import compare_masks
from vitdeploy.parity import TOLERANCES, compare

pytest_plugins = ["tests.sam_tiny_fixtures"]

FP32 = TOLERANCES["fp32"]
PROMPTS = [{"points": [[30, 25]], "labels": [1]},
           {"points": [[12, 20], [60, 33]], "labels": [1, 0], "multimask_output": False},
           {"box": [6, 5, 70, 40]},
           {"points": [[40, 22]], "labels": [1], "box": [3, 2, 66, 44], "multimask_output": True}]


def png_bytes(picture: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(picture).save(buffer, format="PNG")
    return buffer.getvalue()


class Client:
    """Requests to a server on 127.0.0.1: (status, headers, parsed JSON or text)."""

    def __init__(self, port: int):
        self.base = f"http://127.0.0.1:{port}"

    def __call__(self, method: str, path: str, body: bytes | dict | None = None, timeout: float = 60):
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        headers = {"Content-Type": "application/json" if isinstance(body, dict) else "application/octet-stream"}
        request = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                status, head, raw = answer.status, answer.headers, answer.read()  # headers: case-insensitive
        except urllib.error.HTTPError as error:
            status, head, raw = error.code, error.headers, error.read()
        text = raw.decode()
        return status, head, json.loads(text) if (head.get("Content-Type") or "").startswith("application/json") else text


@pytest.fixture(scope="module")
def served(tiny_sam_artifacts: TinySamArtifacts):
    service = SamService(tiny_sam_artifacts.encoder, tiny_sam_artifacts.decoder, runtime="onnxruntime", threads=1,
                         cache_size=3, max_pending=1)
    server = Server(service, "127.0.0.1", 0).start()
    yield service, Client(server.port)
    server.stop()


def decode_rle(rle: dict) -> np.ndarray:
    from pycocotools import mask as coco_mask

    return coco_mask.decode({"size": rle["size"], "counts": rle["counts"].encode()}).astype(bool)


def test_masks_are_the_official_predictors(served) -> None:
    from segment_anything import SamPredictor as OfficialPredictor

    _, client = served
    picture = sample_image(48, 80, seed=3)
    status, _, posted = client("POST", "/v1/embeddings", png_bytes(picture))
    assert status == 200 and (posted["height"], posted["width"], posted["cached"]) == (48, 80, False)
    status, _, answer = client("POST", f"/v1/embeddings/{posted['id']}/masks", {"prompts": PROMPTS})
    assert status == 200 and len(answer["results"]) == len(PROMPTS)
    official = OfficialPredictor(tiny_official_sam(SEED))
    official.set_image(picture)
    for prompt, result in zip(PROMPTS, answer["results"]):
        multimask = prompt.get("multimask_output", "box" not in prompt and len(prompt.get("points", [])) == 1)
        with torch.no_grad():
            masks, scores, _ = official.predict(
                np.array(prompt["points"], float) if "points" in prompt else None,
                np.array(prompt["labels"]) if "labels" in prompt else None,
                np.array(prompt["box"], float) if "box" in prompt else None, multimask_output=multimask)
        ours = np.stack([decode_rle(m) for m in result["masks"]])
        agreement = compare_masks(masks, ours, "fp32", label=json.dumps(prompt))
        assert agreement, agreement.summary()
        close = compare(scores, np.array(result["scores"], np.float32), FP32, label="scores")
        assert close, close.summary()
        assert result["areas"] == [int(m.sum()) for m in ours]


def test_an_image_sent_again_is_not_encoded_again(served) -> None:
    service, client = served
    first, second = png_bytes(sample_image(40, 40, seed=11)), png_bytes(sample_image(40, 40, seed=12))
    runs = service.metrics.value("encoder_runs_total")
    a, b, c = (client("POST", "/v1/embeddings", data)[2] for data in (first, first, second))
    assert a["id"] == b["id"] != c["id"] and (a["cached"], b["cached"], c["cached"]) == (False, True, False)
    assert service.metrics.value("encoder_runs_total") == runs + 2
    assert client("GET", f"/v1/embeddings/{a['id']}")[2] == {"id": a["id"], "height": 40, "width": 40}
    for seed in (13, 14, 15):  # the cache holds 3: the first image is evicted, and then unknown
        client("POST", "/v1/embeddings", png_bytes(sample_image(40, 40, seed=seed)))
    status, _, body = client("GET", f"/v1/embeddings/{a['id']}")
    assert status == 404 and "evicted" in body["error"]


def test_bad_requests_get_4xx_and_no_traceback(served, monkeypatch: pytest.MonkeyPatch) -> None:
    service, client = served
    key = client("POST", "/v1/embeddings", png_bytes(sample_image(48, 80, seed=3)))[2]["id"]
    masks = f"/v1/embeddings/{key}/masks"
    cases = [
        ("POST", "/v1/embeddings", b"not an image", 400, "cannot be decoded"),
        ("POST", "/v1/embeddings", b"", 400, "is empty"),
        ("POST", "/v1/embeddings", {"image": "%%%"}, 400, "not valid base64"),
        ("POST", "/v1/embeddings/0123456789abcdef/masks", {"points": [[1, 1]]}, 404, "POST the image"),
        ("POST", masks, {"points": [[81, 10]], "labels": [1]}, 400, "outside the 80x48 image"),
        ("POST", masks, {"prompts": [{"box": [1, 1, 5, 5]}, {"box": [0, 0, 10, 60]}]}, 400, "prompt 1: box corner"),
        ("POST", masks, {"points": [[1, 1]], "labels": [3]}, 400, "must be 1 (foreground) or 0"),
        ("POST", masks, {"points": [[1, 1], [2, 2]], "labels": [1]}, 400, "'labels' must be a 2 list"),
        ("POST", masks, {"box": [5, 5, 1, 1]}, 400, "x0 < x1"),
        ("POST", masks, {"labels": [1]}, 400, "without 'points'"),
        ("POST", masks, {"point": [[1, 1]]}, 400, "point: unknown field"),
        ("POST", masks, {"points": [[1, 1, 1]]}, 400, "points[0]: "),
        ("POST", masks, {"points": [[1, 1]], "prompts": [{"box": [1, 1, 5, 5]}]}, 400, "not both"),
        ("POST", masks, {"prompts": [{"box": [1, 1, 5, 5]}, {"box": "big"}]}, 400, "prompts[1].box: "),
        ("POST", masks, {"points": [[10 ** 400, 1]]}, 400, "not a finite number"),  # a huge integer (it gave 500)
        ("POST", masks, {"prompts": [{"box": [1, 1, 5, 5]}] * (MAX_PROMPTS + 1)}, 400, f"at most {MAX_PROMPTS}"),
        ("POST", masks, b"{not json", 400, "not JSON"),
        # more clicks than the decoder's shape profile (8 points for the tiny decoder; 12,000 took a server to 2 GB)
        ("POST", masks, {"points": [[1, 1]] * 8, "labels": [1] * 8}, 400, "this decoder takes at most 8"),
        ("GET", masks, None, 405, "takes POST"),
        ("GET", "/v2/anything", None, 404, "no such endpoint"),
        ("POST", masks, b"[" * 100_000 + b"]" * 100_000, 400, ""),  # deeply nested JSON (it gave 500)
        ("POST", "/v1/embeddings", {"picture": "x"}, 400, "a JSON upload must be"),
    ]
    for method, path, body, status, needle in cases:
        got, _, answer = client(method, path, body)
        assert (got, needle in answer.get("error", "")) == (status, True), (path, body if not isinstance(body, bytes) else body[:20], answer)
        assert "Traceback" not in json.dumps(answer)
    monkeypatch.setattr(front_door, "MAX_BODY_BYTES", 1000)
    got, _, answer = client("POST", "/v1/embeddings", b"x" * 2000)
    assert got == 413 and "at most 1000" in answer["error"]

    def broken(*_args):
        raise RuntimeError("secret internals /home/x/model.onnx")

    monkeypatch.setattr(service.decoder, "masks", broken)
    got, _, answer = client("POST", masks, {"points": [[1, 1]]})
    assert got == 500 and "secret" not in answer["error"] and "logged on the server" in answer["error"]


def test_overload_is_503_with_retry_after(served) -> None:
    service, client = served
    with service.admission:  # max_pending=1: one encode in flight already
        status, headers, answer = client("POST", "/v1/embeddings", png_bytes(sample_image(33, 33, seed=21)))
    assert status == 503 and headers.get("Retry-After") == "1" and "busy" in answer["error"]
    assert client("POST", "/v1/embeddings", png_bytes(sample_image(33, 33, seed=21)))[0] == 200


def test_concurrent_prompts_and_metrics(served) -> None:
    """A bounded burst: 48 prompt requests from 8 threads, all answered 200, counted in /metrics."""
    _, client = served
    key = client("POST", "/v1/embeddings", png_bytes(sample_image(48, 80, seed=3)))[2]["id"]
    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(lambda k: client("POST", f"/v1/embeddings/{key}/masks",
                                                  {"points": [[k % 80, k % 48]], "labels": [1]})[0], range(48)))
    assert statuses == [200] * 48
    status, headers, text = client("GET", "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    from prometheus_client.parser import text_string_to_metric_families

    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    assert samples[("vitdeploy_requests_total", (("route", "masks"), ("status", "200")))] >= 48
    assert samples[("vitdeploy_request_seconds_bucket", (("le", "+Inf"), ("route", "masks")))] >= 48
    assert samples[("vitdeploy_requests_in_flight", ())] == 1  # the /metrics request itself
    status, _, health = client("GET", "/healthz")
    assert status == 200 and health["status"] == "ok" and health["variant"] == "tiny"


@pytest.mark.parametrize("signum,log_format", [(signal.SIGINT, "text"), (signal.SIGTERM, "json")])
def test_the_serve_verb_listens_and_stops_on_a_signal(tiny_sam_artifacts: TinySamArtifacts, signum: int,
                                                      log_format: str) -> None:
    """Ctrl-C and SIGTERM (docker stop, systemd, Kubernetes) stop the server like every verb: exit 130 and 143
    (it exited 0), one line, no traceback, the request log kept (text, or one JSON object a line)."""
    process = subprocess.Popen([sys.executable, "-m", "vitdeploy", "serve", "-e", str(tiny_sam_artifacts.encoder), "-d",
                                str(tiny_sam_artifacts.decoder), "--port", "0", "--runtime", "onnxruntime", "--threads", "1",
                                "--log-format", log_format],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ})
    try:
        line = process.stdout.readline()
        assert "serving encoder.onnx + decoder.onnx at http://127.0.0.1:" in line, process.stderr.read()
        port = int(line.split("127.0.0.1:")[1].split()[0])
        assert Client(port)("GET", "/healthz")[0] == 200
        process.send_signal(signum)
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 128 + signum, (process.returncode, err)
    assert f"stopped by {signal.Signals(signum).name}" in out and "Traceback" not in err
    if log_format == "text":
        assert "GET /healthz 200" in err
    else:
        lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
        health = [line for line in lines if line.get("path") == "/healthz"]
        assert health and health[0]["status"] == 200 and health[0]["route"] == "healthz" and len(health[0]["request_id"]) == 32


def test_a_stop_answers_the_requests_in_flight_and_takes_no_new_ones(tiny_sam_artifacts: TinySamArtifacts,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """What a signal does (Uvicorn sets should_exit): the request being encoded is answered 200 (8 of 8 got an empty
    reply under load), a connection after the stop is refused, and the server thread ends."""
    import socket
    import time

    service = SamService(tiny_sam_artifacts.encoder, tiny_sam_artifacts.decoder, runtime="onnxruntime", threads=1)
    real = service.encoder.encode

    def slow(data: bytes):
        time.sleep(1.0)
        return real(data)

    monkeypatch.setattr(service.encoder, "encode", slow)
    server = Server(service, "127.0.0.1", 0).start()
    client = Client(server.port)
    with ThreadPoolExecutor(5) as pool:  # 4 requests and the stop
        in_flight = [pool.submit(client, "POST", "/v1/embeddings", png_bytes(sample_image(30, 40, seed=k)))
                     for k in range(4)]
        time.sleep(0.3)  # every request is being answered
        stopping = pool.submit(server.stop)
        time.sleep(0.3)
        with pytest.raises(OSError):  # refused (or reset): the listening socket is closed
            socket.create_connection(("127.0.0.1", server.port), timeout=2).recv(1)
        stopping.result(timeout=60)
        statuses = [f.result(timeout=60)[0] for f in in_flight]
    assert statuses == [200] * 4, statuses  # max_pending=4: every accepted upload is answered
    assert not server._thread.is_alive()


def test_serve_refuses_a_missing_model(tiny_sam_artifacts: TinySamArtifacts, tmp_path: Path) -> None:
    from tests.cli_helpers import assert_user_error, run

    code, output = run("serve", "-e", str(tmp_path / "nope.onnx"), "-d", str(tiny_sam_artifacts.decoder))
    assert_user_error(code, output, "nope.onnx")
    code, output = run("serve", "-e", str(tiny_sam_artifacts.encoder), "-d", str(tiny_sam_artifacts.decoder),
                       "--encoder-replicas", "2")
    assert code == 2 and "are for --ray" in output
    code, output = run("serve", "-e", str(tiny_sam_artifacts.encoder), "-d", str(tiny_sam_artifacts.decoder),
                       "--encoder-replicas", "3:1", "--ray")
    assert code == 2 and "MIN:MAX" in output


def _raw(port: int, data: bytes, timeout: float = 10) -> bytes:
    """Everything the server sends back on one connection for ``data`` (read until it closes or goes quiet)."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
        conn.sendall(data)
        received = b""
        try:
            while chunk := conn.recv(65536):
                received += chunk
        except TimeoutError:
            pass
    return received


def test_back_pressure_is_503_with_retry_after_but_never_for_health(served, monkeypatch) -> None:
    """Past MAX_IN_FLIGHT requests at once, one more is answered 503 with Retry-After in JSON (Uvicorn's own limit
    answers in plain text without it); the ones in flight are answered, and /healthz is answered 200 however many are
    (a liveness probe must not restart a busy server)."""
    import time

    service, client = served
    monkeypatch.setattr(front_door, "MAX_IN_FLIGHT", 2)
    real = service.encoder.encode
    monkeypatch.setattr(service.encoder, "encode", lambda data: (time.sleep(0.8), real(data))[1])
    monkeypatch.setattr(service.admission, "limit", 8)
    with ThreadPoolExecutor(3) as pool:
        slow = [pool.submit(client, "POST", "/v1/embeddings", png_bytes(sample_image(20, 20, seed=60 + k))) for k in range(2)]
        time.sleep(0.3)
        status, headers, answer = client("GET", "/v1/embeddings/0123")
        health = client("GET", "/healthz")[0]
        assert [f.result()[0] for f in slow] == [200, 200]
    assert status == 503 and headers["Retry-After"] == "1" and "busy" in answer["error"]
    assert health == 200
    assert service.metrics.value("rejected_total", reason="in_flight") >= 1


def test_http_framing_is_parsed_not_guessed_and_every_method_answered(served, monkeypatch) -> None:
    """A chunked body is read as its chunks (it was ignored and the chunks taken for the next request) and bounded while
    it streams; two Content-Lengths and '1_0' (read as 10) are refused and the connection closed; PATCH/OPTIONS/
    TRACE get 405 in JSON (they got 501 HTML), HEAD is GET without the body; a burst of 50 simultaneous requests is answered (a backlog of 5
    reset clients); a half-sent request head and a stalled body are closed (each held a thread for good)."""
    import socket
    import time

    service, client = served
    port = int(client.base.rsplit(":", 1)[1])
    image = png_bytes(sample_image(20, 30, seed=5))
    chunked = b"".join(f"{len(image[k:k + 100]):x}\r\n".encode() + image[k:k + 100] + b"\r\n"
                       for k in range(0, len(image), 100)) + b"0\r\n\r\n"
    answer = _raw(port, b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                        b"Connection: close\r\n\r\n" + chunked)
    assert answer.startswith(b"HTTP/1.1 200") and b'"height":20' in answer, answer[:300]
    smuggled = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
    hidden = (b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
              + f"{len(smuggled):x}\r\n".encode() + smuggled + b"\r\n0\r\n\r\n")
    answer = _raw(port, hidden)
    assert answer.startswith(b"HTTP/1.1 400") and answer.count(b"HTTP/1.1 ") == 1, answer[:300]  # the body, not a request
    for lengths in ((b"5", b"6"), (b"1_0",), (b"+5",)):
        head = b"".join(b"Content-Length: " + n + b"\r\n" for n in lengths)
        answer = _raw(port, b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\n" + head + b"\r\nhello" + smuggled)
        assert answer.startswith(b"HTTP/1.1 400") and answer.count(b"HTTP/1.1 ") == 1, (lengths, answer)
    monkeypatch.setattr(front_door, "MAX_BODY_BYTES", 1000)
    endless = b"".join(b"100\r\n" + b"x" * 256 + b"\r\n" for _ in range(8)) + b"0\r\n\r\n"
    answer = _raw(port, b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + endless)
    assert answer.startswith(b"HTTP/1.1 413") and b"at most 1000" in answer, answer[:300]
    for method in ("PATCH", "OPTIONS", "TRACE"):
        status, headers, body = client(method, "/healthz", {})
        assert status == 405 and headers["Allow"] == "GET" and "takes GET" in body["error"], (method, body)
    answer = _raw(port, b"HEAD /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"\r\n\r\n"), answer  # as GET: headers, no body
    with ThreadPoolExecutor(50) as pool:
        statuses = list(pool.map(lambda _: client("GET", "/healthz")[0], range(50)))
    assert statuses == [200] * 50
    monkeypatch.setattr(one_process, "HEAD_TIMEOUT_S", 1.0)
    monkeypatch.setattr(front_door, "BODY_TIMEOUT_S", 1.0)  # 3 bytes then nothing: 408 after 1 s + 6 ms
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # half a request head, then nothing
        start = time.monotonic()
        assert conn.recv(100) == b"" and time.monotonic() - start < 5  # closed by the server, not by our timeout
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")  # 3 of 100
        start = time.monotonic()
        assert conn.recv(1000).startswith(b"HTTP/1.1 408") and time.monotonic() - start < 5


def test_one_image_is_decoded_at_a_time_however_many_wait(tiny_sam_artifacts: TinySamArtifacts, monkeypatch) -> None:
    """The decoded-pixel budget is per server, not per request: concurrent uploads are decoded one after another
    (three 8000x8000 PNGs at once took a server to 3.4 GB), each still answered."""
    import time

    from vitdeploy.runtime.processing import images

    service = SamService(tiny_sam_artifacts.encoder, tiny_sam_artifacts.decoder, runtime="onnxruntime", threads=1,
                         max_pending=4)
    state = {"now": 0, "most": 0}
    lock = threading.Lock()
    real = images.decode_image_bytes

    def counting(data: bytes, *args, **kwargs):
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        try:
            time.sleep(0.05)  # long enough for the others to arrive
            return real(data, *args, **kwargs)
        finally:
            with lock:
                state["now"] -= 1

    monkeypatch.setattr(images, "decode_image_bytes", counting)
    uploads = [png_bytes(sample_image(40 + k, 50, seed=k)) for k in range(4)]
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(service.encode, uploads))
    assert [a["cached"] for a in answers] == [False] * 4 and state["most"] == 1, state


def test_every_answer_carries_a_request_id(served) -> None:
    """Each response (and its log line) carries X-Request-Id: the client's own where it is plain, else a new one;
    a hostile one (a header injection, a long one) is replaced, not echoed."""
    _, client = served
    port = int(client.base.rsplit(":", 1)[1])
    first, second = client("GET", "/healthz")[1]["X-Request-Id"], client("GET", "/healthz")[1]["X-Request-Id"]
    assert len(first) == 32 and first != second
    answer = _raw(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Request-Id: trace-42\r\nConnection: close\r\n\r\n")
    assert b"x-request-id: trace-42\r\n" in answer.lower()
    answer = _raw(port, b"GET /nope HTTP/1.1\r\nHost: x\r\nX-Request-Id: a b<script>\r\nConnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 404") and b"<script>" not in answer and b"x-request-id: " in answer.lower()


def test_a_page_of_an_allowed_origin_may_call_the_service(tiny_sam_artifacts: TinySamArtifacts) -> None:
    """--cors-origin: a browser's preflight from that origin gets 204 and what it may send, its answers carry
    Access-Control-Allow-Origin; another origin gets no CORS headers and a 403 preflight; without the option,
    OPTIONS stays 405."""
    service = SamService(tiny_sam_artifacts.encoder, tiny_sam_artifacts.decoder, runtime="onnxruntime", threads=1)
    server = Server(service, "127.0.0.1", 0, cors_origins=("http://page.example:8080",)).start()
    port = server.port
    preflight = (b"OPTIONS /v1/embeddings HTTP/1.1\r\nHost: x\r\nOrigin: %s\r\nAccess-Control-Request-Method: POST\r\n"
                 b"Connection: close\r\n\r\n")
    try:
        answer = _raw(port, preflight % b"http://page.example:8080").lower()
        assert answer.startswith(b"http/1.1 204") and b"access-control-allow-origin: http://page.example:8080" in answer
        assert b"access-control-allow-methods: get, post" in answer, answer
        answer = _raw(port, preflight % b"http://evil.example").lower()
        assert answer.startswith(b"http/1.1 403") and b"access-control-allow-origin" not in answer, answer
        answer = _raw(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nOrigin: http://page.example:8080\r\nConnection: close\r\n\r\n").lower()
        assert answer.startswith(b"http/1.1 200") and b"access-control-allow-origin: http://page.example:8080" in answer
        answer = _raw(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nOrigin: http://evil.example\r\nConnection: close\r\n\r\n").lower()
        assert answer.startswith(b"http/1.1 200") and b"access-control-allow-origin" not in answer
    finally:
        server.stop()


def test_the_openapi_schema_is_valid_and_describes_what_is_answered(served) -> None:
    """/openapi.json passes the OpenAPI validator; it names every route, its request model and its answers; the
    answers the server gives and the prompts it takes validate against it (and a malformed prompt does not)."""
    import jsonschema
    from openapi_spec_validator import validate

    _, client = served
    status, _, schema = client("GET", "/openapi.json")
    assert status == 200
    validate(schema)
    assert set(schema["paths"]) == {"/healthz", "/metrics", "/v1/embeddings", "/v1/embeddings/{key}",
                                    "/v1/embeddings/{key}/masks", "/v1/embeddings/{key}/embedding",
                                    "/v1/embeddings/{key}/concepts", "/v1/models/decoder.onnx",
                                    "/v1/models/encoder.onnx"}
    masks = schema["paths"]["/v1/embeddings/{key}/masks"]["post"]
    ref = masks["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    answers = {code: r["content"]["application/json"]["schema"]["$ref"] for code, r in masks["responses"].items()
               if "application/json" in r.get("content", {})}
    assert ref.endswith("/MasksRequest") and answers["200"].endswith("/MasksAnswer") and answers["400"].endswith("/ErrorBody")
    upload = schema["paths"]["/v1/embeddings"]["post"]["requestBody"]["content"]
    assert {"application/octet-stream", "image/*", "application/json"} <= set(upload)

    def conforms(value, name: str) -> bool:
        document = {"$ref": f"#/components/schemas/{name}", "components": schema["components"]}
        return jsonschema.Draft202012Validator(document).is_valid(value)

    key = client("POST", "/v1/embeddings", png_bytes(sample_image(48, 80, seed=3)))[2]["id"]
    assert conforms(client("GET", f"/v1/embeddings/{key}")[2], "EmbeddingInfo")
    assert conforms(client("POST", f"/v1/embeddings/{key}/masks", {"prompts": PROMPTS})[2], "MasksAnswer")
    assert conforms(client("GET", "/v1/embeddings/nope")[2], "ErrorBody")
    assert conforms(client("GET", "/healthz")[2], "Health")
    assert all(conforms(p, "MasksRequest") for p in [*PROMPTS, {"prompts": PROMPTS}])
    assert not any(conforms(p, "MasksRequest") for p in ({"point": [[1, 1]]}, {"points": [[1, 2, 3]]}, {"box": [1, 2]},
                                                         {"prompts": []}, {"prompts": [{"box": [1, 1, 2, 2]}] * 65}))
    status, headers, page = client("GET", "/docs")
    assert status == 200 and headers["Content-Type"].startswith("text/html") and "openapi.json" in page
