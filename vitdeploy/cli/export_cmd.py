"""``vitdeploy export``: official model + checkpoint -> rewritten, checked ONNX file."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import click

from vitdeploy.cli.groups import Outputs, option_group, outputs_group
from vitdeploy.cli.options import handle_errors, model_source_options, verbose_option
from vitdeploy.targets import DEFAULT_TARGET, TARGET_NAMES, TARGETS


@dataclass(frozen=True)
class Source:
    """Where the eager model comes from: a recipe, its weights (a checkpoint, or seeded random ones)."""

    recipes: tuple[str, ...]
    checkpoint: str | None
    random_weights: bool
    seed: int


@dataclass(frozen=True)
class Shapes:
    """The graph's static input: its size and batch."""

    input_size: int | None
    old_image_size: int | None
    batch: int
    dynamic_batch: bool


@click.command("export")
@option_group("source", Source,
    model_source_options)
@click.option("--output", "-o", "outputs_written", required=True, multiple=True,
              type=click.Path(dir_okay=False, path_type=str), help="ONNX file to write (one per --recipe, in order).")
@option_group("shapes", Shapes,
    click.option("--input-size", type=click.IntRange(min=1), default=None,
                 help="Static input size in pixels (square); default: the recipe's img_size. A multiple of the patch size."),
    click.option("--image-size", "old_image_size", type=click.IntRange(min=1), default=None, hidden=True),
    click.option("--batch", type=click.IntRange(min=1), default=1, show_default=True, help="Static batch size."),
    click.option("--dynamic-batch", is_flag=True, help="Make the batch axis dynamic (symbolic 'batch')."))
@click.option("--opset", type=click.IntRange(min=17), default=None, help="ONNX opset (default: the recipe's, 18).")
@click.option("--layernorm2d", type=click.Choice(["matmul", "native"]), default=None,
              help="SAM recipes: LayerNorm2d form (encoder neck, decoder upscaler): channel statistics by MatMul "
                   "(default), or the LayerNormalization op (TensorRT FP16).")
@click.option("--target", type=click.Choice(TARGET_NAMES), default=DEFAULT_TARGET, show_default=True,
              help="Runtime the SAM encoder graph is written for (same weights and numbers for all). "
                   + " ".join(f"{t.name}: {t.summary}." for t in TARGETS.values()))
@outputs_group()
@verbose_option
@handle_errors
def export(source: Source, outputs_written: tuple[str, ...], shapes: Shapes, opset: int | None, layernorm2d: str | None,
           target: str, outputs: Outputs, verbose: bool) -> None:
    """Export a model to a static, checked ONNX graph.

    \b
    Examples:
      vitdeploy export --recipe sam_vit_b --checkpoint sam_vit_b_01ec64.pth -o sam_vit_b.onnx
      vitdeploy export --recipe sam_vit_b --random-weights --seed 0 --input-size 512 -o demo_512.onnx
      vitdeploy export --recipe sam_vit_b --checkpoint sam_vit_b_01ec64.pth --target onnxruntime-cpu -o sam_b_cpu.onnx
      vitdeploy export -r sam_vit_b -o sam_b.onnx -r sam_vit_b_decoder -o sam_b_decoder.onnx -c sam_vit_b_01ec64.pth
    """
    from vitdeploy.errors import InputError
    from vitdeploy.families import ExportOptions
    from vitdeploy.fileio import atomic_write_bytes, claim_outputs
    from vitdeploy.optional_packages import require_torch_side
    from vitdeploy.pipeline import check_export_request, export_checked_all

    recipes, report = source.recipes, outputs.report
    if len(recipes) != len(outputs_written):
        raise InputError(f"{len(recipes)} recipe(s) and {len(outputs_written)} output(s): give one -o per -r, "
                         "in the same order")
    if len({Path(o).resolve() for o in outputs_written}) < len(outputs_written):
        raise InputError("two recipes are given the same -o file: give each its own")
    # What a user can get wrong is checked before torch is imported (seconds): the answer comes at once.
    input_size = _renamed_option(shapes.input_size, shapes.old_image_size)
    claim_outputs([*outputs_written, report], outputs.force)
    options = ExportOptions(checkpoint=source.checkpoint, random_seed=source.seed if source.random_weights else None,
                            input_size=input_size, batch=shapes.batch, dynamic_batch=shapes.dynamic_batch, opset=opset,
                            layernorm2d=layernorm2d, target=target)
    checked = [(*check_export_request(recipe, output, options), output) for recipe, output in zip(recipes, outputs_written)]
    require_torch_side("'vitdeploy export' (the eager official model)")
    results = export_checked_all(checked, options, echo=click.echo)
    for result in results:
        ops = ", ".join(f"{k} {v}" for k, v in sorted(result.hygiene.op_counts.items()))
        click.echo(f"wrote {result.path} ({result.size_bytes / 1e6:.1f} MB): inputs {result.input_shapes}, "
                   f"outputs {result.output_shapes}")
        click.echo(f"graph hygiene: clean; nodes: {ops}")
    if report:  # one export: its report; several: {"exports": [each report, in order]}
        body = results[0].to_dict() if len(results) == 1 else {"exports": [r.to_dict() for r in results]}
        atomic_write_bytes(report, json.dumps(body, indent=2).encode())
        click.echo(f"report: {Path(report)}")


COMMAND = export


def _renamed_option(input_size: int | None, old_image_size: int | None) -> int | None:
    """``--image-size`` (the option's name until 0.1) still works, with a note; both at once must agree."""
    from vitdeploy.errors import InputError

    if old_image_size is None:
        return input_size
    if input_size is not None and input_size != old_image_size:
        raise InputError(f"--input-size {input_size} and --image-size {old_image_size} disagree: "
                         "give --input-size only (--image-size is its old name)")
    click.echo("note: --image-size is now called --input-size", err=True)
    return old_image_size
