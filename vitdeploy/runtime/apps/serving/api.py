"""The SAM service as one FastAPI application: what Uvicorn serves in one process and Ray Serve's ingress serves.

    GET  /                              the page: open an image, click, see the mask (serving/page/)
    POST /v1/embeddings                 the image file's bytes (or JSON {"image": base64}) -> EmbeddingCreated
    GET  /v1/embeddings/{id}            -> EmbeddingInfo (404: never sent, or evicted)
    POST /v1/embeddings/{id}/masks      MasksRequest (one prompt, or {"prompts": [...]}) -> MasksAnswer
    POST /v1/embeddings/{id}/concepts   ConceptRequest (SAM 3: a text and/or exemplar boxes) -> ConceptAnswer
    GET  /healthz                       -> Health
    GET  /metrics                       Prometheus text (serving/metrics.py)
    GET  /openapi.json, /docs           the schema of all of the above, and its page (Swagger UI)

Every request passes :class:`FrontDoor` first: it gives the request its id (``X-Request-Id``: the client's where it
is plain, else a new one), answers CORS preflights, reads the body whole under :data:`MAX_BODY_BYTES` (413, before
any work) and :data:`BODY_TIMEOUT_S` (408), and writes one log line and the metrics of the answer. Errors are JSON
``{"error": one line}``: 400 for a body the API does not take (its form, from the Pydantic models of
:mod:`~vitdeploy.runtime.apps.serving.schemas`, or its meaning, from the service), 404, 405 with ``Allow``, 413,
503 with ``Retry-After``, and a 500 that says only that it happened (the traceback goes to the server's log).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from vitdeploy.errors import InputError
from vitdeploy.runtime.apps.serving import schemas
from vitdeploy.runtime.apps.serving.metrics import content_type
from vitdeploy.runtime.apps.serving.service import ApiError, Service, parse_concept, parse_prompts

LOG = logging.getLogger("vitdeploy.serve")
#: The largest request body taken (an image upload); larger ones are answered 413 before they are read.
MAX_BODY_BYTES = 64 << 20
#: Seconds the next piece of a body may take to arrive (a stalled upload is answered 408 and closed).
BODY_TIMEOUT_S = 30.0
#: Requests answered at once; one more is answered 503 with Retry-After before its body is read.
MAX_IN_FLIGHT = 256
#: The page's files (index.html, page.js, page.css), served at / and /page/.
PAGE_DIR = Path(__file__).with_name("page")
#: Content types of the page's files (.mjs and .wasm by name: a browser compiles WebAssembly as it streams only
#: when it is served as application/wasm).
_MEDIA_TYPES = {".html": "text/html", ".css": "text/css", ".js": "text/javascript", ".mjs": "text/javascript",
                ".wasm": "application/wasm", ".json": "application/json", ".png": "image/png"}
#: A client's own request id is kept where it is this plain (else one is made): it goes into a header and the log.
_CLIENT_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
#: The error answers every API route documents (their body: ErrorBody).
_ERRORS = ((400, "a body the API does not take (form or meaning), or not an image"), (404, "unknown or evicted id"),
           (413, "a body over the limit"), (503, "busy: retry after Retry-After seconds"))
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
    """Pure ASGI middleware in front of every route (module docstring): ids, CORS, bounded bodies, logs, metrics."""

    def __init__(self, app: Any, service: Service, cors_origins: tuple[str, ...] = ()):
        self.app, self.service, self.cors_origins = app, service, tuple(cors_origins)

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        rid = request_id(headers.get("x-request-id"))
        scope.setdefault("state", {})["request_id"] = rid
        extra = {"x-request-id": rid, **self._cors(headers.get("origin"))}
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
            answer = self._preflight(scope["method"], headers) or self._busy(in_flight)
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

    def _cors(self, origin: str | None) -> dict[str, str]:
        """What lets a page of an allowed origin read the answer (none for another origin, or without --cors-origin)."""
        if not origin or not (origin in self.cors_origins or "*" in self.cors_origins):
            return {}
        return {"access-control-allow-origin": "*" if "*" in self.cors_origins else origin, "vary": "Origin",
                "access-control-expose-headers": "X-Request-Id, Retry-After, Server-Timing"}

    def _preflight(self, method: str, headers: dict[str, str]) -> tuple[int, list, bytes] | None:
        """A browser's CORS preflight: 204 with what an allowed origin may send, 403 for another origin."""
        if method != "OPTIONS" or not self.cors_origins or "access-control-request-method" not in headers:
            return None
        if not self._cors(headers.get("origin")):
            return _json_answer(403, {"error": f"origin {printable(headers.get('origin', '(none)'), 80)} is not "
                                               "allowed: start serve with --cors-origin for it"})
        return 204, [(b"access-control-allow-methods", b"GET, POST"),
                     (b"access-control-allow-headers", b"Content-Type, X-Request-Id"),
                     (b"access-control-max-age", b"600")], b""

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


def _guarded(fn: Callable) -> Callable:
    """An endpoint (sync or async) whose unexpected failures are logged here and answered 500 without details (an
    InputError raised below the routes is a 400: something about what was sent)."""

    def translated(exc: Exception) -> ApiError:
        if isinstance(exc, ApiError):
            return exc
        if isinstance(exc, InputError):
            return ApiError(400, str(exc))
        LOG.exception("%s failed", fn.__name__)  # a bug or a failed runtime: the client learns only that it happened
        return ApiError(500, "internal error while answering this request (logged on the server)")

    if asyncio.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def guarded_async(*args: Any, **kwargs: Any) -> Any:
            try:
                return await fn(*args, **kwargs)
            except Exception as exc:
                raise translated(exc) from exc

        return guarded_async

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            raise translated(exc) from exc

    return guarded


def build_api(service: Service, *, cors_origins: tuple[str, ...] | list[str] = (), title: str = "vitdeploy SAM") -> FrontDoor:
    """The FastAPI application answering for ``service`` (a :class:`~vitdeploy.runtime.apps.serving.service.SamService`
    or the Ray Serve front's proxy of one), wrapped in :class:`FrontDoor`."""
    from vitdeploy import __version__

    swagger = PAGE_DIR / "swagger"
    offline_docs = (swagger / "swagger-ui-bundle.js").is_file() and (swagger / "swagger-ui.css").is_file()
    app = FastAPI(title=title, version=__version__, docs_url=None if offline_docs else "/docs", redoc_url=None,
                  description="Encode an image once, answer prompts from its cached embedding. Errors are JSON "
                              "{\"error\": one line}; every answer carries X-Request-Id.")
    errors = {status: {"model": schemas.ErrorBody, "description": text} for status, text in _ERRORS}
    # What the page needs to decode in the browser: asked once (on Ray, of a decoder replica), and offered only where
    # onnxruntime-web is in the package (scripts/fetch_page_assets.py puts it there)
    decoder_facts = functools.cache(service.browser_decoder)
    offline_ort = (PAGE_DIR / "ort" / "ort.wasm.min.js").is_file()

    @app.exception_handler(ApiError)
    async def api_error(_request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse({"error": exc.message}, exc.status, exc.headers)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        if exc.status_code == 405:
            allowed = (exc.headers or {}).get("Allow", "")
            message = f"this endpoint takes {allowed}, not {request.method}"
        elif exc.status_code == 404:
            message = (f"no such endpoint {request.method} {printable(request.url.path, 80)}: see /docs "
                       "(/v1/embeddings, /v1/embeddings/ID/masks, /v1/embeddings/ID/concepts, /healthz, /metrics)")
        else:
            message = str(exc.detail)
        return JSONResponse({"error": message}, exc.status_code, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"error": validation_message(exc.errors())}, 400)

    if offline_docs:  # Swagger UI from the package (scripts/fetch_page_assets.py), not from FastAPI's CDN
        @app.get("/docs", include_in_schema=False, name="docs")
        def docs() -> Any:
            from fastapi.openapi.docs import get_swagger_ui_html

            return get_swagger_ui_html(openapi_url="openapi.json", title=f"{title} API",
                                       swagger_js_url="page/swagger/swagger-ui-bundle.js",
                                       swagger_css_url="page/swagger/swagger-ui.css",
                                       swagger_favicon_url="page/swagger/favicon-32x32.png")

    @app.get("/", include_in_schema=False, name="page")
    def page() -> Any:
        return FileResponse(PAGE_DIR / "index.html", media_type="text/html")

    @app.get("/page/{name:path}", include_in_schema=False, name="page")
    def page_file(name: str) -> Any:
        path = (PAGE_DIR / name).resolve()
        if not path.is_relative_to(PAGE_DIR.resolve()) or not path.is_file():
            raise ApiError(404, f"the page has no file '{printable(name, 60)}'")
        return FileResponse(path, media_type=_MEDIA_TYPES.get(path.suffix, "application/octet-stream"))

    @app.get("/healthz", response_model=schemas.Health, name="healthz", summary="the service is up; its models")
    @_guarded
    def healthz() -> Any:
        facts = decoder_facts() if offline_ort else None
        browser = None if facts is None else {**{k: v for k, v in facts.items() if k != "path"},
                                              "url": "v1/models/decoder.onnx", "runtime": "ort/"}
        return _answer({**service.health(), "browser_decoder": browser})

    @app.get("/metrics", response_class=PlainTextResponse, name="metrics", summary="Prometheus metrics")
    @_guarded
    def metrics() -> Any:
        return PlainTextResponse(service.metrics_text(), media_type=content_type())

    @app.post("/v1/embeddings", response_model=schemas.EmbeddingCreated, responses=errors, name="embeddings",
              summary="encode an image (its embedding is cached by id)", openapi_extra={"requestBody": {
                  "required": True, "content": {
                      "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
                      "image/*": {"schema": {"type": "string", "format": "binary"}},
                      "application/json": {"schema": {"$ref": _ref("ImageUpload")}}}}})
    @_guarded
    async def embeddings(request: Request) -> Any:
        data = _image_bytes(await request.body(), request.headers.get("content-type", ""))
        return _answer(await run_in_threadpool(service.encode, data))

    @app.get("/v1/models/decoder.onnx", name="decoder_file", summary="the decoder file (for a page that decodes "
             "in the browser)", responses={200: {"content": {"application/octet-stream": {}}}, 404: errors[404]})
    @_guarded
    def decoder_file() -> Any:
        facts = decoder_facts()
        if facts is None:
            raise ApiError(404, "this server's decoder is not one .onnx file: decode on the server")
        return FileResponse(facts["path"], media_type="application/octet-stream", filename="decoder.onnx")

    @app.get("/v1/embeddings/{key}/embedding", name="embedding_tensor", responses={
        200: {"content": {"application/octet-stream": {}},
              "description": "float32 little-endian; its shape in X-Embedding-Shape, the image's in X-Image-Size"},
        404: errors[404]}, summary="the cached embedding itself (for a page that decodes in the browser)")
    @_guarded
    def embedding_tensor(key: str) -> Any:
        item = service.embedding(key)
        if len(item.features) != 1:
            raise ApiError(404, "this model's image features are several arrays (SAM 2, SAM 3): its masks are decoded "
                                "on the server (POST /v1/embeddings/ID/masks)")
        (embedding,) = item.features.values()
        data = np.ascontiguousarray(embedding, dtype="<f4")
        return Response(data.tobytes(), media_type="application/octet-stream", headers={
            "X-Embedding-Shape": ",".join(str(d) for d in data.shape),
            "X-Image-Size": f"{item.size[0]},{item.size[1]}"})

    @app.get("/v1/embeddings/{key}", response_model=schemas.EmbeddingInfo, responses=errors, name="embedding",
             summary="whether an embedding is cached")
    @_guarded
    def embedding(key: str) -> Any:
        return _answer(service.info(key))

    @app.post("/v1/embeddings/{key}/masks", response_model=schemas.MasksAnswer, responses=errors, name="masks",
              summary="masks for prompts on a cached embedding", openapi_extra={"requestBody": {
                  "required": True, "content": {"application/json": {"schema": {"$ref": _ref("MasksRequest")}}}}})
    @_guarded
    async def masks(key: str, request: Request) -> Any:
        # The body is JSON whatever its Content-Type says (curl -d sends a form's): read here, not by FastAPI
        prompts = parse_prompts(_validated(schemas.MasksRequest, await request.body()).as_dicts())
        return _answer(await run_in_threadpool(service.masks, key, prompts))

    @app.post("/v1/embeddings/{key}/concepts", response_model=schemas.ConceptAnswer, responses=errors, name="concepts",
              summary="every instance of a concept (SAM 3: text and/or exemplar boxes) in a cached image",
              openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
                  "schema": {"$ref": _ref("ConceptRequest")}}}}})
    @_guarded
    async def concepts(key: str, request: Request) -> Any:
        prompt, threshold = parse_concept(_validated(schemas.ConceptRequest, await request.body()).as_dicts())
        return _answer(await run_in_threadpool(service.concepts, key, prompt, threshold))

    app.openapi()  # built once here: a schema the models cannot describe fails at start, not at the first /docs
    _add_schemas(app.openapi_schema, schemas.MasksRequest, schemas.ConceptRequest, schemas.ImageUpload)
    return FrontDoor(app, service, tuple(cors_origins))


def _answer(data: dict[str, Any]) -> Any:
    """A 200 answer as JSON, as the service made it: FastAPI does not validate it against the route's response model
    again (that cost 4 ms a prompt, 20% of a tiny model's; the tests check the answers against /openapi.json)."""
    return JSONResponse(data)


def _ref(name: str) -> str:
    return f"#/components/schemas/{name}"


def _add_schemas(openapi: dict[str, Any], *models: Any) -> None:
    """The request models read by the routes themselves (not by FastAPI) into the schema's components."""
    components = openapi.setdefault("components", {}).setdefault("schemas", {})
    for model in models:
        schema = model.model_json_schema(ref_template=_ref("{model}"))
        components.update(schema.pop("$defs", {}))
        components[model.__name__] = schema


def _validated(model: Any, body: bytes) -> Any:
    """``model`` from a JSON body; ApiError 400 in one line when the body is not JSON or not of its form."""
    from pydantic import ValidationError

    try:
        return model.model_validate_json(body or b"null")
    except ValidationError as exc:
        hint = getattr(model, "fields_hint", schemas.MasksRequest.fields_hint)  # ImageUpload's: said around it
        raise ApiError(400, validation_message(exc.errors(), hint)) from None


def _image_bytes(body: bytes, content_type: str) -> bytes:
    """The image file's bytes of an upload: the body itself, or the base64 of a JSON upload
    (:class:`~vitdeploy.runtime.apps.serving.schemas.ImageUpload`)."""
    import base64
    import binascii

    if content_type.split(";")[0].strip().lower() != "application/json":
        return body
    try:
        text = _validated(schemas.ImageUpload, body).image
    except ApiError as exc:
        raise ApiError(400, f"a JSON upload must be {{\"image\": \"<base64 of the image file>\"}}: {exc.message}") from None
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ApiError(400, "'image' is not valid base64: encode the image file's bytes") from exc


def validation_message(errors: list[dict[str, Any]], fields_hint: str = schemas.MasksRequest.fields_hint) -> str:
    """Pydantic's errors in one line: where the first is (``prompts[1].box``), what it says, and how many more;
    ``fields_hint``: what an unknown field's answer says the request has (its model's ``fields_hint``)."""
    first = errors[0]
    where, loc = "", tuple(first.get("loc", ()))
    for part in loc[1:] if loc[:1] == ("body",) else loc:
        where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
    message = first.get("msg", "invalid")
    if first.get("type") == "extra_forbidden":
        message = f"unknown field: {fields_hint}"
    elif first.get("type") == "json_invalid":
        message = f"the body is not JSON ({first.get('ctx', {}).get('error', 'invalid')}): send JSON"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {message}{more}" if where else f"{message}{more}"


__all__ = ["BODY_TIMEOUT_S", "FrontDoor", "MAX_BODY_BYTES", "PAGE_DIR", "build_api", "printable", "request_id",
           "validation_message"]
