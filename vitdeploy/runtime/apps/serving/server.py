"""``vitdeploy serve`` in one process: the API (:mod:`~vitdeploy.runtime.apps.serving.api`) served by Uvicorn.

Uvicorn parses HTTP with h11: a chunked body is read as chunks (and bounded by the API's body limit while it
streams), two different ``Content-Length`` values or one that is not a whole number are refused with 400 and the
connection closed, so no request hides in another's body. Connections are asyncio, not threads: a slow client
holds a socket, not a thread. Around that:

- the listen backlog holds :data:`BACKLOG` connections; past :data:`MAX_CONNECTIONS` open connections the one
  waiting longest for a request head is closed to make room (520 clients trickling request heads made every other
  request a plain-text 503 under Uvicorn's ``limit_concurrency``), and only where every connection is answering a
  request is a new one answered 503 (JSON);
- a connection must deliver a whole request head within :data:`HEAD_TIMEOUT_S` of opening (or of its previous
  answer), else it is closed (a stalled or half-sent request, a TLS hello); an idle keep-alive is closed after
  :data:`KEEP_ALIVE_S`; the body's own limit is the API's;
- SIGTERM or Ctrl-C stops taking connections, answers the uploads still arriving 503 at once, lets the requests
  whose bodies are complete finish (at most :data:`GRACE_S`), then re-raises the signal, so ``vitdeploy serve`` exits 143 or 130 like every verb.
"""

from __future__ import annotations

import itertools
import logging
import socket
import threading
import time
from typing import Any

from vitdeploy.runtime.apps.serving.service import Service

#: Connections the kernel queues before the server accepts them.
BACKLOG = 1024
#: Open connections at once; one more closes the connection waiting longest for a request head.
MAX_CONNECTIONS = 1024
#: Seconds a connection may take to deliver a whole request head (from opening, or from its previous answer).
HEAD_TIMEOUT_S = 30.0
#: Seconds an idle keep-alive connection stays open.
KEEP_ALIVE_S = 5
#: Seconds a stop waits for the requests in flight.
GRACE_S = 30


def _protocol_class() -> type:
    """Uvicorn's h11 protocol with a deadline for the request head (Uvicorn has a keep-alive timeout only)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    tickets = itertools.count()

    class HeadDeadline(H11Protocol):
        _head_timer: Any = None
        #: Which place this connection holds among those waiting for a request head, in the order they began waiting
        #: (None: a request is being answered). A count, not the loop's clock: uvloop's ``loop.time()`` is in whole
        #: milliseconds, so the connections accepted in one tick tied and the one closed was arbitrary.
        waiting_ticket: int | None = None

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()
            if len(self.connections) > MAX_CONNECTIONS:
                self._make_room()

        def _make_room(self) -> None:
            """Past MAX_CONNECTIONS open connections, the one waiting longest for a request head is closed (a slow or
            idle client), so a new client is served; where every other one is answering a request, this one is told
            503 in JSON and closed."""
            waiting = [c for c in self.connections if c is not self and getattr(c, "waiting_ticket", None) is not None
                       and not c.transport.is_closing()]
            if waiting:
                min(waiting, key=lambda c: c.waiting_ticket).transport.close()
                return
            body = b'{"error": "busy: too many connections are being answered; retry in 1 s"}\n'
            self.transport.write(b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                                 b"retry-after: 1\r\nconnection: close\r\ncontent-length: "
                                 + str(len(body)).encode() + b"\r\n\r\n" + body)
            self.transport.close()

        def on_response_complete(self) -> None:
            self._arm()  # before the next pipelined request is parsed (which disarms it)
            super().on_response_complete()

        def handle_events(self) -> None:
            before = self.cycle
            super().handle_events()
            if self.cycle is not before:  # a whole request head arrived
                self._disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._late)
            self.waiting_ticket = next(tickets)

        def _disarm(self) -> None:
            self.waiting_ticket = None
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _late(self) -> None:
            if (self.cycle is None or self.cycle.response_complete) and not self.transport.is_closing():
                self.transport.close()

    return HeadDeadline


class Server:
    """The service's API on ``host:port`` (port 0: a free one, see :attr:`port`), bound at construction."""

    def __init__(self, service: Service, host: str = "127.0.0.1", port: int = 8000,
                 cors_origins: tuple[str, ...] | list[str] = (), body_budget_bytes: int | None = None):
        import uvicorn

        from vitdeploy.runtime.apps.serving.api import build_api

        self.socket = socket.create_server((host, port), backlog=BACKLOG)  # SO_REUSEADDR on POSIX
        self.host, self.port = host, self.socket.getsockname()[1]
        config = uvicorn.Config(build_api(service, cors_origins=cors_origins), http=_protocol_class(), ws="none",
                                lifespan="off", access_log=False, log_config=None, backlog=BACKLOG,
                                timeout_keep_alive=KEEP_ALIVE_S,
                                timeout_graceful_shutdown=GRACE_S, server_header=False)
        front = config.app  # the FrontDoor build_api returned
        front.body_budget = body_budget_bytes

        class Stopping(uvicorn.Server):
            async def shutdown(self, sockets: Any = None) -> None:
                front.stop_uploads()  # bodies still arriving are refused now, not after the grace
                await super().shutdown(sockets)

        self.uvicorn = Stopping(config)
        self._thread: threading.Thread | None = None

    def run(self) -> None:
        """Serve until SIGTERM or SIGINT (then the signal is raised again once the requests in flight are answered)."""
        try:
            self.uvicorn.run(sockets=[self.socket])
        finally:
            self.socket.close()

    def start(self) -> Server:
        """Serve from a background thread (signals stay with the caller); :meth:`stop` ends it."""
        self._thread = threading.Thread(target=self.run, name="vitdeploy-serve", daemon=True)
        self._thread.start()
        while not self.uvicorn.started and self._thread.is_alive():
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.uvicorn.should_exit = True
        if self._thread is not None:
            self._thread.join(GRACE_S + 5)


def listen(service: Service, host: str, port: int, cors_origins: tuple[str, ...] | list[str] = (),
           body_budget_bytes: int | None = None) -> Server:
    """:class:`Server` bound to ``host:port``, or one line saying why it cannot be (the address taken, or not
    this machine's)."""
    try:
        return Server(service, host, port, cors_origins=cors_origins, body_budget_bytes=body_budget_bytes)
    except OSError as exc:
        from vitdeploy.errors import InputError

        raise InputError(f"cannot listen on {host}:{port} ({exc.strerror}): choose another --port (0: any free one)") from exc


def log_to_stderr(verbose: bool, json_lines: bool = False) -> None:
    """One line per request on stderr (``--verbose``: the HTTP layer's own lines too); ``json_lines``: each line a
    JSON object (time, method, path, status, ms, route, request_id, client), for a log collector."""
    import sys

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines() if json_lines else logging.Formatter("%(asctime)s %(message)s"))
    for name in ("vitdeploy.serve", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.propagate = False
    logging.getLogger("vitdeploy.serve").setLevel(logging.DEBUG if verbose else logging.INFO)
    logging.getLogger("uvicorn.error").setLevel(logging.INFO if verbose else logging.WARNING)


class JsonLines(logging.Formatter):
    """A log record as one JSON object: a request's fields (the API's ``extra={"request": ...}``), else the message."""

    def format(self, record: logging.LogRecord) -> str:
        import json

        fields = getattr(record, "request", None) or {"level": record.levelname.lower(), "message": record.getMessage()}
        line = {"time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}", **fields}
        if record.exc_info:
            line["traceback"] = self.formatException(record.exc_info)
        return json.dumps(line)


__all__ = ["BACKLOG", "JsonLines", "GRACE_S", "HEAD_TIMEOUT_S", "KEEP_ALIVE_S", "MAX_CONNECTIONS", "Server", "listen",
           "log_to_stderr"]
