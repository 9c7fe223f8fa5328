"""``vitdeploy segment-all``: every object in an image, as the official SamAutomaticMaskGenerator finds them."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import click

from vitdeploy.cli.dataset_jobs import run_dataset_job
from vitdeploy.cli.groups import Deploy, Job, Outputs, deploy_group, job_group, option_group, outputs_group
from vitdeploy.cli.options import echo_deployments, handle_errors, sam_pair_options, verbose_option


@dataclass(frozen=True)
class Generator:
    """The official automatic mask generator's settings, as its keywords (None: the model's generator's default).
    Every field is an option of :data:`generator_options`, whose defaults are the official generator's."""

    points_per_side: int
    pred_iou_thresh: float | None
    stability_score_thresh: float
    stability_score_offset: float
    box_nms_thresh: float
    crop_n_layers: int
    crop_nms_thresh: float
    crop_overlap_ratio: float
    crop_n_points_downscale_factor: int
    min_mask_region_area: int

    def keywords(self) -> dict:
        """What ``SamAutomaticMaskGenerator`` takes (the IoU threshold only where given: SAM 2's default differs)."""
        given = asdict(self)
        return {k: v for k, v in given.items() if v is not None}


#: The generator's options, defined once (``segment-all``'s one image and its dataset job alike).
generator_options = option_group(
    "generator", Generator,
    click.option("--points-per-side", type=click.IntRange(min=1), default=32, show_default=True,
                 help="Grid of single-click prompts: N x N points."),
    click.option("--pred-iou-thresh", type=float, default=None,
                 help="Keep masks whose predicted IoU exceeds this. [default: 0.88 for SAM, 0.8 for SAM 2 (the official "
                      "ones)]"),
    click.option("--stability-score-thresh", type=float, default=0.95, show_default=True,
                 help="Keep masks whose stability score reaches this."),
    click.option("--stability-score-offset", type=float, default=1.0, show_default=True,
                 help="Logit offset the stability score thresholds at."),
    click.option("--box-nms-thresh", type=float, default=0.7, show_default=True,
                 help="Box IoU above which duplicates are dropped."),
    click.option("--crop-n-layers", type=click.IntRange(min=0), default=0, show_default=True,
                 help="Run again on crops: layer i has (2**i)**2 overlapping crops (finds small objects; i+1 encoder "
                      "runs per layer)."),
    click.option("--crop-nms-thresh", type=float, default=0.7, show_default=True,
                 help="Box IoU above which duplicates across crops are dropped."),
    click.option("--crop-overlap-ratio", type=float, default=512 / 1500, show_default=True,
                 help="How much crops of the first layer overlap, as a fraction of the image's short side."),
    click.option("--crop-n-points-downscale-factor", type=click.IntRange(min=1), default=1, show_default=True,
                 help="Points per side in crop layer i: --points-per-side / FACTOR**i."),
    click.option("--min-mask-region-area", type=click.IntRange(min=0), default=0, show_default=True,
                 help="Fill holes and drop islands smaller than this many pixels (needs scipy: 'vitdeploy[amg]')."))


@click.command("segment-all")
@sam_pair_options
@click.option("--image", "-i", default=None, type=click.Path(dir_okay=False, path_type=str),
              help="Input image (or --images and --out-dir for many).")
@click.option("--output", "-o", default=None, type=click.Path(dir_okay=False, path_type=str),
              help="With --image: JSON file of mask records (segmentation as COCO RLE, area, bbox XYWH, predicted_iou, "
                   "point_coords, stability_score, crop_box XYWH: the official generator's records).")
@click.option("--overlay", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Picture of the masks over the image (default: next to --output, <stem>.overlay.png).")
@generator_options
@click.option("--use-m2m", is_flag=True,
              help="SAM 2: decode each candidate mask again with its own logits as the mask prompt (the official "
                   "use_m2m refinement).")
@click.option("--output-mode", type=click.Choice(["uncompressed_rle", "coco_rle"]), default=None,
              help="Segmentation encoding: COCO's uncompressed RLE, or its compressed string (pycocotools'). "
                   "[default: uncompressed_rle for --image, coco_rle for --images]")
@job_group(required=False)
@deploy_group(devices=("cpu", "cuda", "tensorrt"))
@outputs_group(report=False)
@verbose_option
@handle_errors
def segment_all(encoder: str, decoder: str, image: str, output: str, overlay: str | None, generator: Generator,
                use_m2m: bool, output_mode: str | None, job: Job, deploy: Deploy, outputs: Outputs, verbose: bool) -> None:
    """Segment everything in an image: a grid of clicks, filtered and de-duplicated (SamAutomaticMaskGenerator).

    SAM 2 files get SAM 2's generator (SAM2AutomaticMaskGenerator: its defaults, --use-m2m).
    The official automatic mask generator's algorithm, parameters and defaults, on the exported models,
    without PyTorch (vitdeploy.runtime.apps.sam.mask_generator): crop layers, the small-region clean-up (SciPy in
    place of OpenCV) and COCO RLE output included. Each grid point is one decoder call.

    \b
    With --images and --out-dir, a dataset job: every image of a folder, glob or list, masks as COCO RLE JSON
    lines (one line per image) in shards with a manifest; resumable, bad images recorded and skipped, in this
    process or on Ray (--ray), as 'vitdeploy embed'.

    \b
    Examples:
      vitdeploy segment-all -e sam_vit_b.onnx -d sam_vit_b_decoder.onnx -i street.jpg -o street_masks.json
      vitdeploy segment-all -e sam_vit_b.onnx -d sam_vit_b_decoder.onnx --images photos/ --out-dir masks/ --ray
      vitdeploy segment-all -e enc.onnx -d dec.onnx -i cells.png -o cells.json --points-per-side 16 --pred-iou-thresh 0.8
      vitdeploy segment-all -e enc.onnx -d dec.onnx -i street.jpg -o small.json --crop-n-layers 1 --min-mask-region-area 100
    """
    from vitdeploy.errors import InputError
    from vitdeploy.fileio import atomic_write_bytes, claim_outputs, require_model_file

    options = generator.keywords()
    images, out_dir, force = job.images, job.out_dir, outputs.force
    tf32, allow_unverified = deploy.tf32, deploy.allow_unverified
    if images is not None or out_dir is not None:
        if image is not None or output is not None or overlay is not None:
            raise click.UsageError("give either --image and --output (one image) or --images and --out-dir (a dataset job)")
        if images is None or out_dir is None:
            raise click.UsageError("a dataset job needs both --images and --out-dir")
        if tf32 or allow_unverified or use_m2m:
            raise click.UsageError("--tf32, --allow-unverified and --use-m2m are for one image (--image)")
        from vitdeploy.runtime.apps.datasets.job import job_config

        config = job_config("masks", {"encoder": encoder, "decoder": decoder}, deploy.options(in_process=False),
                            {**options, "output_mode": output_mode or "coco_rle"}, pooled=job.ray_address is not None)
        run_dataset_job(config, job, "segmenting")
        return
    if image is None or output is None:
        raise click.UsageError("give --image and --output (one image), or --images and --out-dir (a dataset job)")
    if job.shard_size is not None or job.ray_address is not None or job.workers is not None:
        raise click.UsageError("--shard-size, --ray and --workers are for a dataset job (--images and --out-dir)")
    output_mode = output_mode or "uncompressed_rle"
    out_path = Path(output)
    if out_path.suffix.lower() != ".json":
        raise InputError(f"--output '{output}' must be a .json file (mask records)")
    overlay_path = Path(overlay) if overlay else out_path.with_name(out_path.stem + ".overlay.png")
    claim_outputs([out_path, overlay_path], force)
    require_model_file(encoder)
    require_model_file(decoder)
    from vitdeploy.cli.progress import StageProgress, format_seconds
    from vitdeploy.runtime.processing.images import read_image_rgb
    from vitdeploy.runtime.apps.common.rle import coco_encode_rle
    from vitdeploy.runtime.apps.sam.mask_generator import rle_to_mask
    from vitdeploy.runtime.apps.verbs.overlay import overlay_masks, save_png
    from vitdeploy.runtime.apps.sam2.mask_generator import mask_generator_for
    from vitdeploy.runtime.apps.predictors import open_sam_predictor
    from vitdeploy.runtime.apps.sam2.image_predictor import Sam2ImagePredictor

    notes: list[str] = []
    picture = read_image_rgb(image, notes)
    for note in notes:
        click.echo(f"note: {note}", err=True)
    predictor = open_sam_predictor(encoder, decoder, for_generator=True, **deploy.predictor_keywords())
    echo_deployments(predictor.encoder, predictor.decoder)
    if use_m2m and not isinstance(predictor, Sam2ImagePredictor):
        raise InputError("--use-m2m is SAM 2's generator's: leave it out for SAM (1) files")
    amg = mask_generator_for(predictor, **options, **({"use_m2m": True} if use_m2m else {}),
                             output_mode="uncompressed_rle")
    progress = StageProgress()
    crops = f", {generator.crop_n_layers} crop layer(s)" if generator.crop_n_layers else ""
    side = generator.points_per_side
    click.echo(f"segmenting {Path(image).name} ({picture.shape[1]}x{picture.shape[0]}): {side}x{side} "
               f"points{crops}, {predictor.variant}, {predictor.encoder.name}")
    start = time.perf_counter()
    records = amg.generate(picture, progress=lambda d, t: progress("decoding the grid of points", d, t))
    seconds = time.perf_counter() - start
    masks = [rle_to_mask(r["segmentation"]) for r in records]
    if output_mode == "coco_rle":
        for record in records:
            record["segmentation"] = coco_encode_rle(record["segmentation"])
    data = {"image": image, "size": [int(picture.shape[0]), int(picture.shape[1])], "encoder": encoder, "decoder": decoder,
            "options": vars(amg.options), "seconds": round(seconds, 3), "masks": records}
    atomic_write_bytes(out_path, json.dumps(data).encode())
    save_png(overlay_masks(picture, masks), overlay_path)
    points = amg.point_count(picture.shape[:2])
    click.echo(f"{len(records)} mask(s) from {points} points in {format_seconds(seconds)} ({points / seconds:.1f} points/s, "
               f"decoder batch 1); wrote {out_path} and {overlay_path}")


COMMAND = segment_all
