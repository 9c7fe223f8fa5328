"""``vitdeploy segment-all``: every object in an image, as the official SamAutomaticMaskGenerator finds them."""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from vitdeploy.cli.options import (force_option, handle_errors, ort_device_options, runtime_option, runtime_threads_option,
                                   sam_pair_options, verbose_option)


@click.command("segment-all")
@sam_pair_options
@click.option("--image", "-i", required=True, type=click.Path(dir_okay=False, path_type=str), help="Input image.")
@click.option("--output", "-o", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="JSON file of mask records (segmentation as COCO uncompressed RLE, area, bbox XYWH, predicted_iou, "
                   "point_coords, stability_score, crop_box: the official generator's records).")
@click.option("--overlay", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Picture of the masks over the image (default: next to --output, <stem>.overlay.png).")
@click.option("--points-per-side", type=click.IntRange(min=1), default=32, show_default=True,
              help="Grid of single-click prompts: N x N points.")
@click.option("--pred-iou-thresh", type=float, default=0.88, show_default=True, help="Keep masks whose predicted IoU exceeds this.")
@click.option("--stability-score-thresh", type=float, default=0.95, show_default=True,
              help="Keep masks whose stability score reaches this.")
@click.option("--stability-score-offset", type=float, default=1.0, show_default=True,
              help="Logit offset the stability score thresholds at.")
@click.option("--box-nms-thresh", type=float, default=0.7, show_default=True, help="Box IoU above which duplicates are dropped.")
@ort_device_options(("cpu", "cuda", "tensorrt"))
@runtime_option
@runtime_threads_option
@force_option
@verbose_option
@handle_errors
def segment_all(encoder: str, decoder: str, image: str, output: str, overlay: str | None, points_per_side: int,
                pred_iou_thresh: float, stability_score_thresh: float, stability_score_offset: float, box_nms_thresh: float,
                device: str, tf32: bool, allow_unverified: bool, runtime: str, threads: int, force: bool, verbose: bool) -> None:
    """Segment everything in an image: a grid of clicks, filtered and de-duplicated (SamAutomaticMaskGenerator).

    The official automatic mask generator's algorithm and defaults, on the exported models, without
    PyTorch (vitdeploy.runtime.mask_generator; crop layers and the OpenCV small-region clean-up are
    not ported). Each grid point is one decoder call.

    \b
    Examples:
      vitdeploy segment-all -e sam_vit_b.onnx -d sam_vit_b_decoder.onnx -i street.jpg -o street_masks.json
      vitdeploy segment-all -e enc.onnx -d dec.onnx -i cells.png -o cells.json --points-per-side 16 --pred-iou-thresh 0.8
    """
    from vitdeploy.errors import InputError
    from vitdeploy.fileio import atomic_write_bytes, claim_outputs, require_model_file

    out_path = Path(output)
    if out_path.suffix.lower() != ".json":
        raise InputError(f"--output '{output}' must be a .json file (mask records)")
    overlay_path = Path(overlay) if overlay else out_path.with_name(out_path.stem + ".overlay.png")
    claim_outputs([out_path, overlay_path], force)
    require_model_file(encoder)
    require_model_file(decoder)
    from vitdeploy.cli.progress import StageProgress, format_seconds
    from vitdeploy.runtime.images import read_image_rgb
    from vitdeploy.runtime.mask_generator import SamAutomaticMaskGenerator, rle_to_mask
    from vitdeploy.runtime.overlay import overlay_masks, save_png
    from vitdeploy.runtime.sam_predictor import SamPredictor

    notes: list[str] = []
    picture = read_image_rgb(image, notes)
    for note in notes:
        click.echo(f"note: {note}", err=True)
    predictor = SamPredictor(encoder, decoder, device=device, threads=threads, tf32=tf32, allow_unverified=allow_unverified,
                             runtime=runtime)
    generator = SamAutomaticMaskGenerator(
        predictor, points_per_side=points_per_side, pred_iou_thresh=pred_iou_thresh,
        stability_score_thresh=stability_score_thresh, stability_score_offset=stability_score_offset,
        box_nms_thresh=box_nms_thresh, output_mode="uncompressed_rle")
    progress = StageProgress()
    click.echo(f"segmenting {Path(image).name} ({picture.shape[1]}x{picture.shape[0]}): {points_per_side}x{points_per_side} "
               f"points, {predictor.variant}, {predictor.encoder.name}")
    start = time.perf_counter()
    records = generator.generate(picture, progress=lambda d, t: progress("decoding the grid of points", d, t))
    seconds = time.perf_counter() - start
    data = {"image": image, "size": [int(picture.shape[0]), int(picture.shape[1])], "encoder": encoder, "decoder": decoder,
            "options": vars(generator.options), "seconds": round(seconds, 3), "masks": records}
    atomic_write_bytes(out_path, json.dumps(data).encode())
    save_png(overlay_masks(picture, [rle_to_mask(r["segmentation"]) for r in records]), overlay_path)
    points = points_per_side ** 2
    click.echo(f"{len(records)} mask(s) from {points} points in {format_seconds(seconds)} ({points / seconds:.1f} points/s, "
               f"decoder batch 1); wrote {out_path} and {overlay_path}")


COMMAND = segment_all
