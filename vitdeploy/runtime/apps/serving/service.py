"""The SAM prompt service behind ``vitdeploy serve``: encode an image once, answer prompts from its cached embedding.

It serves every model whose clicks run on cached image features: SAM (an embedding), SAM 2 (an embedding and two
high-resolution feature maps) and SAM 3's clicks (its vision encoder and interactive decoder, SAM 2's layout); the
pair's predictor halves come from :mod:`vitdeploy.runtime.apps.predictors`.

This is how annotation front ends (CVAT, Label Studio) host SAM: the encoder runs once per image on the
server (seconds on a CPU), every click after that is a decoder call on the cached embedding (milliseconds).
The service is transport-free: :mod:`~vitdeploy.runtime.apps.serving.api` is its HTTP API (one FastAPI
application), which :mod:`~vitdeploy.runtime.apps.serving.server` serves with Uvicorn in one process and
:mod:`~vitdeploy.runtime.apps.serving.ray_serve` on Ray Serve, so the routes and errors are the same in both.

An embedding id is the SHA-256 of the image's bytes and of the encoder file: the same upload gets the same id
(and a cache hit, no encoder run), and an id never names another model's embedding. A problem with a request is a
domain error naming what to fix, no HTTP status in sight: an InputError (not an image, a prompt outside the image),
:class:`NotFound` (an unknown or evicted id), :class:`Busy` when ``max_pending`` images are being encoded already
(the caller retries; nothing queues without bound). The API maps them to 400, 404 and 503 in one handler.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from vitdeploy.errors import InputError, VitdeployError
from vitdeploy.runtime.apps.serving.metrics import Metrics

if TYPE_CHECKING:  # imported when a service opens its files
    from vitdeploy.runtime.deploy.loader import OpenOptions
    from vitdeploy.runtime.deploy.plan import ModelPlan
    from vitdeploy.runtime.processing.images import PixelLimit

LOG = logging.getLogger("vitdeploy.serve")
#: The most prompts one masks request may carry (each is a decoder run).
MAX_PROMPTS = 64
#: The most exemplar boxes one concept request may carry (the detector file takes its own ``max_boxes`` at most).
MAX_CONCEPT_BOXES = 64
#: The most pixels an uploaded image may have (``serve --max-image-pixels``): a 48-megapixel phone photo fits; a
#: 20000x20000 PNG of 1.1 MB (400 megapixels) took a SAM 3 server to 10.9 GB before this limit. Refused from the
#: image's header, before it is decoded.
MAX_IMAGE_PIXELS = 50_000_000
#: Seconds a busy answer asks the caller to wait before retrying.
RETRY_AFTER_S = 1


class NotFound(InputError):
    """What a request names is not here: an embedding never sent or evicted, a kind of prompt this server does not
    answer. (The API answers it 404; a bad request is any other InputError, 400.)"""


class Busy(VitdeployError):
    """The service is at its bound (encodes in flight, replicas' queues): retry after ``retry_after`` seconds. (The
    API answers it 503 with ``Retry-After``.)"""

    def __init__(self, message: str, retry_after: int = RETRY_AFTER_S):
        super().__init__(message)
        self.retry_after = retry_after

    def __reduce__(self) -> tuple:  # pickled whole: a replica's Busy reaches the front with its wait
        return (Busy, (str(self), self.retry_after))


@dataclass
class Cached:
    """One cached image: its features by name ((1, C, h, w) float32 each: SAM's embedding, or SAM 2's three arrays)
    and the original image's (H, W); ``data``: what a concept side needs to encode the image its own way on the first
    concept prompt (``Sam3Processor``'s resize is not the click predictor's): the image resized as ``Sam3Processor``
    resizes it (uint8, S x S: 3 MB at 1008 px, from which its features are the same to the bit), or the file's bytes
    where they are smaller."""

    features: dict[str, np.ndarray]
    size: tuple[int, int]
    data: bytes | np.ndarray | None = None


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


# --- prompts ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PromptRequest:
    """One prompt, checked: (N, 2) points and (N,) labels (or None), a (4,) box (or None), multimask."""

    points: np.ndarray | None
    labels: np.ndarray | None
    box: np.ndarray | None
    multimask_output: bool


def _check_inside(prompt: PromptRequest, size: tuple[int, int], index: int, batch: bool) -> None:
    """Every model's rule (:func:`~vitdeploy.runtime.apps.common.prompts.check_inside`)."""
    from vitdeploy.runtime.apps.common.prompts import check_inside

    height, width = size
    for name, xy in (("point", prompt.points), ("box corner", None if prompt.box is None else prompt.box.reshape(2, 2))):
        if xy is not None:
            check_inside(xy, width, height, name, f"prompt {index}: " if batch else "")


# --- concept prompts (SAM 3: every instance of a text and/or exemplar boxes) --------------------------

class ConceptSide:
    """SAM 3's text encoder and detector beside the service's vision encoder: every instance of a concept in a cached
    image, as ``Sam3Processor`` (the same file, its own image transform) finds them. The image's features for the
    detector are computed on the first concept prompt of an image, from the bytes the encoder side kept, under its
    lock (one vision run at a time), and kept in their own cache (full size: 111 MB an image)."""

    def __init__(self, encoder: EncoderSide, model: Any, cache_size: int):
        from vitdeploy.runtime.apps.sam3.processor import Sam3ImageModel

        self.model = Sam3ImageModel.of_open(model)  # ``model``: the open files, checked (OpenModel)
        self.encoder = encoder
        self.names = (_file_name(self.model.text), _file_name(self.model.detector))
        self.cache = EmbeddingCache(cache_size)
        self._lock = threading.Lock()

    def check(self, prompt: Any, size: tuple[int, int]) -> list[list[float]]:
        """Before any model runs: the text tokenizes within the context, the boxes fit the detector's slots and lie
        inside the image; the boxes normalized as the detector takes them. InputError naming what is wrong."""
        self.model.check_prompt(prompt.text, len(prompt.boxes), "send fewer boxes")
        return prompt.normalized_boxes(size[0], size[1])

    def features(self, key: str) -> dict[str, np.ndarray] | None:
        """The detector's features of a cached image, if they are kept."""
        found = self.cache.get(key)
        return None if found is None else found.features

    def kept(self, picture: np.ndarray, data: bytes) -> bytes | np.ndarray:
        """What a cache entry keeps for this side (:class:`Cached`'s ``data``): the picture resized as the detector's
        preprocessing resizes it (uint8, which it then leaves as it is), or the file's bytes where they are smaller."""
        from vitdeploy.runtime.processing.sam3_transforms import resize_uint8_antialiased

        side = self.model.resolution
        return data if len(data) <= side * side * 3 else resize_uint8_antialiased(picture, (side, side))

    def encode(self, key: str, item: Cached) -> dict[str, np.ndarray]:
        """The detector's features of a cached image, computed from what its entry kept, and kept."""
        from vitdeploy.runtime.processing.images import decode_image_bytes

        with self.encoder.lock:
            picture = (item.data if isinstance(item.data, np.ndarray)
                       else decode_image_bytes(item.data, limit=self.encoder.limit))
            features = self.model.encode_image(picture)
        self.cache.put(key, Cached(features, item.size))
        return features

    def instances(self, features: dict[str, np.ndarray], size: tuple[int, int], prompt: Any, boxes: list[list[float]],
                  threshold: float) -> dict[str, Any]:
        """Every instance of ``prompt`` (its ``boxes`` as :meth:`check` returned them): score, box, area, COCO RLE
        mask."""
        from vitdeploy.runtime.apps.sam3.concept import concept_records, prompt_instances
        from vitdeploy.runtime.apps.sam3.processor import Sam3Processor

        state = {"original_height": size[0], "original_width": size[1], "backbone_out": features}
        with self._lock:
            processor = Sam3Processor(self.model, confidence_threshold=threshold)
            state = prompt_instances(processor, state, prompt, boxes)
        return {"prompt": prompt.to_dict(), "confidence_threshold": threshold, "instances": concept_records(state)}


# --- the service ------------------------------------------------------------------------------------

class EncoderSide:
    """The image encoder of a service: an image file's bytes -> :class:`Cached`, one call at a time. ``features_of``:
    the pair's encoder half (:func:`~vitdeploy.runtime.apps.predictors.image_encoder_for`) on ``encoder``."""

    def __init__(self, encoder: Any, features_of: Callable[[np.ndarray], dict[str, np.ndarray]],
                 keep: Callable[[np.ndarray, bytes], Any] | None = None, max_image_pixels: int = MAX_IMAGE_PIXELS):
        from vitdeploy.runtime.deploy.identity import model_digest

        self.runner = encoder
        self.features_of = features_of
        self.name = _file_name(encoder)
        #: What embedding ids are salted with: the encoder file's SHA-256 (the runner's name for a Runner without a file).
        self.identity = model_digest(encoder.path) if getattr(encoder, "path", None) else encoder.name
        #: One vision run at a time, a concept side's too.
        self.lock = threading.Lock()
        #: What each cache entry keeps of its image (a concept side's :meth:`ConceptSide.kept`), or nothing.
        self.keep = keep
        #: Larger images are refused from their header (413), before they are decoded.
        self.limit = upload_limit(max_image_pixels)

    def embedding_id(self, data: bytes) -> str:
        return hashlib.sha256(self.identity.encode() + b"\0" + data).hexdigest()[:32]

    def encode(self, data: bytes) -> Cached:
        """The image decoded and encoded under one lock: one full-size decoded image exists at a time, however many
        requests wait (decoded outside it, three 8000x8000 PNGs of 186 KB at once took a server to 3.4 GB); the
        admission limit bounds the waiting ones, which hold only their compressed bytes."""
        from vitdeploy.runtime.processing.images import decode_image_bytes

        with self.lock:
            picture = decode_image_bytes(data, limit=self.limit)
            features = self.features_of(picture)
        kept = None if self.keep is None else self.keep(picture, data)
        return Cached(features, (int(picture.shape[0]), int(picture.shape[1])), kept)


class DecoderSide:
    """The prompt encoder + mask decoder of a service: a cached embedding and prompts -> masks, one call at a time.
    ``predictor``: the pair's predictor (:mod:`~vitdeploy.runtime.apps.predictors`), answering on features given."""

    def __init__(self, predictor: Any):
        self.predictor = predictor
        self.name = _file_name(predictor.decoder)
        self._lock = threading.Lock()

    def browser_decoder(self) -> dict[str, Any] | None:
        """What a page needs to run this decoder itself (the file, and how to lay out its inputs and read its outputs:
        the predictor's ``page_facts``), or None where it cannot: the decoder is not one self-contained .onnx file.
        SAM's page decodes on the embedding (``browser_decoder.js``); SAM 2's and SAM 3's on the three feature arrays
        (``browser_sam2.js``, ``features``)."""
        from vitdeploy.runtime.apps.predictors import prompt_files
        from vitdeploy.runtime.apps.serving.site import one_onnx_file

        path = getattr(self.predictor.decoder, "path", None)
        if not one_onnx_file(path):
            return None
        facts = self.predictor.page_facts()
        model = prompt_files(self.predictor.encoder_metadata).model
        return {"path": str(path), "model": model, "input_size": facts["encoder"]["input_size"],
                "features": list(self.predictor.FEATURES), **facts["decoder"]}

    def masks(self, item: Cached, prompts: list[PromptRequest]) -> list[dict[str, Any]]:
        """Masks (COCO RLE), scores and areas for each prompt (checked to lie inside the image)."""
        from vitdeploy.runtime.apps.common.rle import coco_encode_rle, mask_to_rle

        for k, prompt in enumerate(prompts):
            _check_inside(prompt, item.size, k, len(prompts) > 1)
        results = []
        with self._lock:
            self.predictor.set_image_features(item.features, item.size)
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
                raise Busy(f"busy: {self.pending} image(s) are being encoded; retry in {RETRY_AFTER_S} s")
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
                 cache_size: int = 64, max_pending: int = 4, text_encoder: Any = None, detector: Any = None,
                 concept_cache_size: int = 4, plan: ModelPlan | None = None, max_image_pixels: int = MAX_IMAGE_PIXELS):
        from vitdeploy.runtime.apps.predictors import image_encoder_for, prompt_predictor_of
        from vitdeploy.runtime.deploy.loader import OpenOptions

        o = OpenOptions.of(options, device=device, threads=threads, runtime=runtime, inference_precision=inference_precision)
        if (text_encoder is None) != (detector is None):
            raise InputError("concept prompts need SAM 3's text encoder and detector together: give both, or neither")
        files = service_files(encoder, concepts=text_encoder is not None)
        if plan is not None:
            model = files.open(plan=plan)
        else:
            given = dict(zip(files.roles[:2], (encoder, decoder)))
            model = files.open({**given, "text": text_encoder, "detector": detector} if text_encoder is not None
                               else given, o)
        enc, dec = (model[role] for role in files.roles[:2])
        #: How each file runs (every file decided: the decoder, text encoder and detector too).
        self.plan = model.plan
        self.metrics = Metrics()
        self.admission = Admission(max_pending, self.metrics)
        self.encoder = EncoderSide(enc, image_encoder_for(enc), max_image_pixels=max_image_pixels)
        self.decoder = DecoderSide(prompt_predictor_of(model))
        self.runners = tuple(model.runners.values())
        self.cache = EmbeddingCache(cache_size)
        #: SAM 3's text encoder and detector, for concept prompts (None: clicks and boxes only).
        self.concept = None if text_encoder is None else ConceptSide(self.encoder, model, concept_cache_size)
        if self.concept is not None:
            self.encoder.keep = self.concept.kept
        self.started = time.time()

    def page_model(self) -> dict[str, Any] | None:
        """What the /web/ page needs to run this service's model in the browser (``vitdeploy web``'s site.json without
        its parity check; the files fetched from this server) and the two files' paths (``paths``), or None where it
        cannot: a file is not one self-contained .onnx file."""
        from vitdeploy.runtime.apps.predictors import prompt_files
        from vitdeploy.runtime.apps.serving.site import one_onnx_file, site_facts

        predictor = self.decoder.predictor
        paths = {role: getattr(runner, "path", None) for role, runner in (("encoder", self.encoder.runner),
                                                                          ("decoder", predictor.decoder))}
        if not all(one_onnx_file(p) for p in paths.values()):
            return None
        files = {role: (Path(path), f"../v1/models/{role}.onnx") for role, path in paths.items()}
        facts = site_facts(prompt_files(self.encoder.runner).model, predictor, files, self.encoder.limit.pixels)
        return {**facts, "paths": {role: str(path) for role, path in paths.items()}}

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

    def embedding(self, key: str) -> Cached:
        """The cached embedding itself (a page that decodes in the browser fetches it once per image)."""
        return self._cached(key)

    def browser_decoder(self) -> dict[str, Any] | None:
        return self.decoder.browser_decoder()

    def masks(self, key: str, prompts: list[PromptRequest]) -> dict[str, Any]:
        results = self.decoder.masks(self._cached(key), prompts)
        self.metrics.count("decoder_runs_total", len(prompts))
        return {"id": key, "results": results}

    def concepts(self, key: str, prompt: Any, threshold: float) -> dict[str, Any]:
        """Every instance of a concept prompt in a cached image (404 where this service has no detector)."""
        if self.concept is None:
            raise NotFound("this server has no SAM 3 text encoder and detector: start it with --text-encoder and "
                                "--detector for concept prompts (clicks and boxes: POST /v1/embeddings/ID/masks)")
        item = self._cached(key)
        boxes = self.concept.check(prompt, item.size)
        features = self.concept.features(key)
        if features is None:
            with self.admission:  # a vision run, admitted as an upload's
                features = self.concept.encode(key, item)
            self.metrics.count("encoder_runs_total")
        answer = self.concept.instances(features, item.size, prompt, boxes, threshold)
        self.metrics.count("detector_runs_total")
        return {"id": key, **answer}

    def _cached(self, key: str) -> Cached:
        item = self.cache.get(key)
        if item is None:
            raise unknown_id(key, self.cache.capacity)
        return item

    def health(self) -> dict[str, Any]:
        enc, dec = self.runners[:2]
        chosen = getattr(enc, "deployment", None)
        return {"status": "ok", "encoder": self.encoder.name, "decoder": self.decoder.name,
                "variant": self.decoder.predictor.variant, "encoder_runtime": enc.name, "decoder_runtime": dec.name,
                "deployment": chosen.describe() if chosen is not None else None,
                "max_points": self.decoder.predictor.max_prompt_points,
                "limits": self.limits(),
                "concepts": None if self.concept is None else {"text_encoder": self.concept.names[0],
                                                               "detector": self.concept.names[1],
                                                               "max_boxes": self.concept.model.max_boxes},
                "uptime_s": round(time.time() - self.started, 1)}

    def limits(self) -> dict[str, Any]:
        """What the service refuses past, as it checks it (/healthz; the transport adds its own body limit)."""
        return service_limits(self.encoder.limit.pixels, self.decoder.predictor,
                              None if self.concept is None else self.concept.model.max_boxes)

    def metrics_text(self) -> str:
        return self.metrics.render({"cache_embeddings": len(self.cache), "cache_capacity": self.cache.capacity,
                                    "encodes_in_flight": self.admission.pending})


def upload_limit(max_image_pixels: int) -> PixelLimit:
    """A server's pixel limit for uploads (``--max-image-pixels``), checked from an image's header before it is
    decoded: 413 naming the option."""
    from vitdeploy.runtime.processing.images import PixelLimit

    return PixelLimit(max_image_pixels, "start the server with a larger --max-image-pixels")


def service_limits(max_image_pixels: int, predictor: Any, concept_boxes: int | None) -> dict[str, Any]:
    """The limits a service enforces, as /healthz tells them: an image's pixels, prompts a request, clicks a prompt
    (without and with a box: the decoder's points less a box's corners or SAM's padding point), and a concept
    prompt's boxes (None: no concept prompts)."""
    return {"max_image_pixels": max_image_pixels, "max_prompts": MAX_PROMPTS, "max_clicks": predictor.max_clicks(False),
            "max_clicks_with_box": predictor.max_clicks(True),
            "max_concept_boxes": None if concept_boxes is None else min(concept_boxes, MAX_CONCEPT_BOXES)}


def service_files(encoder: Any, concepts: bool = False) -> Any:
    """The files a service takes beside ``encoder`` (a path, a Runner or its metadata): the pair its prompts run on
    (:func:`~vitdeploy.runtime.apps.predictors.prompt_files`), and with ``concepts`` SAM 3's four files (vision
    encoder, interactive decoder, text encoder, detector; its check refuses another model's)."""
    from vitdeploy.runtime.apps.predictors import prompt_files

    if concepts:
        from vitdeploy.runtime.apps.sam3.files import CONCEPT_AND_CLICKS

        return CONCEPT_AND_CLICKS
    return prompt_files(encoder)


def unknown_id(key: str, capacity: int) -> NotFound:
    return NotFound(f"no embedding with id '{key[:40]}' (never sent, or evicted from the cache of {capacity}): "
                         "POST the image to /v1/embeddings again")


def _file_name(runner: Any) -> str:
    return Path(runner.path).name if getattr(runner, "path", None) else runner.name


class Service(Protocol):
    """What the API (:mod:`~vitdeploy.runtime.apps.serving.api`) calls: a :class:`SamService`, or the Ray Serve
    front's proxy of one."""

    metrics: Metrics

    def encode(self, data: bytes) -> dict[str, Any]: ...
    def info(self, key: str) -> dict[str, Any]: ...
    def embedding(self, key: str) -> Cached: ...
    def browser_decoder(self) -> dict[str, Any] | None: ...
    def page_model(self) -> dict[str, Any] | None: ...
    def masks(self, key: str, prompts: list[PromptRequest]) -> dict[str, Any]: ...
    def concepts(self, key: str, prompt: Any, threshold: float) -> dict[str, Any]: ...
    def health(self) -> dict[str, Any]: ...
    def metrics_text(self) -> str: ...


__all__ = ["Admission", "Busy", "Cached", "ConceptSide", "DecoderSide", "EncoderSide", "EmbeddingCache", "MAX_CONCEPT_BOXES",
           "MAX_PROMPTS", "NotFound", "PromptRequest", "SamService", "Service", "service_files", "unknown_id"]
