"""``vitdeploy tune``: the fastest deployment of a file on this machine that passes its parity budget, as a profile."""

from __future__ import annotations

import json
from dataclasses import dataclass

import click

from vitdeploy.cli.groups import Timing, option_group
from vitdeploy.cli.options import force_option, handle_errors, verbose_option
from vitdeploy.runtime.backends.registry import ONNX_RUNTIMES


@dataclass(frozen=True)
class Inputs:
    """What every candidate is judged on: images (or seeded random inputs) and clicks through the decoder."""

    images: tuple[str, ...]
    max_images: int
    random_inputs: int
    clicks: int


@dataclass(frozen=True)
class Grid:
    """The candidates: thread counts, runtimes, and how many the probe sends to be judged in full."""

    threads: tuple[int, ...]
    runtimes: tuple[str, ...]
    finalists: int


@click.command("tune")
@click.argument("model", type=click.Path(dir_okay=False, path_type=str))
@click.option("--decoder", "-d", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="SAM encoders: gate each candidate also by the masks of seeded clicks through this decoder (as written).")
@click.option("--reference", "-r", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="INT8 or FP16 files: the FP32 file of the same model to judge every candidate against. "
                   "[default: MODEL itself, as written on ONNX Runtime]")
@option_group("inputs", Inputs,
    click.option("--images", "-i", multiple=True, type=click.Path(path_type=str),
                 help="Held-out images (files or folders; repeatable). [default: the last --max-images bundled images]"),
    click.option("--max-images", type=click.IntRange(min=1), default=4, show_default=True, help="Images used at most."),
    click.option("--random-inputs", type=click.IntRange(min=1), default=2, show_default=True,
                 help="Models that do not take images (the SAM decoder): seeded random input sets."),
    click.option("--clicks", type=click.IntRange(min=1), default=5, show_default=True, help="Clicks per image with --decoder."))
@option_group("timing", Timing,
    click.option("--runs", type=click.IntRange(min=1), default=3, show_default=True,
                 help="Timed runs per candidate, at least (its parity runs count)."),
    click.option("--warmup", type=click.IntRange(min=0), default=1, show_default=True,
                 help="Untimed runs before them (its first parity runs)."))
@option_group("grid", Grid,
    click.option("--threads", "threads", multiple=True, type=click.IntRange(min=1),
                 help="Thread counts to try (repeatable). [default: all cores this process may use, and half of them for the "
                      "probe's leader where that can win (SMT siblings, or a short run); with --finalists 0, 1 and all "
                      "cores]"),
    click.option("--runtime", "runtimes", multiple=True, type=click.Choice(ONNX_RUNTIMES),
                 help="Runtimes to try (repeatable). [default: every one installed]"),
    click.option("--finalists", type=click.IntRange(min=0), default=3, show_default=True,
                 help="Candidates judged in full at most, after the probe ranked all of them on a part of the graph (those "
                      "within 1.5x of the leader there; 0: judge every candidate in full, no probe)."))
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Where to write the profile. [default: beside MODEL, <stem>.profile.json, where --runtime auto reads it]")
@click.option("--json", "as_json", is_flag=True, help="Print the profile's candidates as JSON.")
@force_option
@verbose_option
@handle_errors
def tune(model: str, decoder: str | None, reference: str | None, inputs: Inputs, timing: Timing, grid: Grid,
         output: str | None, as_json: bool, force: bool, verbose: bool) -> None:
    """Time every deployment of MODEL this machine supports and write the fastest that passes as its profile.

    The candidates are runtime x inference precision x ONNX Runtime attention form x threads (BF16 only on CPUs
    with AVX512-BF16 or AMX). The first-use probe ranks them all on a part of the graph; the --finalists fastest
    are judged in full. Each runs on held-out inputs against the file as written on ONNX Runtime and is
    judged by the parity budget of the precision it runs at ('vitdeploy validate' budgets); with --decoder, SAM
    masks through the decoder are judged by the mask budget too. An INT8 or FP16 file is judged against the FP32
    file it was made from with --reference (the same model: its metadata and tensors are checked), so its profile
    says which runtime, form and threads run it fastest within its budget of FP32. The profile records this machine, the runtime
    versions and the file's SHA-256: 'predict', 'segment-all', 'benchmark --runtime auto' and SamPredictor use it
    only where all of them match.

    \b
    Examples:
      vitdeploy tune sam_vit_b.onnx -d sam_vit_b_decoder.onnx
      vitdeploy tune deit_small.onnx --images photos/ --threads 2
      vitdeploy tune sam_vit_b.int8.onnx -r sam_vit_b.onnx -d sam_vit_b_decoder.onnx
    """
    images, max_images, random_inputs, clicks = inputs.images, inputs.max_images, inputs.random_inputs, inputs.clicks
    runs, warmup = timing.runs, timing.warmup
    threads, runtimes, finalists = grid.threads, grid.runtimes, grid.finalists
    from pathlib import Path

    from vitdeploy.fileio import claim_outputs, require_onnx_file
    from vitdeploy.runtime.deploy.profiles import profile_path
    from vitdeploy.tune import TuneOptions, summary_lines, tune as run_tune

    path = require_onnx_file(model)
    for other in (decoder, reference):
        if other:
            require_onnx_file(other)
    target = Path(output) if output else profile_path(path)
    claim_outputs([target], force)
    options = TuneOptions(images=images, max_images=max_images, random_inputs=random_inputs, decoder=decoder,
                          clicks=clicks, runs=runs, warmup=warmup, threads=threads, runtimes=runtimes,
                          reference=reference, finalists=finalists)
    report = run_tune(path, options, target, echo=lambda line: click.echo(line, err=as_json))
    if as_json:
        click.echo(json.dumps(json.loads(target.read_text())["candidates"], indent=2))
        return
    click.echo("ranking (passing first, fastest first):")
    for line in summary_lines(report):
        click.echo(f"  {line}")


COMMAND = tune
