"""``vitdeploy validate``: parity table and latency of a deployed model against the eager official model."""

from __future__ import annotations

import json
from dataclasses import dataclass

import click

from vitdeploy.cli.groups import Outputs, Timing, option_group, outputs_group
from vitdeploy.cli.options import (fused_attention_option, handle_errors, ort_device_options, runtime_option,
                                   threads_option, verbose_option)


@dataclass(frozen=True)
class Inputs:
    """What the model and the eager reference are compared on: images, seeded random inputs, saved inputs."""

    images: tuple[str, ...]
    random_inputs: int
    load_inputs: tuple[str, ...]


@dataclass(frozen=True)
class Running:
    """Where and how the deployed file runs."""

    device: str
    tf32: bool
    runtime: str
    inference_precision: str
    fused_attention: bool | None
    folded_attention: bool
    threads: int


@click.command("validate")
@click.argument("model", type=click.Path(dir_okay=False, path_type=str))
@click.option("--checkpoint", "-c", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="The checkpoint the model was exported from (not needed for --random-weights exports).")
@option_group("inputs", Inputs,
    click.option("--images", "-i", multiple=True, type=click.Path(path_type=str),
                 help="Image files or folders, run through the model's own preprocessing (repeatable)."),
    click.option("--random-inputs", type=click.IntRange(min=0), default=2, show_default=True,
                 help="How many seeded random inputs to compare."),
    click.option("--load-inputs", multiple=True, type=click.Path(dir_okay=False, path_type=str),
                 help="Saved model inputs to compare on (repeatable): .npz (numpy.savez, arrays named by input) or .json "
                      "(polygraphy run --save-inputs), as Polygraphy's --load-inputs."))
@click.option("--tolerance", type=click.Choice(["auto", "fp32", "fp16", "bf16", "int8"]), default="auto", show_default=True,
              help="Named tolerance set; auto picks the one for the model's precision (from its metadata).")
@option_group("timing", Timing,
    click.option("--runs", type=click.IntRange(min=0), default=5, show_default=True, help="Timed runs per backend (0: no timing)."),
    click.option("--warmup", type=click.IntRange(min=0), default=1, show_default=True, help="Untimed warm-up runs."))
@option_group("running", Running,
    ort_device_options(("cpu", "cuda", "tensorrt"), "ONNX Runtime execution provider for the ONNX model (the eager reference "
                      "runs on the CPU in FP32). Combinations vitdeploy has not verified run here: this is the check.",
                      allow_unverified=False),
    runtime_option,
    fused_attention_option,
    threads_option)
@outputs_group()
@verbose_option
@handle_errors
def validate(model: str, checkpoint: str | None, inputs: Inputs, tolerance: str, timing: Timing, running: Running,
             outputs: Outputs, verbose: bool) -> None:
    """Compare a deployed model with the eager official model on the same inputs.

    Prints max-abs, relative L2, cosine and NaN/Inf counts against named tolerances, then the
    latency of eager PyTorch and ONNX Runtime with the same thread count. Exit code 1 when a
    tolerance fails.

    \b
    Examples:
      vitdeploy validate sam_vit_b.onnx --checkpoint sam_vit_b_01ec64.pth --images photos/
      vitdeploy validate demo.onnx --runs 10 --report demo-validate.json
      vitdeploy validate sam_vit_b_decoder.onnx --load-inputs prompts.npz --random-inputs 0
      vitdeploy validate sam_vit_b.onnx --runtime openvino --images photos/
    """
    images, random_inputs, load_inputs = inputs.images, inputs.random_inputs, inputs.load_inputs
    runs, warmup = timing.runs, timing.warmup
    device, tf32, runtime, inference_precision, fused_attention, folded_attention, threads = (
        running.device, running.tf32, running.runtime, running.inference_precision, running.fused_attention, running.folded_attention, running.threads)
    report, force = outputs.report, outputs.force
    from vitdeploy.errors import ParityError
    from vitdeploy.fileio import atomic_write_bytes, claim_outputs, require_checkpoint_file, require_model_file
    from vitdeploy.optional_packages import require_torch_side

    require_model_file(model)  # before the imports below (torch: seconds)
    if checkpoint:
        require_checkpoint_file(checkpoint)
    claim_outputs([report], force)
    require_torch_side("'vitdeploy validate' (the eager official model is its reference)")
    from vitdeploy.validation.validate_model import ValidateOptions, validate_model

    options = ValidateOptions(checkpoint=checkpoint, images=images, random_inputs=random_inputs, load_inputs=load_inputs,
                              tolerance=tolerance, runs=runs, warmup=warmup, device=device, tf32=tf32,
                              runtime=runtime, inference_precision=inference_precision, fused_attention=fused_attention,
                              folded_attention=folded_attention, threads=threads)
    result = validate_model(model, options, echo=click.echo)
    if result.latency:
        click.echo(f"latency, {threads} thread(s), median / p90:")
        for lat in result.latency:
            click.echo(f"  {lat.label:<22} {lat.median_ms:10.1f} ms {lat.p90_ms:10.1f} ms")
        click.echo(f"  ratio {result.latency[1].label} / eager: {result.latency_ratio:.3f}")
    if report:
        atomic_write_bytes(report, json.dumps(result.to_dict(), indent=2).encode())
        click.echo(f"report: {report}")
    if not result:
        failed = sum(1 for p in result.parity if not p)
        raise ParityError(f"{failed} of {len(result.parity)} comparisons exceed the '{result.tolerance.name}' tolerances (see the table above)")
    click.echo("parity: all comparisons within tolerance")


COMMAND = validate
