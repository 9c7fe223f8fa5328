"""What every request of the service passes first, before any route: :class:`FrontDoor`, a pure ASGI middleware.

It gives the request its id (``X-Request-Id``: the client's where it is plain, else a new one) and reads the body
whole before any route sees it, bounded three ways: a body over :data:`MAX_BODY_BYTES` is answered 413 before it is
read (what the client still sends is read and dropped first, for at most :data:`LINGER_S`, so that it reads the
answer); at most :data:`MAX_UPLOADS` bodies are received at once and they hold at most :data:`BODY_BUDGET_BYTES` together (one
more is answered 503 with ``Retry-After`` before it is read); a body must arrive within :data:`BODY_TIMEOUT_S` plus a
second per :data:`MIN_BODY_RATE` bytes (408). Only a request whose body is complete counts as in flight: past
:data:`MAX_IN_FLIGHT` of them one more is answered 503, except :data:`NEVER_REFUSED` (health and metrics: a liveness
probe is answered however loaded the server is). HEAD is answered as GET without the body. It writes one log line and
the metrics of each answer. Its own answers are the API's JSON ``{"error": one line}``; everything else is the
application's (:mod:`~vitdeploy.runtime.apps.serving.api`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

from vitdeploy.runtime.apps.serving.service import Service

LOG = logging.getLogger("vitdeploy.serve")
#: The largest request body taken (an image upload); larger ones are answered 413 before they are read.
MAX_BODY_BYTES = 64 << 20
#: Seconds a body may take to arrive before it must keep :data:`MIN_BODY_RATE` (Apache's ``mod_reqtimeout``
#: ``body=20,MinRate=500``: the deadline moves on by a second for every 500 bytes received); a body past its deadline
#: is answered 408 and closed. A client trickling a byte every 20 s is closed after 20 s, not kept for ever.
BODY_TIMEOUT_S = 20.0
#: Bytes a second a body must keep arriving at past :data:`BODY_TIMEOUT_S`.
MIN_BODY_RATE = 500
#: Requests answered at once (their bodies complete); one more is answered 503 with Retry-After.
MAX_IN_FLIGHT = 256
#: Bodies being received at once (uploads in progress, a pool of their own: they do not count as in flight); one
#: more is answered 503 before its body is read. A slow one costs a coroutine and what it has sent: the body budget
#: and the rate bound what they hold and for how long.
MAX_UPLOADS = 768
#: Bytes of request bodies the server holds at once, all requests together (received, or promised by their
#: Content-Length): an upload that does not fit is answered 503 (retry) before it is read. 50 uploads of 60 MB took
#: a server from 109 MB to 3.1 GB while they were held, before this budget; a body is held twice for a moment (its
#: pieces, then joined), so the server's peak is about twice this (benchmarks/bench_serve_hostile.py).
BODY_BUDGET_BYTES = 512 << 20
#: Once no body is held and the last one was at least this large, the freed memory goes back to the system (glibc
#: keeps a body's 64 KiB pieces in its arenas: 50 uploads of 60 MB left a server at 642 MB, not its idle 101 MB).
TRIM_AFTER_BYTES = 16 << 20
#: Routes never refused for load (a liveness probe must not restart a busy server).
NEVER_REFUSED = ("/healthz", "/metrics")
#: Seconds a refused body is still read (and dropped) before the answer, at most, so a client that sends its whole
#: body before reading (Python's urllib, curl) reads the 413 or 503 instead of a reset connection; and seconds of
#: silence that end it sooner (nginx's lingering close: ``lingering_time 30s``, ``lingering_timeout 5s``).
LINGER_S = 30.0
LINGER_IDLE_S = 5.0
#: A client's own request id is kept where it is this plain (else one is made): it goes into a header and the log.
_CLIENT_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
#: What _read_body answers when the client left before its body arrived: nothing is sent.
_GONE = (0, [], b"")


def request_id(asked: str | None) -> str:
    """The id a response and its log line carry: the client's ``X-Request-Id`` where it is plain, else a new one."""
    return asked.strip() if asked and _CLIENT_ID.fullmatch(asked.strip()) else uuid.uuid4().hex


def printable(text: str, limit: int = 200) -> str:
    """``text`` for one log line: control characters escaped (a URL's %0a cannot forge a line), cut at ``limit``."""
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text[:limit])


def _json_answer(status: int, body: Any, headers: dict[str, str] | None = None) -> tuple[int, list, bytes]:
    data = (json.dumps(body) + "\n").encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    head += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    return status, head, data


class FrontDoor:
    """Pure ASGI middleware in front of every route (module docstring): ids, bounded bodies, logs, metrics."""

    def __init__(self, app: Any, service: Service):
        self.app, self.service = app, service
        #: Bodies being received, and the bytes all bodies held now take (received, or promised by Content-Length).
        self.uploads, self.body_bytes = 0, 0
        #: Set (on the server's loop) when the server stops: uploads still arriving are refused at once.
        self.stopping: asyncio.Event | None = None
        #: The body budget of this server (``serve --body-budget-mib``); None: :data:`BODY_BUDGET_BYTES`.
        self.body_budget: int | None = None

    @property
    def budget(self) -> int:
        return BODY_BUDGET_BYTES if self.body_budget is None else self.body_budget

    def stop_uploads(self) -> None:
        """The server is stopping: every body still arriving is answered 503 now (call on the server's loop), so the
        grace period goes to the requests whose bodies are complete."""
        self._stop_event().set()

    def _stop_event(self) -> asyncio.Event:
        if self.stopping is None:
            self.stopping = asyncio.Event()
        return self.stopping

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        rid = request_id(headers.get("x-request-id"))
        scope.setdefault("state", {})["request_id"] = rid
        extra = {"x-request-id": rid}
        status = {"code": 500}
        metrics = self.service.metrics
        held = {"bytes": 0, "in_flight": False}

        async def send_with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                timing = f"handle;dur={(time.perf_counter() - start) * 1e3:.1f}"
                message = {**message, "headers": [*message.get("headers", []), (b"server-timing", timing.encode()),
                                                  *((k.encode(), v.encode()) for k, v in extra.items())]}
            elif not message.get("more_body", False) and held["in_flight"]:  # the last of the answer: no longer in
                held["in_flight"] = False  # flight before the client can read it (and send its next request)
                metrics.in_flight(-1)
            await send(message)

        try:
            body, answer = await self._admit_body(headers, receive, held)
            if answer is None:
                held["in_flight"] = True
                answer = self._busy(metrics.in_flight(+1), scope.get("path") in NEVER_REFUSED)
            if answer is _GONE:
                status["code"] = 499  # nginx's name for it, in the log and the metrics only
            elif answer is not None:
                code, head, data = answer
                await send_with_headers({"type": "http.response.start", "status": code, "headers": head})
                await send_with_headers({"type": "http.response.body", "body": data if scope["method"] != "HEAD" else b""})
            else:
                await self.app(_as_get(scope), _replay(body, receive), send_with_headers)
        finally:
            self.body_bytes -= held["bytes"]
            if held["bytes"] >= TRIM_AFTER_BYTES and self.body_bytes == 0:
                _return_freed_memory()
            if held["in_flight"]:
                metrics.in_flight(-1)
            route = getattr(scope.get("route"), "name", None) or getattr(scope.get("endpoint"), "__name__", "unknown")
            metrics.count("requests_total", route=route, status=str(status["code"]))
            metrics.observe(route, time.perf_counter() - start)
            request = {"method": scope["method"], "path": printable(scope.get("path", "")), "status": status["code"],
                       "ms": round((time.perf_counter() - start) * 1e3, 1), "route": route, "request_id": rid,
                       "client": (scope.get("client") or ("", 0))[0]}
            LOG.info("%(method)s %(path)s %(status)d %(ms).1f ms id=%(request_id)s", request, extra={"request": request})

    def _busy(self, in_flight: int, never_refused: bool) -> tuple[int, list, bytes] | None:
        """503 with Retry-After past MAX_IN_FLIGHT requests at once (back-pressure once a body is complete); never for
        :data:`NEVER_REFUSED` routes."""
        if in_flight <= MAX_IN_FLIGHT or never_refused:
            return None
        self.service.metrics.count("rejected_total", reason="in_flight")
        return _json_answer(503, {"error": f"busy: {in_flight - 1} requests are being answered; retry in 1 s"},
                            {"retry-after": "1"})

    async def _admit_body(self, headers: dict[str, str], receive: Callable, held: dict) -> tuple[bytes, Any]:
        """The request's body, read within the upload pool and the body budget, or the answer refusing it (None: go
        on). A request without a body takes no upload slot."""
        declared = headers.get("content-length", "0")
        if not declared.isdigit():  # the HTTP parser refuses such a request first; this holds behind any proxy
            return b"", _json_answer(400, {"error": "Content-Length must be one whole number of bytes"},
                                     {"connection": "close"})
        if declared == "0" and "transfer-encoding" not in headers:
            return b"", None
        if int(declared) > MAX_BODY_BYTES:
            return await _refused(receive, _too_large(int(declared)))
        if self.uploads >= MAX_UPLOADS:
            self.service.metrics.count("rejected_total", reason="uploads")
            return await _refused(receive, _json_answer(
                503, {"error": f"busy: {self.uploads} uploads are being received; retry in 1 s"},
                {"retry-after": "1", "connection": "close"}))
        self.uploads += 1
        try:
            return await self._read_body(int(declared), receive, held)
        finally:
            self.uploads -= 1

    def _hold(self, size: int, held: dict) -> bool:
        """Take ``size`` more bytes of the body budget for this request (False: they do not fit)."""
        if self.body_bytes + size > self.budget:
            return False
        self.body_bytes += size
        held["bytes"] += size
        return True

    async def _read_body(self, declared: int, receive: Callable, held: dict) -> tuple[bytes, Any]:
        """The whole body (at most MAX_BODY_BYTES, by BODY_TIMEOUT_S plus a second per MIN_BODY_RATE bytes), or the
        answer refusing it."""
        if not self._hold(declared, held):
            self.service.metrics.count("rejected_total", reason="body_budget")
            return await _refused(receive, _json_answer(
                503, {"error": f"busy: the uploads being received hold {self.body_bytes} bytes of the server's "
                               f"{self.budget}; retry in 1 s"}, {"retry-after": "1", "connection": "close"}))
        stopped = asyncio.ensure_future(self._stop_event().wait())  # one watcher for the whole body, not one a piece
        try:
            return await self._pieces(receive, held, stopped)
        finally:
            stopped.cancel()

    async def _pieces(self, receive: Callable, held: dict, stopped: asyncio.Future) -> tuple[bytes, Any]:
        """The body's pieces joined, each arriving by the rate's deadline; the answer refusing it otherwise."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        pieces, size = [], 0
        while True:
            left = started + BODY_TIMEOUT_S + size / MIN_BODY_RATE - loop.time()
            arrived = asyncio.ensure_future(receive())
            await asyncio.wait((arrived, stopped), timeout=max(left, 0.0), return_when=asyncio.FIRST_COMPLETED)
            if not arrived.done():
                arrived.cancel()
                if stopped.done():
                    return b"", _json_answer(503, {"error": "the server is stopping: send the request again (to "
                                                            "another replica, or once it is back)"},
                                             {"retry-after": "1", "connection": "close"})
                return b"", _json_answer(408, {"error": f"the body came slower than {MIN_BODY_RATE} bytes a second "
                                                        f"after {BODY_TIMEOUT_S:g} s ({size} of it arrived): send the "
                                                        "whole request at once"}, {"connection": "close"})
            message = arrived.result()
            if message["type"] == "http.disconnect":
                return b"", _GONE
            piece = message.get("body", b"")
            size += len(piece)
            if size > MAX_BODY_BYTES:  # a chunked body past the limit: refused while it streams
                return await _refused(receive, _too_large(size))
            if size > held["bytes"] and not self._hold(size - held["bytes"], held):  # a chunked body grows
                return b"", _json_answer(503, {"error": "busy: the uploads being received fill the server's body "
                                                        "budget; retry in 1 s"}, {"retry-after": "1", "connection": "close"})
            pieces.append(piece)
            if not message.get("more_body", False):
                return b"".join(pieces), None


def _return_freed_memory() -> None:
    """glibc's ``malloc_trim(0)``: the memory freed since goes back to the system (nothing where there is no glibc)."""
    import ctypes
    import ctypes.util

    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


async def _refused(receive: Callable, answer: tuple[int, list, bytes]) -> tuple[bytes, Any]:
    """(no body, ``answer``), once what the client still sends of the refused body is drained (:func:`_drain`)."""
    await _drain(receive)
    return b"", answer


async def _drain(receive: Callable) -> None:
    """Read and drop what a refused body still sends, for at most :data:`LINGER_S` (:data:`LINGER_IDLE_S` without a
    byte): a client that writes its whole body before it reads (urllib, curl) then reads the answer instead of a reset
    connection."""
    loop = asyncio.get_running_loop()
    end = loop.time() + LINGER_S
    while (left := end - loop.time()) > 0:
        try:
            message = await asyncio.wait_for(receive(), min(left, LINGER_IDLE_S))
        except asyncio.TimeoutError:
            return
        if message["type"] == "http.disconnect" or not message.get("more_body", False):
            return


def _as_get(scope: dict) -> dict:
    """A HEAD request as the GET it asks about, for the routes (RFC 9110: HEAD is GET without the body; the server
    sends no body for HEAD, whatever the route writes); the method asked stays in ``state["method"]``."""
    scope["state"]["method"] = scope["method"]
    return {**scope, "method": "GET"} if scope["method"] == "HEAD" else scope


def _too_large(size: int) -> tuple[int, list, bytes]:
    return _json_answer(413, {"error": f"the body is {size} bytes or more; at most {MAX_BODY_BYTES} are taken: send a "
                                       "smaller image (SAM works at 1024 pixels on the long side)"},
                        {"connection": "close"})


def _replay(body: bytes, receive: Callable) -> Callable:
    """A ``receive`` that gives the app the body already read, then waits on the real one (for a disconnect)."""
    sent = False

    async def replayed() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


__all__ = ["BODY_BUDGET_BYTES", "BODY_TIMEOUT_S", "FrontDoor", "LINGER_IDLE_S", "LINGER_S", "MAX_BODY_BYTES", "MAX_IN_FLIGHT",
           "MAX_UPLOADS", "MIN_BODY_RATE", "NEVER_REFUSED", "printable", "request_id"]
