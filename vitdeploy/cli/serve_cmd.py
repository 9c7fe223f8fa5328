"""``vitdeploy serve``: SAM over HTTP, encode once and answer prompts from the cached embedding."""

from __future__ import annotations

from dataclasses import dataclass

import click

from vitdeploy.cli.groups import Deploy, deploy_group, option_group
from vitdeploy.cli.options import Interrupted, handle_errors, sam_pair_options, verbose_option


def _bounds(_ctx: click.Context, _param: click.Parameter, value: str) -> tuple[int, int]:
    try:
        parts = [int(v) for v in value.split(":")]
    except ValueError:
        parts = []
    if len(parts) not in (1, 2) or min(parts) < 1 or parts[0] > parts[-1]:
        raise click.BadParameter(f"'{value}' is not N or MIN:MAX (replicas, 1 <= MIN <= MAX)")
    return parts[0], parts[-1]


@dataclass(frozen=True)
class Concepts:
    """SAM 3's text encoder and detector beside the pair (concept prompts), and the images whose features are kept."""

    text_encoder: str | None = None
    detector: str | None = None
    concept_cache_size: int = 4


@dataclass(frozen=True)
class Listening:
    """Where and how the server answers: its address, caches and bounds, origins, log lines."""

    host: str = "127.0.0.1"
    port: int = 8000
    cache_size: int = 64
    max_pending: int = 4
    max_image_pixels: int = 50_000_000
    body_budget_mib: int = 512
    cors_origins: tuple[str, ...] = ()
    log_format: str = "text"


@dataclass(frozen=True)
class OnRay:
    """Ray Serve: the cluster (None: one process) and each side's replicas."""

    ray_address: str | None = None
    encoder_replicas: tuple[int, int] = (1, 1)
    decoder_replicas: tuple[int, int] = (1, 1)


@click.command("serve")
@sam_pair_options
@option_group("concepts", Concepts, click.option(
    "--text-encoder", type=click.Path(dir_okay=False, path_type=str), default=None,
    help="SAM 3's text encoder (with --detector and SAM 3's vision encoder as -e): concept prompts, POST "
         "/v1/embeddings/ID/concepts {\"text\": ..., \"boxes\": [...]}, in one process."),
    click.option("--detector", type=click.Path(dir_okay=False, path_type=str), default=None,
                 help="SAM 3's detector (with --text-encoder)."),
    click.option("--concept-cache-size", type=click.IntRange(min=1), default=4, show_default=True,
                 help="Images whose detector features are kept (SAM 3 at 1008 px: 111 MB each)."))
@option_group("listening", Listening, click.option(
    "--host", default="127.0.0.1", show_default=True,
    help="Address to listen on (0.0.0.0: every interface; put a proxy with TLS and auth in front)."),
    click.option("--port", type=click.IntRange(min=0, max=65535), default=8000, show_default=True,
                 help="Port to listen on (0: a free one, printed)."),
    click.option("--cache-size", type=click.IntRange(min=1), default=64, show_default=True,
                 help="Embeddings kept (least recently used dropped first; ViT-B: 4 MiB each)."),
    click.option("--max-pending", type=click.IntRange(min=1), default=4, show_default=True,
                 help="Images being encoded or waiting for the encoder; one more is answered 503 (retry)."),
    click.option("--max-image-pixels", type=click.IntRange(min=1), default=50_000_000, show_default=True,
                 help="The most pixels an uploaded image may have (width x height, read from its header before it is "
                      "decoded); a larger one is answered 413. The default takes a 48-megapixel photo."),
    click.option("--body-budget-mib", type=click.IntRange(min=1), default=512, show_default=True,
                 help="Request bodies the server holds at once, all uploads together (promised by Content-Length or "
                      "received); an upload that does not fit is answered 503 (retry) before it is read. The "
                      "server's peak is about twice this (one process)."),
    click.option("--cors-origin", "cors_origins", multiple=True, metavar="ORIGIN",
                 help="Let a page from ORIGIN (https://app.example:8080, or * for any) call the service from a "
                      "browser: CORS headers and preflight answers. Repeatable. [default: same origin only]"),
    click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
                 help="The request log on stderr: one line per request, as text or as a JSON object (one-process "
                      "server)."))
@option_group("on_ray", OnRay, click.option(
    "--ray", "ray_address", is_flag=False, flag_value="local", default=None, metavar="[ADDRESS]",
    help="Serve on Ray Serve: --ray alone starts a local cluster; --ray ADDRESS joins one. Encoder and decoder "
         "replicas scale apart, the embedding cache is shared. Needs 'vitdeploy[ray]'. [default: one process]"),
    click.option("--encoder-replicas", default="1", show_default=True, callback=_bounds,
                 help="With --ray: encoder replicas, N or MIN:MAX (autoscaled on requests in flight)."),
    click.option("--decoder-replicas", default="1", show_default=True, callback=_bounds,
                 help="With --ray: decoder replicas, N or MIN:MAX."))
@deploy_group(devices=("cpu", "cuda", "tensorrt"), tf32=False)
@verbose_option
@handle_errors
def serve(encoder: str, decoder: str, concepts: Concepts, listening: Listening, on_ray: OnRay, deploy: Deploy,
          verbose: bool) -> None:
    """Serve SAM over HTTP: POST an image, get an embedding id; POST prompts for that id, get masks.

    Takes SAM's encoder and decoder, SAM 2's, or SAM 3's vision encoder and interactive decoder (clicks and boxes);
    with SAM 3's --text-encoder and --detector too, every instance of a text and/or exemplar boxes.

    \b
    POST /v1/embeddings              the image file's bytes -> {"id", "height", "width", "cached"}
    GET  /v1/embeddings/ID           -> {"id", "height", "width"}
    POST /v1/embeddings/ID/masks     {"points": [[x, y]], "labels": [1], "box": [x0, y0, x1, y1],
                                     "multimask_output": true} or {"prompts": [...]}
                                     -> {"results": [{"masks": [COCO RLE], "scores", "areas"}]}
    POST /v1/embeddings/ID/concepts  {"text": "soda can", "boxes": [[x0, y0, x1, y1]], "negative_boxes": [...],
                                     "confidence_threshold": 0.5} (SAM 3, --text-encoder/--detector)
                                     -> {"instances": [{"score", "bbox", "area", "segmentation": COCO RLE}]}
    GET  /healthz, GET /metrics      health (JSON) and Prometheus metrics

    \b
    Examples:
      vitdeploy serve -e sam_vit_b.onnx -d sam_vit_b_decoder.onnx --port 8000
      curl --data-binary @photo.jpg localhost:8000/v1/embeddings
      curl -d '{"points": [[500, 375]], "labels": [1]}' localhost:8000/v1/embeddings/ID/masks
      vitdeploy serve -e enc.onnx -d dec.onnx --ray --encoder-replicas 1:4 --decoder-replicas 2
    """
    from pathlib import Path

    from vitdeploy.fileio import require_model_file
    from vitdeploy.optional_packages import require_serve_side

    text_encoder, detector = concepts.text_encoder, concepts.detector
    ray_address, encoder_replicas, decoder_replicas = on_ray.ray_address, on_ray.encoder_replicas, on_ray.decoder_replicas
    require_model_file(encoder)
    require_model_file(decoder)
    if (text_encoder is None) != (detector is None):
        raise click.UsageError("--text-encoder and --detector go together (SAM 3's concept prompts): give both, or neither")
    for path in (text_encoder, detector):
        if path is not None:
            require_model_file(path)
    require_serve_side()
    if ray_address is None:
        if (encoder_replicas, decoder_replicas) != ((1, 1), (1, 1)):
            raise click.UsageError("--encoder-replicas and --decoder-replicas are for --ray")
        _serve_in_process(encoder, decoder, concepts, listening, deploy, verbose)
        return
    if text_encoder is not None:
        raise click.UsageError("concept prompts (--text-encoder, --detector) are served in one process: leave out --ray "
                               "(on Ray Serve, SAM 3 answers clicks and boxes)")
    from vitdeploy.cpu_features import available_cores
    from vitdeploy.runtime.apps.datasets.on_ray import start_ray, stop_ray
    from vitdeploy.runtime.apps.serving.ray_serve import RayServeOptions, plan_for_replicas, run_app, stop_app
    from vitdeploy.runtime.apps.serving.server import log_to_stderr

    # the pair checked on its metadata and every file decided before a cluster starts (SamService does the same in
    # one process)
    plan = plan_for_replicas(encoder, decoder, deploy.options(in_process=False))
    options = RayServeOptions(plan, encoder_replicas=encoder_replicas, decoder_replicas=decoder_replicas,
                              cache_size=listening.cache_size, max_pending=listening.max_pending,
                              max_image_pixels=listening.max_image_pixels, cors_origins=listening.cors_origins)
    host, port = listening.host, listening.port
    chosen = plan.files[0].deployment
    started = start_ray(ray_address, available_cores())
    stop: Interrupted | None = None
    try:
        server = run_app(options, host, port, body_budget_bytes=listening.body_budget_mib << 20)
        log_to_stderr(verbose, listening.log_format == "json")
        click.echo(f"serving {Path(encoder).name} + {Path(decoder).name} on Ray Serve at http://{host}:{server.port} "
                   f"(encoder replicas {encoder_replicas[0]}..{encoder_replicas[1]} x {options.threads} thread(s) as "
                   f"{chosen.runtime} {chosen.precision}, decoder replicas {decoder_replicas[0]}..{decoder_replicas[1]}); "
                   "Ctrl-C stops")
        server.run()
    except Interrupted as caught:  # raised again by the server once the requests in flight were answered; Ray Serve
        stop = caught              # and the local cluster are stopped below, then the verb exits 143/130
    finally:
        stop_app()
        if started:
            stop_ray()
    if stop is not None:
        _stopped_by(stop, "the requests in flight were answered; Ray Serve and the cluster it started are down")
    click.echo("stopped")


def _serve_in_process(encoder: str, decoder: str, concepts: Concepts, listening: Listening, deploy: Deploy,
                      verbose: bool) -> None:
    from pathlib import Path

    from vitdeploy.cli.options import echo_deployments
    from vitdeploy.runtime.apps.serving.server import listen, log_to_stderr
    from vitdeploy.runtime.apps.serving.service import SamService

    host, port, cache_size, max_pending = listening.host, listening.port, listening.cache_size, listening.max_pending
    service = SamService(encoder, decoder, options=deploy.options(), cache_size=cache_size, max_pending=max_pending,
                         text_encoder=concepts.text_encoder, detector=concepts.detector,
                         concept_cache_size=concepts.concept_cache_size, max_image_pixels=listening.max_image_pixels)
    echo_deployments(*service.runners)
    server = listen(service, host, port, cors_origins=listening.cors_origins,
                    body_budget_bytes=listening.body_budget_mib << 20)
    log_to_stderr(verbose, listening.log_format == "json")
    click.echo(f"serving {Path(encoder).name} + {Path(decoder).name} at http://{host}:{server.port} (one process; cache "
               f"{cache_size} embeddings, at most {max_pending} encodes in flight; the page at /, the API at /docs); "
               "Ctrl-C stops")
    try:
        server.run()
    except Interrupted as stop:  # raised again by the server once the requests in flight were answered
        _stopped_by(stop, "the requests in flight were answered")
    click.echo("stopped")


def _stopped_by(stop: Interrupted, done: str) -> None:
    """The server's last line, and the exit status of a verb a signal stopped (128 + the signal: 143, 130)."""
    import signal

    click.echo(f"stopped by {signal.Signals(stop.signum).name} ({done})")
    raise SystemExit(128 + stop.signum) from None


COMMAND = serve
