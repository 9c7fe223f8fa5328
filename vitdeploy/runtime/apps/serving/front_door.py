"""What every request of the service passes first, before any route: :class:`FrontDoor`, a pure ASGI middleware.

It gives the request its id (``X-Request-Id``: the client's where it is plain, else a new one), answers 503 with
``Retry-After`` past :data:`MAX_IN_FLIGHT` requests at once (before any body is read), reads the body whole under
:data:`MAX_BODY_BYTES` (413, before any work) and :data:`BODY_TIMEOUT_S` a piece (408), and writes one log line and
the metrics of the answer. Its own answers are the API's JSON ``{"error": one line}``; everything else is the
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
#: Seconds the next piece of a body may take to arrive (a stalled upload is answered 408 and closed).
BODY_TIMEOUT_S = 30.0
#: Requests answered at once; one more is answered 503 with Retry-After before its body is read.
MAX_IN_FLIGHT = 256
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
        in_flight = metrics.in_flight(+1)

        async def send_with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                timing = f"handle;dur={(time.perf_counter() - start) * 1e3:.1f}"
                message = {**message, "headers": [*message.get("headers", []), (b"server-timing", timing.encode()),
                                                  *((k.encode(), v.encode()) for k, v in extra.items())]}
            await send(message)

        try:
            answer = self._busy(in_flight)
            body = b""
            if answer is None:
                body, answer = await self._read_body(headers, receive)
            if answer is _GONE:
                status["code"] = 499  # nginx's name for it, in the log and the metrics only
            elif answer is not None:
                code, head, data = answer
                await send_with_headers({"type": "http.response.start", "status": code, "headers": head})
                await send_with_headers({"type": "http.response.body", "body": data if scope["method"] != "HEAD" else b""})
            else:
                await self.app(scope, _replay(body, receive), send_with_headers)
        finally:
            metrics.in_flight(-1)
            route = getattr(scope.get("route"), "name", None) or getattr(scope.get("endpoint"), "__name__", "unknown")
            metrics.count("requests_total", route=route, status=str(status["code"]))
            metrics.observe(route, time.perf_counter() - start)
            request = {"method": scope["method"], "path": printable(scope.get("path", "")), "status": status["code"],
                       "ms": round((time.perf_counter() - start) * 1e3, 1), "route": route, "request_id": rid,
                       "client": (scope.get("client") or ("", 0))[0]}
            LOG.info("%(method)s %(path)s %(status)d %(ms).1f ms id=%(request_id)s", request, extra={"request": request})

    def _busy(self, in_flight: int) -> tuple[int, list, bytes] | None:
        """503 with Retry-After past MAX_IN_FLIGHT requests at once (back-pressure, before any body is read)."""
        if in_flight <= MAX_IN_FLIGHT:
            return None
        self.service.metrics.count("rejected_total", reason="in_flight")
        return _json_answer(503, {"error": f"busy: {in_flight - 1} requests are being answered; retry in 1 s"},
                            {"retry-after": "1"})

    async def _read_body(self, headers: dict[str, str], receive: Callable) -> tuple[bytes, Any]:
        """The whole body (at most MAX_BODY_BYTES; each piece within BODY_TIMEOUT_S), or the answer refusing it."""
        declared = headers.get("content-length", "0")
        if not declared.isdigit():  # the HTTP parser refuses such a request first; this holds behind any proxy
            return b"", _json_answer(400, {"error": "Content-Length must be one whole number of bytes"},
                                     {"connection": "close"})
        if int(declared) > MAX_BODY_BYTES:
            return b"", _too_large(int(declared))
        pieces, size = [], 0
        while True:
            try:
                message = await asyncio.wait_for(receive(), BODY_TIMEOUT_S)
            except asyncio.TimeoutError:
                return b"", _json_answer(408, {"error": f"no part of the body arrived for {BODY_TIMEOUT_S:g} s: send "
                                                        "the whole request at once"}, {"connection": "close"})
            if message["type"] == "http.disconnect":
                return b"", _GONE
            size += len(message.get("body", b""))
            if size > MAX_BODY_BYTES:  # a chunked body past the limit: refused while it streams
                return b"", _too_large(size)
            pieces.append(message.get("body", b""))
            if not message.get("more_body", False):
                return b"".join(pieces), None


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


__all__ = ["BODY_TIMEOUT_S", "FrontDoor", "MAX_BODY_BYTES", "MAX_IN_FLIGHT", "printable", "request_id"]
