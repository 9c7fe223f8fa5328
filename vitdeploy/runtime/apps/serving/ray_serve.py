"""``vitdeploy serve --ray``: the same API on Ray Serve, encoder and decoder replicas scaled apart.

The HTTP front is this process's server (:class:`~vitdeploy.runtime.apps.serving.server.Server`, the one-process
server's transport and FastAPI application, so its limits, errors, /metrics and page are the same), answering for a
:class:`RayFront` that calls three Ray Serve applications through deployment handles. Ray Serve runs no HTTP proxy
(``ProxyLocation.Disabled``): its proxy answered a killed ingress replica's requests with a plain-text 500 and had
none of the front door's guards against slow clients or large bodies.

    encoder   replicas of :class:`~vitdeploy.runtime.apps.serving.service.EncoderSide`, one image at a time each,
              ``threads`` CPUs each; autoscaled between ``encoder_replicas`` bounds on requests in flight;
              at most ``max_pending`` requests wait (more are answered 503, Ray Serve's back-pressure)
    decoder   replicas of :class:`~vitdeploy.runtime.apps.serving.service.DecoderSide` (no encoder loaded); each keeps
              the last few embeddings it fetched, so the clicks on one image fetch it once
    cache     the embedding cache shared by id: one replica holding an LRU of embeddings; the front asks it
              whether an image is cached, the encoder's result is put there, decoders fetch from it

A replica that dies is replaced by Ray Serve; a request it was answering gets a 503 saying to retry, and
the cache (its own replica) keeps the embeddings, so prompts on images sent before still work. A lost cache
replica loses the embeddings it held: a prompt on one of them is answered 404 saying so (POST the image again). The model
files must be at the same path on every node of a cluster.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from vitdeploy.errors import InputError
from vitdeploy.runtime.apps.serving.metrics import Metrics
from vitdeploy.runtime.apps.serving.service import (MAX_IMAGE_PIXELS, Busy, Cached, DecoderSide, EmbeddingCache,
                                                    EncoderSide, NotFound, PromptRequest, unknown_id,
                                                    upload_limit)
from vitdeploy.runtime.deploy.loader import OpenOptions
from vitdeploy.runtime.deploy.plan import ModelPlan
from vitdeploy.runtime.processing.images import check_image_bytes

#: The Ray Serve applications, one per deployment (the front is not one: it is this process's server).
CACHE_APP, ENCODER_APP, DECODER_APP = "vitdeploy-cache", "vitdeploy-encoder", "vitdeploy-decoder"
#: Embeddings a decoder replica keeps after fetching them from the cache (ViT-B: 4 MiB each).
DECODER_LOCAL_CACHE = 8


@dataclass(frozen=True)
class RayServeOptions:
    """How the application is laid out: ``plan``, every file of the model decided once on the driver (the encoder for
    its replicas' threads, the decoder for one thread each: :func:`plan_for_replicas`), opened as it is in every
    replica; ``*_replicas``: (min, max), equal bounds mean a fixed count."""

    plan: ModelPlan
    encoder_replicas: tuple[int, int] = (1, 1)
    decoder_replicas: tuple[int, int] = (1, 1)
    cache_size: int = 64
    max_pending: int = 4
    #: the most pixels an uploaded image may have (``--max-image-pixels``)
    max_image_pixels: int = MAX_IMAGE_PIXELS
    #: page origins a browser may call the service from (``--cors-origin``)
    cors_origins: tuple[str, ...] = ()

    @property
    def encoder(self) -> str:
        return self.plan.files[0].path

    @property
    def decoder(self) -> str:
        return self.plan.files[1].path

    @property
    def threads(self) -> int:
        """CPUs an encoder replica holds: its file's threads."""
        return self.plan.files[0].deployment.threads or 1

    @property
    def device(self) -> str:
        return self.plan.device


def plan_for_replicas(encoder: str, decoder: str, options: OpenOptions) -> ModelPlan:
    """The pair checked (from its metadata, before a probe or a cluster start) and each file decided for the replicas
    that open it: the encoder for ``options.threads`` (default one: :func:`~vitdeploy.runtime.deploy.plan.
    worker_threads`), the decoder for one thread (a decoder replica holds half a CPU)."""
    from dataclasses import replace

    from vitdeploy.runtime.apps.predictors import prompt_files
    from vitdeploy.runtime.deploy.plan import worker_threads

    files = prompt_files(encoder)
    options = replace(options, threads=worker_threads(options.threads, pooled=True))
    return files.plan(dict(zip(files.roles, (encoder, decoder))), options, replace(options.for_part(), threads=1))


class CacheReplica:
    """The shared embedding cache (one replica). Its embeddings live in its memory: a replacement starts empty, and
    :meth:`started_at` lets the front say so."""

    def __init__(self, capacity: int):
        self.cache = EmbeddingCache(capacity)
        self.started = time.time()

    def started_at(self) -> float:
        return self.started

    def get(self, key: str) -> Cached | None:
        return self.cache.get(key)

    def put(self, key: str, item: Cached) -> None:
        self.cache.put(key, item)

    def size(self) -> int:
        return len(self.cache)


class EncoderReplica:
    def __init__(self, options: RayServeOptions):
        from vitdeploy.runtime.apps.predictors import image_encoder_for

        runner = options.plan.open(options.plan.roles[0])  # as the driver decided it
        self.side = EncoderSide(runner, image_encoder_for(runner), max_image_pixels=options.max_image_pixels)

    def encode(self, data: bytes) -> Cached:
        return self.side.encode(data)


class DecoderReplica:
    def __init__(self, options: RayServeOptions):
        from vitdeploy.runtime.apps.common.files import file_metadata
        from vitdeploy.runtime.apps.predictors import prompt_predictor_for

        encoder_metadata = file_metadata(options.encoder)  # the pair was checked on the driver: read, not checked
        self.side = DecoderSide(prompt_predictor_for(None, encoder_metadata, plan=options.plan))
        self.capacity = options.cache_size
        self.recent = EmbeddingCache(DECODER_LOCAL_CACHE)

    @cached_property
    def cache(self) -> Any:
        """The cache deployment's handle, looked up by name when first used (a replica opened outside Serve has none)."""
        from ray import serve

        return serve.get_deployment_handle("cache", app_name=CACHE_APP)

    def browser_decoder(self) -> dict[str, Any] | None:
        return self.side.browser_decoder()

    def limits(self, max_image_pixels: int) -> dict[str, Any]:
        from vitdeploy.runtime.apps.serving.service import service_limits

        return service_limits(max_image_pixels, self.side.predictor, None)

    def masks(self, key: str, prompts: list[PromptRequest]) -> list[dict[str, Any]] | None:
        """The masks, or None when ``key`` is not cached (the front says why). A local copy counts only while the
        cache replica it came from lives: a replaced cache lost the embedding for every replica at once (local copies
        answered 200 for about 40 s after, where the cache said 404)."""
        epoch = self.cache.started_at.remote().result()
        found = self.recent.get(key)
        if found is not None and found[0] == epoch:
            item = found[1]
        else:
            item = self.cache.get.remote(key).result()
            if item is None:
                return None
            self.recent.put(key, (epoch, item))
        return self.side.masks(item, prompts)


class RayFront:
    """The :class:`~vitdeploy.runtime.apps.serving.service.Service` the ingress routes to: calls on the other deployments."""

    def __init__(self, options: RayServeOptions, encoder: Any, decoder: Any, cache: Any, identity: str):
        self.options, self.encoder, self.decoder, self.cache = options, encoder, decoder, cache
        self.identity = identity
        self.metrics = Metrics()
        self.started = time.time()
        self.cache_epoch: float | None = None
        self.limits: dict[str, Any] | None = None
        #: The replicas' pixel limit, checked here from an upload's header first (:meth:`encode`).
        self.limit = upload_limit(options.max_image_pixels)

    def encode(self, data: bytes) -> dict[str, Any]:
        if self.cache_epoch is None:  # the cache replica this front put embeddings into: a replacement starts later
            self.cache_epoch = self._call(self.cache.started_at)
        key = hashlib.sha256(self.identity.encode() + b"\0" + data).hexdigest()[:32]
        item = self._call(self.cache.get, key)
        if item is not None:
            self.metrics.count("cache_hits_total")
            return {"id": key, "height": item.size[0], "width": item.size[1], "cached": True}
        check_image_bytes(data, limit=self.limit)  # what is not an image, or is over the limit, never enters Ray's
        item = self._call(self.encoder.encode, data)  # object store (50 bodies of 60 MB kept +1.4 GB there after)
        self.metrics.count("encoder_runs_total")
        self._call(self.cache.put, key, item)
        return {"id": key, "height": item.size[0], "width": item.size[1], "cached": False}

    def info(self, key: str) -> dict[str, Any]:
        item = self._call(self.cache.get, key)
        if item is None:
            raise self._unknown(key)
        return {"id": key, "height": item.size[0], "width": item.size[1]}

    def embedding(self, key: str) -> Cached:
        item = self._call(self.cache.get, key)
        if item is None:
            raise self._unknown(key)
        return item

    def browser_decoder(self) -> dict[str, Any] | None:
        return self._call(self.decoder.browser_decoder)  # the same file in every replica (the API asks once)

    def page_model(self) -> dict[str, Any] | None:
        """None: the /web/ page (the model in the browser) is the one-process server's; on Ray the page at / encodes
        on the encoder replicas."""
        return None

    def masks(self, key: str, prompts: list[PromptRequest]) -> dict[str, Any]:
        results = self._call(self.decoder.masks, key, prompts)
        if results is None:
            raise self._unknown(key)
        self.metrics.count("decoder_runs_total", len(prompts))
        return {"id": key, "results": results}

    def concepts(self, key: str, prompt: Any, threshold: float) -> dict[str, Any]:
        """Concept prompts run in the one-process server (``serve`` without ``--ray``), which holds SAM 3's text
        encoder and detector beside the vision encoder."""
        raise NotFound("concept prompts are served in one process: 'vitdeploy serve' without --ray, with "
                            "--text-encoder and --detector (on Ray Serve: clicks and boxes, POST /v1/embeddings/ID/masks)")

    def _unknown(self, key: str) -> NotFound:
        """404 for an id the cache does not hold, saying when a replaced cache replica lost it."""
        restarted = self._call(self.cache.started_at)
        if self.cache_epoch is not None and restarted != self.cache_epoch:
            return NotFound(f"no embedding with id '{key[:40]}': the cache replica was replaced "
                                 f"{time.time() - restarted:.0f} s ago (it had stopped) and the embeddings sent before "
                                 "were lost with it: POST the image to /v1/embeddings again")
        return unknown_id(key, self.options.cache_size)

    def health(self) -> dict[str, Any]:
        from pathlib import Path

        if self.limits is None:  # the decoder's (the same file in every replica): asked once
            self.limits = self._call(self.decoder.limits, self.options.max_image_pixels)
        return {"status": "ok", "mode": "ray serve", "encoder": Path(self.options.encoder).name,
                "decoder": Path(self.options.decoder).name, "limits": self.limits,
                "uptime_s": round(time.time() - self.started, 1)}

    def metrics_text(self) -> str:
        return self.metrics.render({"cache_embeddings": self._call(self.cache.size),
                                    "cache_capacity": self.options.cache_size})

    def _call(self, method: Any, *args: Any) -> Any:
        """``method.remote(*args).result()``, with Ray's failures as the service's errors: back-pressure and a lost
        replica are :class:`Busy` (retry), a domain error raised in a replica is raised here as it was raised there
        (its own message, not Ray's wrapping of it with the replica's traceback)."""
        from ray import exceptions as ray_errors
        from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError

        try:
            return method.remote(*args).result()
        except ray_errors.RayTaskError as exc:  # an error raised in a replica (Ray's class is also the cause's): the
            cause = getattr(exc, "cause", None)  # original, its own message without Ray's wrapping and traceback
            if isinstance(cause, (InputError, Busy)):
                raise cause from None
            raise
        except (InputError, Busy):
            raise
        except BackPressureError:
            self.metrics.count("rejected_total", reason="busy")
            raise Busy(f"busy: {self.options.max_pending} request(s) already wait for a replica; retry in 1 s") from None
        except (ray_errors.RayActorError, ray_errors.ActorUnavailableError, DeploymentUnavailableError) as exc:
            self.metrics.count("rejected_total", reason="replica_lost")
            raise Busy(f"a replica stopped while answering ({type(exc).__name__}); it is being replaced: retry") from None


def deploy(options: RayServeOptions) -> RayFront:
    """Ray Serve started without an HTTP proxy, the three deployments run (each its own application, waited for until
    it is running), and the front that calls them (Ray must be started)."""
    from ray import serve

    from vitdeploy.runtime.deploy.identity import model_digest

    def scaling(bounds: tuple[int, int]) -> dict[str, Any]:
        low, high = bounds
        if low == high:
            return {"num_replicas": low}
        return {"autoscaling_config": {"min_replicas": low, "max_replicas": high, "target_ongoing_requests": 1,
                                       "upscale_delay_s": 2, "downscale_delay_s": 60}}

    serve.start(proxy_location="Disabled")  # the front is this process's server, on the address asked for
    cache = serve.deployment(CacheReplica, name="cache", num_replicas=1, ray_actor_options={"num_cpus": 0},
                             max_ongoing_requests=64).bind(options.cache_size)
    encoder = serve.deployment(EncoderReplica, name="encoder", max_ongoing_requests=1, max_queued_requests=options.max_pending,
                               ray_actor_options={"num_cpus": options.threads, **_gpu(options)},
                               **scaling(options.encoder_replicas)).bind(options)
    decoder = serve.deployment(DecoderReplica, name="decoder", max_ongoing_requests=1, max_queued_requests=64,
                               ray_actor_options={"num_cpus": 0.5, **_gpu(options)},
                               **scaling(options.decoder_replicas)).bind(options)
    handles = [serve.run(app, name=name, route_prefix=None)
               for app, name in ((cache, CACHE_APP), (encoder, ENCODER_APP), (decoder, DECODER_APP))]
    return RayFront(options, handles[1], handles[2], handles[0], model_digest(options.encoder))


def _gpu(options: RayServeOptions) -> dict[str, Any]:
    return {"num_gpus": 0.5} if options.device != "cpu" else {}


def run_app(options: RayServeOptions, host: str, port: int, body_budget_bytes: int | None = None) -> Any:
    """The deployments run (:func:`deploy`) and the server answering for them bound to ``host:port`` (port 0: a free
    one), not yet serving: ``.run()`` serves until a signal, ``.start()`` from a thread."""
    from vitdeploy.runtime.apps.serving.server import listen

    if not options.encoder.lower().endswith(".onnx") or not options.decoder.lower().endswith(".onnx"):
        raise InputError("--ray serves .onnx files (its replicas open them on any node); serve TensorRT engines "
                         "without --ray")
    return listen(deploy(options), host, port, cors_origins=options.cors_origins, body_budget_bytes=body_budget_bytes)


def stop_app() -> None:
    from ray import serve

    serve.shutdown()


__all__ = ["CACHE_APP", "DECODER_APP", "ENCODER_APP", "RayFront", "RayServeOptions", "deploy", "plan_for_replicas", "run_app",
           "stop_app"]
