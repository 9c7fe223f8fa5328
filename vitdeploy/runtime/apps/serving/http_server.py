"""``vitdeploy serve`` in one process: the SAM service behind Python's own threading HTTP server.

No web framework: ``http.server.ThreadingHTTPServer`` (one thread per connection) hands each request to
:func:`~vitdeploy.runtime.apps.serving.service.handle_request`, which never raises. Bodies over
:data:`~vitdeploy.runtime.apps.serving.service.MAX_BODY_BYTES` are refused (413) before they are read; a body
sent with ``Transfer-Encoding`` (411) or an unclear ``Content-Length`` (two values, not a whole number: 400) is
refused and the connection closed, so no request hides in another's body; an idle or stalled connection is closed
after :data:`CONNECTION_TIMEOUT_S`; the listen backlog holds 128 connections.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from vitdeploy.runtime.apps.serving.service import MAX_BODY_BYTES, Response, Service, handle_request, json_response

LOG = logging.getLogger("vitdeploy.serve")


_DIGITS = re.compile(r"[0-9]+")
#: A client's own request id is kept where it is this plain (else one is made): it goes into a header and the log.
_CLIENT_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
#: Seconds a connection may sit idle or half-sent before it is closed (an idle keep-alive, a slow or stalled
#: client): each connection holds a thread while it is open.
CONNECTION_TIMEOUT_S = 30


def _request_id(asked: str | None) -> str:
    """The id a response and its log line carry: the client's ``X-Request-Id`` where it is plain, else a new one."""
    import uuid

    return asked.strip() if asked and _CLIENT_ID.fullmatch(asked.strip()) else uuid.uuid4().hex


class _Handler(BaseHTTPRequestHandler):
    service: Service  # set on the subclass make_server builds
    protocol_version = "HTTP/1.1"
    server_version = "vitdeploy"
    cors_origins: tuple[str, ...] = ()  # --cors-origin: the page origins that may call the service

    def do_GET(self) -> None:  # noqa: N802 (the names http.server calls)
        self._answer("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._answer("POST")

    def do_PUT(self) -> None:  # noqa: N802
        self._answer("PUT")

    def do_DELETE(self) -> None:  # noqa: N802
        self._answer("DELETE")

    def do_HEAD(self) -> None:  # noqa: N802 (headers only: _send leaves the body out)
        self._answer("HEAD")

    def do_PATCH(self) -> None:  # noqa: N802 (answered 405 in JSON by the routes, not http.server's 501 HTML page)
        self._answer("PATCH")

    def do_OPTIONS(self) -> None:  # noqa: N802
        self._answer("OPTIONS")

    def do_TRACE(self) -> None:  # noqa: N802
        self._answer("TRACE")

    def _cors_headers(self) -> dict[str, str]:
        """What lets a page of an allowed origin read the answer (none for another origin, or without --cors-origin)."""
        origin = self.headers.get("Origin")
        if not origin or not (origin in self.cors_origins or "*" in self.cors_origins):
            return {}
        return {"Access-Control-Allow-Origin": "*" if "*" in self.cors_origins else origin, "Vary": "Origin",
                "Access-Control-Expose-Headers": "X-Request-Id, Retry-After"}

    def _answer(self, method: str) -> None:
        start = time.perf_counter()
        if method == "OPTIONS" and self.cors_origins and self.headers.get("Access-Control-Request-Method"):
            response = self._preflight()
        else:
            response = self._response(method)
        # Logged before the answer is sent: a client that has its answer knows the line is written (a Ctrl-C right
        # after it cannot lose the line with the handler's daemon thread); the time is the handling, not the write.
        request_id = _request_id(self.headers.get("X-Request-Id"))
        response.headers["X-Request-Id"] = request_id
        response.headers.update(self._cors_headers())
        LOG.info("%s %s %d %.1f ms id=%s", method, self.path, response.status, (time.perf_counter() - start) * 1e3,
                 request_id)
        self._send(response)

    def _response(self, method: str) -> Response:
        """The request's body read (when its length is clear and allowed) and handed to the routes."""
        lengths = self.headers.get_all("Content-Length") or ["0"]
        length = int(lengths[0]) if len(set(lengths)) == 1 and _DIGITS.fullmatch(lengths[0].strip()) else -1
        if self.headers.get("Transfer-Encoding") is not None:
            # A chunked body would be read as empty and the chunks taken for the next request (request smuggling)
            self.close_connection = True
            return json_response(411, {"error": "a body sent with Transfer-Encoding is not taken: send it with "
                                                "Content-Length"})
        if length < 0:
            self.close_connection = True  # where the body ends is unclear: nothing after it can be trusted
            return json_response(400, {"error": "Content-Length must be one whole number of bytes (it was "
                                                f"{', '.join(lengths)[:60]})"})
        if length > MAX_BODY_BYTES:
            self.close_connection = True  # the unread body would be taken for the next request
            return json_response(413, {"error": f"the body is {length} bytes; at most {MAX_BODY_BYTES} are taken: "
                                                "send a smaller image (SAM works at 1024 pixels on the long side)"})
        body = self.rfile.read(length) if length else b""
        return handle_request(self.service, method, self.path, body, self.headers.get("Content-Type", ""))

    def _preflight(self) -> Response:
        """A browser's CORS preflight: 204 with what an allowed origin may send, 403 for another origin."""
        if not self._cors_headers():
            return json_response(403, {"error": f"origin {self.headers.get('Origin', '(none)')[:80]} is not allowed: "
                                                "start serve with --cors-origin for it"})
        return Response(204, b"", headers={"Access-Control-Allow-Methods": "GET, POST",
                                           "Access-Control-Allow-Headers": "Content-Type, X-Request-Id",
                                           "Access-Control-Max-Age": "600"})

    def _send(self, response: Response) -> None:
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        for name, value in response.headers.items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(response.body)

    def log_message(self, format: str, *args: Any) -> None:  # http.server's own lines: errors only, to the log
        LOG.debug(format, *args)


class Server(ThreadingHTTPServer):
    daemon_threads = True  # a stuck client never keeps the process from stopping
    allow_reuse_address = True
    request_queue_size = 128  # the listen backlog (socketserver's 5 reset clients in bursts of 50 requests)


def make_server(service: Service, host: str = "127.0.0.1", port: int = 8000,
                cors_origins: tuple[str, ...] | list[str] = ()) -> Server:
    """A server bound to ``host:port`` (port 0: a free one, see ``server.server_address``); run ``serve_forever()``.
    ``cors_origins``: page origins (``https://app.example``, or ``*``) a browser may call the service from."""
    # timeout: StreamRequestHandler sets it on each connection's socket (read here, so a test can shorten it)
    handler = type("Handler", (_Handler,), {"service": service, "timeout": CONNECTION_TIMEOUT_S,
                                            "cors_origins": tuple(cors_origins)})
    return Server((host, port), handler)


def log_to_stderr(verbose: bool) -> None:
    """One line per request on stderr (``--verbose``: http.server's own lines too)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    LOG.addHandler(handler)
    LOG.setLevel(logging.DEBUG if verbose else logging.INFO)
    LOG.propagate = False


__all__ = ["Server", "log_to_stderr", "make_server"]
