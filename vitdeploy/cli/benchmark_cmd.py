"""``vitdeploy benchmark``: latency and throughput of eager PyTorch, ONNX Runtime and TensorRT side by side."""

from __future__ import annotations

import json
from dataclasses import dataclass

import click

from vitdeploy.cli.groups import Outputs, option_group, outputs_group
from vitdeploy.cli.options import (fused_attention_option, handle_errors, ort_device_options, runtimes_option,
                                   threads_option, verbose_option)


@dataclass(frozen=True)
class Eager:
    """The eager PyTorch contenders: whether they run, in which precisions, from which weights."""

    eager: bool
    eager_precisions: tuple[str, ...]
    checkpoint: str | None


@dataclass(frozen=True)
class Timing:
    """What is timed: batches, timed runs after untimed warm-ups, input shapes."""

    batches: tuple[int, ...]
    runs: int
    warmup: int
    shapes: tuple[str, ...]


@dataclass(frozen=True)
class Running:
    """Where and how the deployed files run."""

    device: str
    tf32: bool
    allow_unverified: bool
    gpu: int
    runtimes: tuple[str, ...]
    inference_precision: str
    fused_attention: bool | None
    folded_attention: bool
    threads: int


@click.command("benchmark")
@click.argument("models", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=str))
@option_group("eager", Eager,
    click.option("--eager/--no-eager", default=True, show_default=True,
                 help="Time the official eager PyTorch model too (rebuilt from the first model's metadata)."),
    click.option("--eager-precision", "eager_precisions", multiple=True, type=click.Choice(["fp32", "fp16", "bf16"]),
                 help="Eager precision(s): fp32, or fp16/bf16 under torch.autocast (repeatable; default fp32)."),
    click.option("--checkpoint", "-c", type=click.Path(dir_okay=False, path_type=str), default=None,
                 help="Checkpoint the models were exported from (not needed for --random-weights exports)."))
@option_group("running", Running,
    ort_device_options(("cpu", "cuda"), "Where eager PyTorch and ONNX Runtime run (TensorRT engines always run on the GPU)."),
    click.option("--gpu", type=click.IntRange(min=0), default=0, show_default=True, help="CUDA device index for TensorRT engines."),
    runtimes_option,
    fused_attention_option,
    threads_option)
@option_group("timing", Timing,
    click.option("--batch", "batches", multiple=True, type=click.IntRange(min=1),
                 help="Batch size(s) to time (repeatable; default 1). Static-batch models skip other sizes."),
    click.option("--runs", type=click.IntRange(min=1), default=20, show_default=True, help="Timed runs per contender and batch."),
    click.option("--warmup", type=click.IntRange(min=0), default=3, show_default=True, help="Untimed warm-up runs."),
    click.option("--shapes", multiple=True,
                 help="Sizes of dynamic axes other than the batch, as trtexec: NAME:DxDx...[,NAME:...] (e.g. the SAM "
                      "decoder's point_coords:1x5x2,point_labels:1x5). The batch axis follows --batch."))
@outputs_group()
@verbose_option
@handle_errors
def benchmark(models: tuple[str, ...], eager: Eager, running: Running, timing: Timing, outputs: Outputs,
              verbose: bool) -> None:
    """Time deployed models (.onnx with ONNX Runtime, .plan with TensorRT) against eager PyTorch.

    Prints median / p90 / p99 latency, throughput and the speed-up over the first contender (the
    eager FP32 model unless --no-eager) for every batch size, with the device, thread count,
    precision and versions in the JSON report.

    \b
    Examples:
      vitdeploy benchmark sam_vit_b.onnx --runs 10
      vitdeploy benchmark sam_vit_b.plan sam_vit_b_fp16.plan --device cuda --eager-precision fp32 --eager-precision fp16
      vitdeploy benchmark enc_dyn.onnx enc_dyn.plan --batch 1 --batch 4 --report bench.json
      vitdeploy benchmark sam_vit_b_decoder.onnx --shapes point_coords:1x5x2,point_labels:1x5
      vitdeploy benchmark sam_vit_b.onnx --runtime onnxruntime --runtime openvino
    """
    eager, eager_precisions, checkpoint = eager.eager, eager.eager_precisions, eager.checkpoint
    batches, runs, warmup, shapes = timing.batches, timing.runs, timing.warmup, timing.shapes
    device, tf32, allow_unverified, gpu, runtimes, inference_precision, fused_attention, folded_attention, threads = (
        running.device, running.tf32, running.allow_unverified, running.gpu, running.runtimes, running.inference_precision, running.fused_attention, running.folded_attention, running.threads)
    report, force = outputs.report, outputs.force
    from vitdeploy.fileio import require_model_file

    for path in models:  # before the imports below (torch: seconds)
        require_model_file(path)
    from vitdeploy.benchmark.report import TIMING
    from vitdeploy.benchmark.run import BenchmarkOptions, benchmark_models
    from vitdeploy.fileio import atomic_write_bytes, claim_outputs
    from vitdeploy.optional_packages import require_torch_side

    claim_outputs([report], force)
    if eager:
        require_torch_side("benchmark's eager PyTorch row", "--no-eager to time the deployed models alone")
    options = BenchmarkOptions(eager=eager, eager_precisions=eager_precisions, checkpoint=checkpoint,
                               device=device, tf32=tf32, allow_unverified=allow_unverified, gpu=gpu,
                               batches=batches or (1,), runs=runs, warmup=warmup, shapes=shapes,
                               fused_attention=fused_attention, folded_attention=folded_attention, threads=threads, runtimes=runtimes,
                               inference_precision=inference_precision)
    result = benchmark_models(models, options, echo=click.echo)
    click.echo(f"latency over {runs} runs after {warmup} warm-up, {threads} CPU thread(s); {TIMING}")
    click.echo(result.table())
    if report:
        atomic_write_bytes(report, json.dumps(result.to_dict(), indent=2).encode())
        click.echo(f"report: {report}")


COMMAND = benchmark
