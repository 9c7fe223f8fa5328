"""The SAM service as one FastAPI application: what Uvicorn serves in one process and Ray Serve's ingress serves.

    GET  /                              the page: open an image, click, see the mask (serving/page/)
    GET  /web/                          the same page with the whole model in the browser (vitdeploy web's site)
    POST /v1/embeddings                 the image file's bytes (or JSON {"image": base64}) -> EmbeddingCreated
    GET  /v1/embeddings/{id}            -> EmbeddingInfo (404: never sent, or evicted)
    POST /v1/embeddings/{id}/masks      MasksRequest (one prompt, or {"prompts": [...]}) -> MasksAnswer
    POST /v1/embeddings/{id}/concepts   ConceptRequest (SAM 3: a text and/or exemplar boxes) -> ConceptAnswer
    GET  /healthz                       -> Health
    GET  /metrics                       Prometheus text (serving/metrics.py)
    GET  /openapi.json, /docs           the schema of all of the above, and its page (Swagger UI)

In FastAPI's documented form: each route takes its body as a typed parameter (the Pydantic models of
:mod:`~vitdeploy.runtime.apps.serving.schemas`, parsed once; a prompt's body is JSON whatever its Content-Type says,
:class:`JsonBodyRoute`), gets the service by a dependency (:func:`service_of`) and calls one service method, which
raises domain errors; one exception handler maps them to statuses (:data:`STATUSES`: an InputError 400,
``NotFound`` 404, an image over the pixel limit 413, ``Busy`` 503 with ``Retry-After``; anything unexpected, seen by every route's :func:`guarded`, a
500 that says only that it happened, its traceback in the server's log). Starlette's CORS middleware answers for ``--cors-origin`` (:class:`Cors`). Every
request passes :class:`~vitdeploy.runtime.apps.serving.front_door.FrontDoor` first (ids, bounded bodies, logs,
metrics). Errors are JSON ``{"error": one line}``.
"""

from __future__ import annotations

import base64
import binascii
import functools
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware

from vitdeploy.errors import InputError, VitdeployError
from vitdeploy.runtime.apps.serving import schemas
from vitdeploy.runtime.apps.serving.front_door import (BODY_TIMEOUT_S, MAX_BODY_BYTES, FrontDoor, printable,
                                                       request_id)
from vitdeploy.runtime.apps.serving.metrics import content_type
from vitdeploy.runtime.apps.serving.service import Busy, NotFound, Service
from vitdeploy.runtime.processing.images import ImageTooLarge

LOG = logging.getLogger("vitdeploy.serve")
#: The page's files (index.html, page.js, page.css), served at / and /page/.
PAGE_DIR = Path(__file__).with_name("page")
#: Content types of the page's files (.mjs and .wasm by name: a browser compiles WebAssembly as it streams only
#: when it is served as application/wasm).
_MEDIA_TYPES = {".html": "text/html", ".css": "text/css", ".js": "text/javascript", ".mjs": "text/javascript",
                ".wasm": "application/wasm", ".json": "application/json", ".png": "image/png"}
#: The error answers every API route documents (their body: ErrorBody).
_ERRORS = ((400, "a body the API does not take (form or meaning), or not an image"), (404, "unknown or evicted id"),
           (413, "a body, or an image's pixels, over the limit (/healthz: limits)"),
           (503, "busy: retry after Retry-After seconds"))
#: The error answers as the routes document them.
ERRORS = {status: {"model": schemas.ErrorBody, "description": text} for status, text in _ERRORS}


def _ref(name: str) -> str:
    return f"#/components/schemas/{name}"


class Internal(VitdeployError):
    """Something went wrong in the server (a bug, a failed runtime): the client learns only that it happened."""


#: Domain error -> status, first match wins: the one mapping of the service's errors to HTTP.
STATUSES: tuple[tuple[type[Exception], int], ...] = ((NotFound, 404), (Busy, 503), (ImageTooLarge, 413),
                                                    (InputError, 400))


def guarded(request: Request) -> Iterator[None]:
    """Every route's guard (a router dependency with ``yield``, FastAPI's documented way to see what a route raised):
    a domain error goes on to the handler; anything else is logged here with its traceback and answered as
    :class:`Internal`."""
    try:
        yield
    except (InputError, Busy, HTTPException, RequestValidationError):
        raise
    except Exception as exc:
        route = request.scope.get("route")
        LOG.exception("%s failed", getattr(route, "name", "a route"))
        raise Internal("internal error while answering this request (logged on the server)") from exc


def service_of(request: Request) -> Service:
    """The application's service, for a route (a dependency)."""
    return request.app.state.service


class JsonBodyRoute(APIRoute):
    """A route whose body is JSON whatever its Content-Type says (``curl -d`` sends a form's): FastAPI's documented
    custom route class, handing its handler a request that says JSON."""

    def get_route_handler(self) -> Callable:
        handler = super().get_route_handler()

        async def as_json(request: Request) -> Response:
            headers = [(k, v) for k, v in request.scope["headers"] if k != b"content-type"]
            scope = {**request.scope, "headers": [*headers, (b"content-type", b"application/json")]}
            return await handler(Request(scope, request.receive))

        return as_json


class Cors(CORSMiddleware):
    """Starlette's CORS middleware (``--cors-origin``), its preflight answers in the API's form: 204 with what an
    allowed origin may send, 403 with the JSON error for another origin (Starlette's own: 200 "OK", 400 text)."""

    def preflight_response(self, request_headers: Any) -> Response:
        answer = super().preflight_response(request_headers)
        headers = {k: v for k, v in answer.headers.items() if k not in ("content-length", "content-type")}
        if answer.status_code == 200:
            return Response(status_code=204, headers=headers)
        origin = printable(request_headers.get("origin", "(none)"), 80)
        return JSONResponse({"error": f"origin {origin} is not allowed: start serve with --cors-origin for it"}, 403,
                            headers=headers)


Uses = Depends(service_of)
router = APIRouter(dependencies=[Depends(guarded)])
prompts = APIRouter(route_class=JsonBodyRoute, dependencies=[Depends(guarded)])


def build_api(service: Service, *, cors_origins: tuple[str, ...] | list[str] = (), title: str = "vitdeploy SAM") -> FrontDoor:
    """The FastAPI application answering for ``service`` (a :class:`~vitdeploy.runtime.apps.serving.service.SamService`
    or the Ray Serve front's proxy of one), wrapped in :class:`~vitdeploy.runtime.apps.serving.front_door.FrontDoor`."""
    from vitdeploy import __version__

    swagger = PAGE_DIR / "swagger"
    offline_docs = (swagger / "swagger-ui-bundle.js").is_file() and (swagger / "swagger-ui.css").is_file()
    app = FastAPI(title=title, version=__version__, docs_url=None if offline_docs else "/docs", redoc_url=None,
                  description="Encode an image once, answer prompts from its cached embedding. Errors are JSON "
                              "{\"error\": one line}; every answer carries X-Request-Id.")
    app.state.service = service
    # What the page needs to decode in the browser: asked once (on Ray, of a decoder replica), and offered only where
    # onnxruntime-web is in the package (scripts/fetch_page_assets.py puts it there)
    app.state.decoder_facts = functools.cache(service.browser_decoder)
    # What the /web/ page needs to run the whole model in the browser (None: it cannot; asked once)
    app.state.page_model = functools.cache(service.page_model)
    app.state.offline_ort = (PAGE_DIR / "ort" / "ort.wasm.min.js").is_file()
    app.state.title = title
    _handle_errors(app)
    if offline_docs:  # Swagger UI from the package (scripts/fetch_page_assets.py), not from FastAPI's CDN
        app.add_api_route("/docs", _swagger, include_in_schema=False, name="docs")
    app.include_router(router)
    app.include_router(prompts)
    if cors_origins:
        app.add_middleware(Cors, allow_origins=list(cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["Content-Type", "X-Request-Id"], max_age=600,
                           expose_headers=["X-Request-Id", "Retry-After", "Server-Timing"])
    app.openapi()  # built once here: a schema the models cannot describe fails at start, not at the first /docs
    _add_schemas(app.openapi_schema, schemas.ImageUpload)
    return FrontDoor(app, service)


def _handle_errors(app: FastAPI) -> None:
    """The one mapping of errors to answers: the domain's (:data:`STATUSES`), the routing's (404, 405), the form's."""

    @app.exception_handler(VitdeployError)
    async def domain_error(_request: Request, exc: VitdeployError) -> JSONResponse:
        status = next((code for kind, code in STATUSES if isinstance(exc, kind)), 500)
        headers = {"Retry-After": str(exc.retry_after)} if isinstance(exc, Busy) else None
        return JSONResponse({"error": str(exc)}, status, headers)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        if exc.status_code == 405:
            allowed = (exc.headers or {}).get("Allow", "")
            message = f"this endpoint takes {allowed}, not {request.scope['state'].get('method', request.method)}"
        elif exc.status_code == 404:
            message = (f"no such endpoint {request.scope['state'].get('method', request.method)} "
                       f"{printable(request.url.path, 80)}: see /docs "
                       "(/v1/embeddings, /v1/embeddings/ID/masks, /v1/embeddings/ID/concepts, /healthz, /metrics)")
        else:
            message = str(exc.detail)
        return JSONResponse({"error": message}, exc.status_code, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        route = request.scope.get("route")
        hint = _FIELDS_HINTS.get(getattr(route, "name", ""), schemas.MasksRequest.fields_hint)
        return JSONResponse({"error": validation_message(exc.errors(), hint)}, 400)


#: The largest finite float64: a JSON integer past it is no number a prompt can hold.
_LARGEST_FLOAT = float(np.finfo(np.float64).max)
#: What an unknown field's answer says a route's body has.
_FIELDS_HINTS = {"masks": schemas.MasksRequest.fields_hint, "concepts": schemas.ConceptRequest.fields_hint}


def _swagger(request: Request) -> Any:
    from fastapi.openapi.docs import get_swagger_ui_html

    return get_swagger_ui_html(openapi_url="openapi.json", title=f"{request.app.state.title} API",
                               swagger_js_url="page/swagger/swagger-ui-bundle.js",
                               swagger_css_url="page/swagger/swagger-ui.css",
                               swagger_favicon_url="page/swagger/favicon-32x32.png")


# --- the routes --------------------------------------------------------------------------------------

@router.get("/", include_in_schema=False, name="page")
def page() -> Any:
    return FileResponse(PAGE_DIR / "index.html", media_type="text/html")


@router.get("/page/{name:path}", include_in_schema=False, name="page")
def page_file(name: str) -> Any:
    path = (PAGE_DIR / name).resolve()
    if not path.is_relative_to(PAGE_DIR.resolve()) or not path.is_file():
        raise NotFound(f"the page has no file '{printable(name, 60)}'")
    return FileResponse(path, media_type=_MEDIA_TYPES.get(path.suffix, "application/octet-stream"))


def _page_model(request: Request) -> dict[str, Any]:
    facts = request.app.state.page_model() if request.app.state.offline_ort else None
    if facts is None:
        raise NotFound("this server cannot offer its model to the browser (a file that is not one .onnx file, a Ray "
                       "deployment, or no onnxruntime-web in the package): use the page at /")
    return facts


@router.get("/web", include_in_schema=False, name="web_redirect")
def web_redirect() -> Any:
    return RedirectResponse("web/", status_code=307)


@router.get("/web/", include_in_schema=False, name="web_page")
def web_page(request: Request) -> Any:
    """The page in its site mode (``vitdeploy web``'s): the image encoded and the clicks decoded in the browser."""
    from vitdeploy.runtime.apps.serving.site import ISOLATION_HEADERS, site_page_html

    _page_model(request)
    return HTMLResponse(site_page_html(), headers=ISOLATION_HEADERS)


@router.get("/web/site.json", include_in_schema=False, name="web_site")
def web_site(request: Request) -> Any:
    return _answer({k: v for k, v in _page_model(request).items() if k != "paths"})


@router.get("/web/page/{name:path}", include_in_schema=False, name="web_page_file")
def web_page_file(name: str) -> Any:
    from vitdeploy.runtime.apps.serving.site import ISOLATION_HEADERS

    answer = page_file(name)  # onnxruntime-web's thread workers must be as isolated as the page that starts them
    answer.headers.update(ISOLATION_HEADERS)
    return answer


@router.get("/web/coi_worker.js", include_in_schema=False, name="web_worker")
def web_worker() -> Any:
    return FileResponse(PAGE_DIR / "coi_worker.js", media_type="text/javascript")


@router.get("/v1/models/encoder.onnx", name="encoder_file", summary="the encoder file (for the /web/ page, which "
            "encodes in the browser)", responses={200: {"content": {"application/octet-stream": {}}}, 404: ERRORS[404]})
def encoder_file(request: Request) -> Any:
    return FileResponse(_page_model(request)["paths"]["encoder"], media_type="application/octet-stream",
                        filename="encoder.onnx")


@router.get("/healthz", response_model=schemas.Health, name="healthz", summary="the service is up; its models")
def healthz(request: Request, service: Service = Uses) -> Any:
    facts = request.app.state.decoder_facts() if request.app.state.offline_ort else None
    browser = None if facts is None else {**{k: v for k, v in facts.items() if k != "path"},
                                          "url": "v1/models/decoder.onnx", "runtime": "ort/"}
    health = service.health()
    if "limits" in health:  # the body limit is the transport's (FrontDoor)
        health["limits"] = {"max_body_bytes": MAX_BODY_BYTES, **health["limits"]}
    web = "web/" if request.app.state.offline_ort and request.app.state.page_model() is not None else None
    return _answer({**health, "browser_decoder": browser, "web_page": web})


@router.get("/metrics", response_class=PlainTextResponse, name="metrics", summary="Prometheus metrics")
def metrics(service: Service = Uses) -> Any:
    return PlainTextResponse(service.metrics_text(), media_type=content_type())


@router.post("/v1/embeddings", response_model=schemas.EmbeddingCreated, responses=ERRORS, name="embeddings",
             summary="encode an image (its embedding is cached by id)", openapi_extra={"requestBody": {
                 "required": True, "content": {
                     "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
                     "image/*": {"schema": {"type": "string", "format": "binary"}},
                     "application/json": {"schema": {"$ref": _ref("ImageUpload")}}}}})
async def embeddings(request: Request, service: Service = Uses) -> Any:
    # the image file's bytes as the body (any Content-Type), or JSON {"image": base64}: read here, by its type
    data = _image_bytes(await request.body(), request.headers.get("content-type", ""))
    return _answer(await run_in_threadpool(service.encode, data))


@router.get("/v1/models/decoder.onnx", name="decoder_file", summary="the decoder file (for a page that decodes "
            "in the browser)", responses={200: {"content": {"application/octet-stream": {}}}, 404: ERRORS[404]})
def decoder_file(request: Request, service: Service = Uses) -> Any:
    facts = request.app.state.decoder_facts()
    page = request.app.state.page_model() if facts is None else None  # SAM 2's and SAM 3's decoders: the /web/ page's
    if facts is None and page is None:
        raise NotFound("this server's decoder is not one .onnx file: decode on the server")
    path = facts["path"] if facts is not None else page["paths"]["decoder"]
    return FileResponse(path, media_type="application/octet-stream", filename="decoder.onnx")


@router.get("/v1/embeddings/{key}/embedding", name="embedding_tensor", responses={
    200: {"content": {"application/octet-stream": {}},
          "description": "float32 little-endian; its shape in X-Embedding-Shape, the image's in X-Image-Size"},
    404: ERRORS[404]}, summary="the cached embedding itself, or one feature array (for a page that decodes in the "
    "browser)")
def embedding_tensor(key: str, feature: str | None = None, service: Service = Uses) -> Any:
    """The embedding, or with ``?feature=NAME`` one of the image's feature arrays (SAM 2 and SAM 3 have three:
    ``image_embed``, ``high_res_feats_0``, ``high_res_feats_1``)."""
    item = service.embedding(key)
    names = list(item.features)
    if feature is None and len(names) != 1:
        raise NotFound(f"this model's image features are several arrays ({', '.join(names)}): ask for one with "
                       "?feature=NAME")
    if feature is not None and feature not in item.features:
        raise NotFound(f"this model's image has no feature '{printable(feature, 40)}': it has {', '.join(names)}")
    data = np.ascontiguousarray(item.features[feature or names[0]], dtype="<f4")
    return Response(data.tobytes(), media_type="application/octet-stream", headers={
        "X-Embedding-Shape": ",".join(str(d) for d in data.shape), "X-Image-Size": f"{item.size[0]},{item.size[1]}"})


@router.get("/v1/embeddings/{key}", response_model=schemas.EmbeddingInfo, responses=ERRORS, name="embedding",
            summary="whether an embedding is cached")
def embedding(key: str, service: Service = Uses) -> Any:
    return _answer(service.info(key))


@prompts.post("/v1/embeddings/{key}/masks", response_model=schemas.MasksAnswer, responses=ERRORS, name="masks",
              summary="masks for prompts on a cached embedding")
def masks(key: str, body: schemas.MasksRequest, service: Service = Uses) -> Any:
    return _answer(service.masks(key, body.prompt_requests()))


@prompts.post("/v1/embeddings/{key}/concepts", response_model=schemas.ConceptAnswer, responses=ERRORS,
              name="concepts", summary="every instance of a concept (SAM 3: text and/or exemplar boxes) in a cached image")
def concepts(key: str, body: schemas.ConceptRequest, service: Service = Uses) -> Any:
    prompt, threshold = body.concept()
    return _answer(service.concepts(key, prompt, threshold))


# --- helpers -----------------------------------------------------------------------------------------

def _answer(data: dict[str, Any]) -> Any:
    """A 200 answer as JSON, as the service made it: FastAPI does not validate it against the route's response model
    again (that cost 4 ms a prompt, 20% of a tiny model's; the tests check the answers against /openapi.json)."""
    return JSONResponse(data)


def _add_schemas(openapi: dict[str, Any], *models: Any) -> None:
    """The request models read by the routes themselves (not by FastAPI) into the schema's components."""
    components = openapi.setdefault("components", {}).setdefault("schemas", {})
    for model in models:
        schema = model.model_json_schema(ref_template=_ref("{model}"))
        components.update(schema.pop("$defs", {}))
        components[model.__name__] = schema


def _image_bytes(body: bytes, content_type_value: str) -> bytes:
    """The image file's bytes of an upload: the body itself, or the base64 of a JSON upload
    (:class:`~vitdeploy.runtime.apps.serving.schemas.ImageUpload`)."""
    from pydantic import ValidationError

    if content_type_value.split(";")[0].strip().lower() != "application/json":
        return body
    try:
        text = schemas.ImageUpload.model_validate_json(body or b"null").image
    except ValidationError as exc:
        raise InputError(f"a JSON upload must be {{\"image\": \"<base64 of the image file>\"}}: "
                         f"{validation_message(exc.errors(), 'an upload has image')}") from None
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InputError("'image' is not valid base64: encode the image file's bytes") from exc


def validation_message(errors: list[dict[str, Any]], fields_hint: str = schemas.MasksRequest.fields_hint) -> str:
    """Pydantic's errors in one line: where the first is (``prompts[1].box``), what it says, and how many more;
    ``fields_hint``: what an unknown field's answer says the request has (its model's ``fields_hint``)."""
    first = errors[0]
    where, loc = "", tuple(first.get("loc", ()))
    kind = first.get("type")
    for part in loc[1:] if loc[:1] == ("body",) else loc:
        where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
    message = first.get("msg", "invalid")
    if kind == "extra_forbidden":
        message = f"unknown field: {fields_hint}"
    elif kind == "json_invalid":
        where, message = "", f"the body is not JSON ({first.get('ctx', {}).get('error', 'invalid')}): send JSON"
    elif kind == "missing" and loc == ("body",):
        message = "the body is empty: send JSON"
    elif isinstance(first.get("input"), int) and abs(first["input"]) > _LARGEST_FLOAT:  # a huge integer in the JSON
        message = "holds a value that is not a finite number"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {message}{more}" if where else f"{message}{more}"


__all__ = ["BODY_TIMEOUT_S", "Cors", "ERRORS", "FrontDoor", "Internal", "JsonBodyRoute", "MAX_BODY_BYTES", "PAGE_DIR",
           "STATUSES", "build_api", "guarded", "printable", "request_id", "service_of", "validation_message"]
