"""``vitdeploy calibrate``: FP32 ONNX + calibration images -> FP16 or BF16 (mixed) or INT8 (Q/DQ) ONNX, with parity."""

from __future__ import annotations

import json
from dataclasses import dataclass

import click

from vitdeploy.cli.groups import Outputs, option_group, outputs_group
from vitdeploy.cli.options import handle_errors, threads_option, verbose_option


@dataclass(frozen=True)
class Data:
    """What the ranges are calibrated on: images or recorded feeds, how many, and how many are held out."""

    images: tuple[str, ...]
    feeds: str | None
    holdout: int
    min_images: int
    max_images: int | None


@dataclass(frozen=True)
class Method:
    """How ranges become scales, the accuracy target, the nodes kept in FP32, and per-layer sensitivity."""

    method: str
    percentile: float
    target_cosine: float | None
    keep_fp32: tuple[str, ...]
    sensitivity: bool


@dataclass(frozen=True)
class Cache:
    """Where the decoded calibration images are kept, or not."""

    cache_dir: str | None
    no_cache: bool


@dataclass(frozen=True)
class Eager:
    """The eager official model the result is held to: its checkpoint, or none."""

    checkpoint: str | None
    no_eager: bool


@click.command("calibrate")
@click.argument("model", type=click.Path(dir_okay=False, path_type=str))
@click.option("--precision", "-p", required=True, type=click.Choice(["fp16", "bf16", "int8"]),
              help="Target precision (bf16: for TensorRT on compute capability 8.0+, ONNX Runtime CUDA and OpenVINO).")
@click.option("--output", "-o", required=True, type=click.Path(dir_okay=False, path_type=str), help="ONNX file to write.")
@option_group("data", Data,
    click.option("--images", "-i", multiple=True, type=click.Path(path_type=str),
                 help="Calibration image files or folders (repeatable); default: the bundled procedural set, with a warning."),
    click.option("--feeds", type=click.Path(dir_okay=False, path_type=str), default=None,
                 help="Calibrate on input sets recorded in a real run instead of images (.npz, e.g. from 'vitdeploy track "
                      "--record-inputs memory_attention:FILE'): for graphs that take other graphs' outputs."),
    click.option("--holdout", type=click.IntRange(min=0), default=4, show_default=True,
                 help="Images held out of calibration to measure parity on."),
    click.option("--min-images", type=click.IntRange(min=1), default=8, show_default=True,
                 help="Refuse to calibrate on fewer usable images."),
    click.option("--max-images", type=click.IntRange(min=1), default=None, help="Use at most this many images."))
@option_group("method", Method,
    click.option("--method", type=click.Choice(["minmax", "percentile", "entropy"]), default="minmax", show_default=True,
                 help="INT8 activation range calibration."),
    click.option("--percentile", type=click.FloatRange(50, 100), default=99.999, show_default=True,
                 help="Percentile for --method percentile."),
    click.option("--target-cosine", type=click.FloatRange(0, 1), default=None,
                 help="Accuracy budget: worst cosine vs FP32 on held-out images. INT8: keep the most sensitive layers in "
                      "FP32 until it holds. FP16/BF16: default the 'fp16'/'bf16' tolerance (0.9999)."),
    click.option("--keep-fp32", multiple=True, help="Node name to keep in FP32 (repeatable)."),
    click.option("--sensitivity", is_flag=True, help="INT8: measure per-layer sensitivity even when no target is missed."))
@option_group("cache", Cache,
    click.option("--cache-dir", type=click.Path(file_okay=False, path_type=str), default=None,
                 help="Cache of decoded images (default ~/.cache/vitdeploy or $VITDEPLOY_CACHE_DIR)."),
    click.option("--no-cache", is_flag=True, help="Decode the images again and do not write the cache."))
@option_group("eager", Eager,
    click.option("--checkpoint", "-c", type=click.Path(dir_okay=False, path_type=str), default=None,
                 help="The checkpoint the model was exported from, for parity against the eager model."),
    click.option("--no-eager", is_flag=True, help="Skip parity against the eager official model."))
@threads_option
@outputs_group()
@verbose_option
@handle_errors
def calibrate(model: str, precision: str, output: str, data: Data, method: Method, cache: Cache, eager: Eager,
              threads: int, outputs: Outputs, verbose: bool) -> None:
    """Convert an FP32 ONNX export to FP16 or BF16 (mixed, FP32 islands) or INT8 (symmetric Q/DQ), calibrated on images.

    Images go through the model's own preprocessing (read from its metadata); a graph that takes other graphs'
    outputs (SAM 2's memory attention) calibrates on its inputs recorded in a real run (--feeds). Prints which nodes
    stayed in higher precision and why, and parity against the FP32 ONNX and the eager model on
    held-out images. The output carries the precision, method, image count and kept nodes in its
    metadata, so 'vitdeploy validate' applies the matching tolerance.

    \b
    Examples:
      vitdeploy calibrate sam_vit_b.onnx --precision fp16 -o sam_vit_b.fp16.onnx --images photos/
      vitdeploy calibrate sam_vit_b.onnx -p bf16 -o sam_vit_b.bf16.onnx --images photos/
      vitdeploy calibrate sam_vit_b.onnx -p int8 --method percentile --target-cosine 0.99 -o sam_vit_b.int8.onnx -i photos/
      vitdeploy calibrate sam2_memory_attention.onnx -p fp16 --feeds matt_inputs.npz -o sam2_memory_attention.fp16.onnx
    """
    images, feeds, holdout, min_images, max_images = (
        data.images, data.feeds, data.holdout, data.min_images, data.max_images)
    method, percentile, target_cosine, keep_fp32, sensitivity = (
        method.method, method.percentile, method.target_cosine, method.keep_fp32, method.sensitivity)
    cache_dir, no_cache = cache.cache_dir, cache.no_cache
    checkpoint, no_eager = eager.checkpoint, eager.no_eager
    report, force = outputs.report, outputs.force
    from vitdeploy.cli.progress import StageProgress, format_seconds
    from vitdeploy.fileio import atomic_write_bytes, claim_outputs, require_model_file

    require_model_file(model)  # before the imports below
    claim_outputs([output, report], force, inputs=[model])
    if not no_eager:
        from vitdeploy.optional_packages import require_torch_side

        require_torch_side("calibrate's parity against the eager official model", "--no-eager to skip that check")
    from vitdeploy.precision.calibrate import CalibrateOptions, calibrate_onnx
    from vitdeploy.precision.report import summarize

    options = CalibrateOptions(
        precision=precision, images=images, feeds=feeds, method=method, percentile=percentile, target_cosine=target_cosine,
        holdout=holdout, min_images=min_images, max_images=max_images, keep_fp32=keep_fp32, cache_dir=cache_dir,
        use_cache=not no_cache, sensitivity=sensitivity, checkpoint=checkpoint, eager=not no_eager, threads=threads,
    )
    progress = StageProgress()
    result = calibrate_onnx(model, output, options, echo=click.echo, progress=progress)
    click.echo(f"{len(result.kept)} of {result.node_count} node(s) in higher precision ({result.tool}):")
    for line in result.kept_lines():
        click.echo(line)
    if result.sensitivity:
        click.echo("most sensitive layers (worst cosine when quantized alone):")
        for s in result.sensitivity[:8]:
            click.echo(f"  {s['name']:<32} {s['op_type']:<8} {s['cosine_alone']:.6f}")
    where = "" if result.calibration.get("held_out") else " (on the calibration images: none held out, so flattering)"
    click.echo(f"parity vs FP32 ONNX{where}: {summarize(result.parity_fp32)}")
    if result.parity_eager:
        click.echo(f"parity vs eager official{where}: {summarize(result.parity_eager)}")
    elif result.eager_note:
        click.echo(result.eager_note)
    steps = ", ".join(f"{name.replace('_', ' ')} {format_seconds(sec)}" for name, sec in result.timings_s.items())
    click.echo(f"time: {format_seconds(sum(result.timings_s.values()))} ({steps})")
    stages = progress.times()
    if stages:
        click.echo("  stages: " + ", ".join(f"{name} {format_seconds(sec)}" for name, sec in stages.items()))
    if report:
        atomic_write_bytes(report, json.dumps({**result.to_dict(), "stage_times_s": stages}, indent=2).encode())
        click.echo(f"report: {report}")


COMMAND = calibrate
