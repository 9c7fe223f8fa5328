"""The SAM prompt service behind ``vitdeploy serve``: encode an image once, answer prompts from its cached embedding.

This is how annotation front ends (CVAT, Label Studio) host SAM: the encoder runs once per image on the
server (seconds on a CPU), every click after that is a decoder call on the cached embedding (milliseconds).
The service is transport-free; :mod:`vitdeploy.runtime.apps.serving.http_server` puts it behind HTTP in one process,
:mod:`vitdeploy.runtime.apps.serving.ray_serve` behind Ray Serve. Both route requests with :func:`handle_request`, so
the API and its errors are the same:

    POST /v1/embeddings                 body: the image file's bytes (or JSON {"image": base64})
                                        -> {"id", "height", "width", "cached"}
    GET  /v1/embeddings/{id}            -> {"id", "height", "width"} (404: not cached, or evicted)
    POST /v1/embeddings/{id}/masks      body: one prompt {"points": [[x, y], ...], "labels": [1, 0, ...],
                                        "box": [x0, y0, x1, y1], "multimask_output": true} or a batch
                                        {"prompts": [prompt, ...]} (pixels of the original image)
                                        -> {"id", "results": [{"masks": [COCO RLE], "scores": [...], "areas": [...]}]}
    GET  /healthz                       -> {"status": "ok", ...}
    GET  /metrics                       Prometheus text: requests by route and status, latency histograms,
                                        encoder runs, cache hits and size, encodes in flight

An embedding id is the SHA-256 of the image's bytes and of the encoder file: the same upload gets the same id
(and a cache hit, no encoder run), and an id never names another model's embedding. Errors are JSON
``{"error": message}`` with a 4xx status naming what to fix (not an image, unknown id, a prompt outside the
image, a malformed prompt, a body too large); 503 with ``Retry-After`` when ``max_pending`` images are being
encoded already (the caller retries; nothing queues without bound); an unexpected failure is a 500 whose
body says only that (the traceback goes to the server's log, never to the client).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from vitdeploy.errors import InputError

if TYPE_CHECKING:  # the loader is imported when a service opens its files
    from vitdeploy.runtime.backends.loader import OpenOptions

LOG = logging.getLogger("vitdeploy.serve")
#: The most prompts one masks request may carry (each is a decoder run).
MAX_PROMPTS = 64
#: The largest request body taken (an image upload); larger ones are answered 413.
MAX_BODY_BYTES = 64 << 20
#: Seconds a 503 asks the caller to wait before retrying.
RETRY_AFTER_S = 1
#: Latency histogram buckets (seconds) of /metrics.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ApiError(Exception):
    """An answer other than 200: its HTTP status and a one-line message for the client."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}

    def __reduce__(self) -> tuple:  # pickled whole: a replica's ApiError reaches the front with its status
        return (ApiError, (self.status, self.message, self.headers))


@dataclass
class Cached:
    """One cached embedding: (1, C, h, w) float32 and the original image's (H, W)."""

    embedding: np.ndarray
    size: tuple[int, int]


class EmbeddingCache:
    """Least-recently-used embeddings by id, thread-safe (ViT-B: 4 MiB each)."""

    def __init__(self, capacity: int):
        if capacity < 1:
            raise InputError(f"the embedding cache must hold at least 1 embedding, got {capacity}")
        self.capacity = capacity
        self._items: OrderedDict[str, Cached] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> Cached | None:
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                self._items.move_to_end(key)
            return item

    def put(self, key: str, item: Cached) -> None:
        with self._lock:
            self._items[key] = item
            self._items.move_to_end(key)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


@dataclass
class Metrics:
    """Counters and latency histograms, rendered as Prometheus text (thread-safe)."""

    counters: dict[tuple[str, tuple[tuple[str, str], ...]], float] = field(default_factory=dict)
    histograms: dict[str, list[float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, name: str, value: float = 1.0, **labels: str) -> None:
        key = (name, tuple(sorted(labels.items())))
        with self._lock:
            self.counters[key] = self.counters.get(key, 0.0) + value

    def observe(self, route: str, seconds: float) -> None:
        with self._lock:
            counts = self.histograms.setdefault(route, [0.0] * (len(BUCKETS) + 2))  # buckets, +Inf, sum
            for k, bound in enumerate(BUCKETS):
                if seconds <= bound:
                    counts[k] += 1
            counts[len(BUCKETS)] += 1
            counts[len(BUCKETS) + 1] += seconds

    def render(self, gauges: dict[str, float]) -> str:
        lines = []
        with self._lock:
            for (name, labels), value in sorted(self.counters.items()):
                shown = ",".join(f'{k}="{v}"' for k, v in labels)
                lines.append(f"vitdeploy_{name}{{{shown}}} {value:g}" if shown else f"vitdeploy_{name} {value:g}")
            for route, counts in sorted(self.histograms.items()):
                for k, bound in enumerate(BUCKETS):
                    lines.append(f'vitdeploy_request_seconds_bucket{{route="{route}",le="{bound:g}"}} {counts[k]:g}')
                lines.append(f'vitdeploy_request_seconds_bucket{{route="{route}",le="+Inf"}} {counts[len(BUCKETS)]:g}')
                lines.append(f'vitdeploy_request_seconds_count{{route="{route}"}} {counts[len(BUCKETS)]:g}')
                lines.append(f'vitdeploy_request_seconds_sum{{route="{route}"}} {counts[len(BUCKETS) + 1]:.6f}')
        lines += [f"vitdeploy_{name} {value:g}" for name, value in sorted(gauges.items())]
        return "\n".join(lines) + "\n"


# --- prompts ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PromptRequest:
    """One prompt, checked: (N, 2) points and (N,) labels (or None), a (4,) box (or None), multimask."""

    points: np.ndarray | None
    labels: np.ndarray | None
    box: np.ndarray | None
    multimask_output: bool


def parse_prompts(body: Any) -> list[PromptRequest]:
    """The prompts of a masks request (one, or ``{"prompts": [...]}``); ApiError 400 naming what is wrong."""
    if not isinstance(body, dict):
        raise ApiError(400, "the body must be a JSON object: {\"points\": [[x, y]], \"labels\": [1]} or {\"prompts\": [...]}")
    raw = body["prompts"] if "prompts" in body else [body]
    if not isinstance(raw, list) or not raw:
        raise ApiError(400, "'prompts' must be a non-empty list of prompts")
    if len(raw) > MAX_PROMPTS:
        raise ApiError(400, f"{len(raw)} prompts in one request; send at most {MAX_PROMPTS} (split the batch)")
    return [_parse_prompt(p, k if "prompts" in body else None) for k, p in enumerate(raw)]


def _parse_prompt(prompt: Any, index: int | None) -> PromptRequest:
    where = f"prompt {index}: " if index is not None else ""
    if not isinstance(prompt, dict):
        raise ApiError(400, f"{where}a prompt must be a JSON object with 'points'/'labels' and/or 'box'")
    unknown = sorted(set(prompt) - {"points", "labels", "box", "multimask_output"})
    if unknown:
        raise ApiError(400, f"{where}unknown field(s) {', '.join(unknown)}: a prompt has points, labels, box, multimask_output")
    points = labels = box = None
    if prompt.get("points") is not None:
        points = _numbers(prompt["points"], f"{where}'points'", (-1, 2))
        labels_raw = prompt.get("labels", [1] * len(points))
        labels = _numbers(labels_raw, f"{where}'labels'", (len(points),)).astype(np.int64)
        if not np.isin(labels, (0, 1)).all() or not np.array_equal(labels, np.asarray(labels_raw, dtype=float)):
            raise ApiError(400, f"{where}'labels' must be 1 (foreground) or 0 (background), one per point")
    elif prompt.get("labels") is not None:
        raise ApiError(400, f"{where}'labels' without 'points': give the points they label")
    if prompt.get("box") is not None:
        box = _numbers(prompt["box"], f"{where}'box'", (4,))
        if not (box[0] < box[2] and box[1] < box[3]):
            raise ApiError(400, f"{where}'box' must be [x0, y0, x1, y1] with x0 < x1 and y0 < y1, got {box.tolist()}")
    if points is None and box is None:
        raise ApiError(400, f"{where}give 'points' (with 'labels') and/or a 'box'")
    multimask = prompt.get("multimask_output", points is not None and len(points) == 1 and box is None)
    if not isinstance(multimask, bool):
        raise ApiError(400, f"{where}'multimask_output' must be true or false")
    return PromptRequest(points, labels, box, multimask)


def _numbers(value: Any, name: str, shape: tuple[int, ...]) -> np.ndarray:
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ApiError(400, f"{name} must hold numbers, got {json.dumps(value)[:60]}") from None
    if array.ndim != len(shape) or any(want not in (-1, got) for want, got in zip(shape, array.shape)) or array.size == 0:
        want = "x".join("N" if d == -1 else str(d) for d in shape)
        raise ApiError(400, f"{name} must be a {want} list, got shape {list(array.shape)}")
    if not np.isfinite(array).all():
        raise ApiError(400, f"{name} holds a value that is not a finite number")
    return array


def _check_inside(prompt: PromptRequest, size: tuple[int, int], index: int, batch: bool) -> None:
    height, width = size
    where = f"prompt {index}: " if batch else ""
    for name, xy in (("point", prompt.points), ("box corner", None if prompt.box is None else prompt.box.reshape(2, 2))):
        if xy is None:
            continue
        outside = (xy[:, 0] < 0) | (xy[:, 0] > width) | (xy[:, 1] < 0) | (xy[:, 1] > height)
        if outside.any():
            x, y = xy[np.flatnonzero(outside)[0]]
            raise ApiError(400, f"{where}{name} ({x:g}, {y:g}) lies outside the {width}x{height} image: "
                                "give pixels of the original image")


# --- the service ------------------------------------------------------------------------------------

class EncoderSide:
    """The image encoder of a service: an image file's bytes -> :class:`Cached`, one call at a time."""

    def __init__(self, encoder: Any):
        from vitdeploy.runtime.apps.sam.embeddings import SamEmbedder
        from vitdeploy.runtime.backends.deployment import model_digest

        self.embedder = SamEmbedder(encoder)
        self.name = _file_name(encoder)
        #: What embedding ids are salted with: the encoder file's SHA-256 (the runner's name for a Runner without a file).
        self.identity = model_digest(encoder.path) if getattr(encoder, "path", None) else encoder.name
        self._lock = threading.Lock()

    def embedding_id(self, data: bytes) -> str:
        return hashlib.sha256(self.identity.encode() + b"\0" + data).hexdigest()[:32]

    def encode(self, data: bytes) -> Cached:
        """The image decoded and encoded under one lock: one full-size decoded image exists at a time, however many
        requests wait (decoded outside it, three 8000x8000 PNGs of 186 KB at once took a server to 3.4 GB); the
        admission limit bounds the waiting ones, which hold only their compressed bytes."""
        from vitdeploy.runtime.processing.images import decode_image_bytes

        with self._lock:
            picture = _as_bad_request(decode_image_bytes, data)
            embedding, _ = self.embedder.embed(picture)
        return Cached(embedding, (int(picture.shape[0]), int(picture.shape[1])))


class DecoderSide:
    """The prompt encoder + mask decoder of a service: a cached embedding and prompts -> masks, one call at a time."""

    def __init__(self, decoder: Any, encoder_metadata: dict[str, Any]):
        from vitdeploy.runtime.apps.sam.predictor import SamPredictor

        self.predictor = SamPredictor.decoder_only(decoder, encoder_metadata)
        self.name = _file_name(decoder)
        self._lock = threading.Lock()

    def masks(self, item: Cached, prompts: list[PromptRequest]) -> list[dict[str, Any]]:
        """Masks (COCO RLE), scores and areas for each prompt (checked to lie inside the image)."""
        from vitdeploy.runtime.apps.sam.amg import coco_encode_rle, mask_to_rle

        for k, prompt in enumerate(prompts):
            _check_inside(prompt, item.size, k, len(prompts) > 1)
        results = []
        with self._lock:
            self.predictor.set_image_embedding(item.embedding, item.size)
            for prompt in prompts:
                masks, scores, _ = self.predictor.predict(prompt.points, prompt.labels, prompt.box,
                                                          multimask_output=prompt.multimask_output)
                results.append({"masks": [coco_encode_rle(mask_to_rle(m)) for m in masks],
                                "scores": [float(s) for s in scores], "areas": [int(m.sum()) for m in masks]})
        return results


class Admission:
    """At most ``limit`` encodes in flight (running or waiting for the encoder); one more is answered 503."""

    def __init__(self, limit: int, metrics: Metrics):
        if limit < 1:
            raise InputError(f"max_pending must be at least 1, got {limit}")
        self.limit, self.metrics = limit, metrics
        self.pending = 0
        self._lock = threading.Lock()

    def __enter__(self) -> Admission:
        with self._lock:
            if self.pending >= self.limit:
                self.metrics.count("rejected_total", reason="busy")
                raise ApiError(503, f"busy: {self.pending} image(s) are being encoded; retry in {RETRY_AFTER_S} s",
                               {"Retry-After": str(RETRY_AFTER_S)})
            self.pending += 1
        return self

    def __exit__(self, *exc: Any) -> None:
        with self._lock:
            self.pending -= 1


class SamService:
    """The service in one process: one loaded encoder and decoder, the embedding cache, admission control.

    Encoder and decoder run one call at a time each (each already uses every thread it was given), so a
    prompt is answered while another image is being encoded. ``max_pending``: images being encoded or
    waiting for the encoder; one more is answered 503.
    """

    def __init__(self, encoder: Any, decoder: Any, *, options: OpenOptions | None = None, runtime: str = "auto",
                 inference_precision: str | None = None, threads: int | None = None, device: str = "cpu",
                 cache_size: int = 64, max_pending: int = 4):
        from vitdeploy.runtime.backends.loader import OpenOptions, as_runner

        o = OpenOptions.of(options, device=device, threads=threads, runtime=runtime, inference_precision=inference_precision)
        enc = as_runner(encoder, o)
        dec = as_runner(decoder, o.for_part())
        self.metrics = Metrics()
        self.admission = Admission(max_pending, self.metrics)
        self.encoder, self.decoder = EncoderSide(enc), DecoderSide(dec, enc.metadata)
        self.runners = (enc, dec)
        self.cache = EmbeddingCache(cache_size)
        self.started = time.time()

    def encode(self, data: bytes) -> dict[str, Any]:
        """Cache the embedding of an image file's bytes; its id (a cached image is not encoded again)."""
        key = self.encoder.embedding_id(data)
        item = self.cache.get(key)
        if item is not None:
            self.metrics.count("cache_hits_total")
            return {"id": key, "height": item.size[0], "width": item.size[1], "cached": True}
        with self.admission:
            item = self.encoder.encode(data)
        self.metrics.count("encoder_runs_total")
        self.cache.put(key, item)
        return {"id": key, "height": item.size[0], "width": item.size[1], "cached": False}

    def info(self, key: str) -> dict[str, Any]:
        item = self._cached(key)
        return {"id": key, "height": item.size[0], "width": item.size[1]}

    def masks(self, key: str, prompts: list[PromptRequest]) -> dict[str, Any]:
        results = self.decoder.masks(self._cached(key), prompts)
        self.metrics.count("decoder_runs_total", len(prompts))
        return {"id": key, "results": results}

    def _cached(self, key: str) -> Cached:
        item = self.cache.get(key)
        if item is None:
            raise unknown_id(key, self.cache.capacity)
        return item

    def health(self) -> dict[str, Any]:
        return {"status": "ok", "encoder": self.encoder.name, "decoder": self.decoder.name,
                "variant": self.decoder.predictor.variant, "uptime_s": round(time.time() - self.started, 1)}

    def metrics_text(self) -> str:
        return self.metrics.render({"cache_embeddings": len(self.cache), "cache_capacity": self.cache.capacity,
                                    "encodes_in_flight": self.admission.pending})


def unknown_id(key: str, capacity: int) -> ApiError:
    return ApiError(404, f"no embedding with id '{key[:40]}' (never sent, or evicted from the cache of {capacity}): "
                         "POST the image to /v1/embeddings again")


def _file_name(runner: Any) -> str:
    from pathlib import Path

    return Path(runner.path).name if getattr(runner, "path", None) else runner.name


def _as_bad_request(fn: Callable, *args: Any) -> Any:
    try:
        return fn(*args)
    except InputError as exc:
        raise ApiError(400, str(exc)) from exc


# --- routing (shared by every transport) -------------------------------------------------------------

class Service(Protocol):
    """What :func:`handle_request` calls: a :class:`SamService`, or the Ray Serve front's proxy of one."""

    metrics: Metrics

    def encode(self, data: bytes) -> dict[str, Any]: ...
    def info(self, key: str) -> dict[str, Any]: ...
    def masks(self, key: str, prompts: list[PromptRequest]) -> dict[str, Any]: ...
    def health(self) -> dict[str, Any]: ...
    def metrics_text(self) -> str: ...


@dataclass
class Response:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


def json_response(status: int, data: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(status, (json.dumps(data) + "\n").encode(), headers=headers or {})


def handle_request(service: Service, method: str, path: str, body: bytes, content_type: str = "") -> Response:
    """One request to its answer: routes, parses, maps errors to statuses (module docstring); never raises."""
    start = time.perf_counter()
    path = path.split("?", 1)[0].rstrip("/") or "/"
    route = route_name(path)
    try:
        response = _route(service, method, path, body, content_type)
    except ApiError as exc:
        response = json_response(exc.status, {"error": exc.message}, exc.headers)
    except InputError as exc:  # a problem with what was sent, found below the routing
        response = json_response(400, {"error": str(exc)})
    except Exception:  # a bug or a failed runtime: logged here, the client learns only that it happened
        LOG.exception("%s %s failed", method, path)
        response = json_response(500, {"error": "internal error while answering this request (logged on the server)"})
    service.metrics.count("requests_total", route=route, status=str(response.status))
    service.metrics.observe(route, time.perf_counter() - start)
    return response


def route_name(path: str) -> str:
    """The route a path belongs to (the ``route`` label of /metrics): healthz, metrics, embeddings, embedding, masks."""
    parts = path.strip("/").split("/")
    if path in ("/healthz", "/metrics"):
        return path[1:]
    if parts[:2] == ["v1", "embeddings"] and len(parts) in (2, 3):
        return "embeddings" if len(parts) == 2 else "embedding"
    if parts[:2] == ["v1", "embeddings"] and len(parts) == 4 and parts[3] == "masks":
        return "masks"
    return "unknown"


def _route(service: Service, method: str, path: str, body: bytes, content_type: str) -> Response:
    route, parts = route_name(path), path.strip("/").split("/")
    if route == "healthz":
        _allow(method, "GET")
        return json_response(200, service.health())
    if route == "metrics":
        _allow(method, "GET")
        return Response(200, service.metrics_text().encode(), "text/plain; version=0.0.4")
    if route == "embeddings":
        _allow(method, "POST")
        return json_response(200, service.encode(_image_bytes(body, content_type)))
    if route == "embedding":
        _allow(method, "GET")
        return json_response(200, service.info(parts[2]))
    if route == "masks":
        _allow(method, "POST")
        return json_response(200, service.masks(parts[2], parse_prompts(_json(body))))
    raise ApiError(404, f"no such endpoint {method} {path}: see /v1/embeddings, /v1/embeddings/ID/masks, /healthz, /metrics")


def _allow(method: str, allowed: str) -> None:
    if method != allowed:
        raise ApiError(405, f"this endpoint takes {allowed}, not {method}", {"Allow": allowed})


def _json(body: bytes) -> Any:
    try:
        return json.loads(body or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"the body is not JSON ({exc.__class__.__name__}): send a JSON prompt") from exc


def _image_bytes(body: bytes, content_type: str) -> bytes:
    if content_type.split(";")[0].strip().lower() != "application/json":
        return body
    data = _json(body)
    if not isinstance(data, dict) or not isinstance(data.get("image"), str):
        raise ApiError(400, "a JSON upload must be {\"image\": \"<base64 of the image file>\"}")
    try:
        return base64.b64decode(data["image"], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ApiError(400, "'image' is not valid base64: encode the image file's bytes") from exc


__all__ = ["Admission", "ApiError", "BUCKETS", "Cached", "DecoderSide", "EncoderSide", "EmbeddingCache", "MAX_BODY_BYTES", "MAX_PROMPTS", "Metrics", "PromptRequest",
           "Response", "SamService", "Service", "handle_request", "json_response", "parse_prompts", "route_name", "unknown_id"]
