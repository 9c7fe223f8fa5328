"""``vitdeploy serve`` in one process: the SAM service behind Python's own threading HTTP server.

No web framework: ``http.server.ThreadingHTTPServer`` (one thread per connection) hands each request to
:func:`~vitdeploy.runtime.apps.serving.service.handle_request`, which never raises. Bodies over
:data:`~vitdeploy.runtime.apps.serving.service.MAX_BODY_BYTES` are refused (413) before they are read.
"""

from __future__ import annotations

import logging
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from vitdeploy.runtime.apps.serving.service import MAX_BODY_BYTES, Response, Service, handle_request, json_response

LOG = logging.getLogger("vitdeploy.serve")


class _Handler(BaseHTTPRequestHandler):
    service: Service  # set on the subclass make_server builds
    protocol_version = "HTTP/1.1"
    server_version = "vitdeploy"

    def do_GET(self) -> None:  # noqa: N802 (the names http.server calls)
        self._answer("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._answer("POST")

    def do_PUT(self) -> None:  # noqa: N802
        self._answer("PUT")

    def do_DELETE(self) -> None:  # noqa: N802
        self._answer("DELETE")

    def _answer(self, method: str) -> None:
        start = time.perf_counter()
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0:
            response = json_response(400, {"error": "Content-Length is not a number"})
        elif length > MAX_BODY_BYTES:
            response = json_response(413, {"error": f"the body is {length} bytes; at most {MAX_BODY_BYTES} are taken: "
                                                    "send a smaller image (SAM works at 1024 pixels on the long side)"})
            self.close_connection = True  # the unread body would be taken for the next request
        else:
            body = self.rfile.read(length) if length else b""
            response = handle_request(self.service, method, self.path, body, self.headers.get("Content-Type", ""))
        # Logged before the answer is sent: a client that has its answer knows the line is written (a Ctrl-C right
        # after it cannot lose the line with the handler's daemon thread); the time is the handling, not the write.
        LOG.info("%s %s %d %.1f ms", method, self.path, response.status, (time.perf_counter() - start) * 1e3)
        self._send(response)

    def _send(self, response: Response) -> None:
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        for name, value in response.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(response.body)

    def log_message(self, format: str, *args: Any) -> None:  # http.server's own lines: errors only, to the log
        LOG.debug(format, *args)


class Server(ThreadingHTTPServer):
    daemon_threads = True  # a stuck client never keeps the process from stopping
    allow_reuse_address = True


def make_server(service: Service, host: str = "127.0.0.1", port: int = 8000) -> Server:
    """A server bound to ``host:port`` (port 0: a free one, see ``server.server_address``); run ``serve_forever()``."""
    handler = type("Handler", (_Handler,), {"service": service})
    return Server((host, port), handler)


def log_to_stderr(verbose: bool) -> None:
    """One line per request on stderr (``--verbose``: http.server's own lines too)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    LOG.addHandler(handler)
    LOG.setLevel(logging.DEBUG if verbose else logging.INFO)
    LOG.propagate = False


__all__ = ["Server", "log_to_stderr", "make_server"]
