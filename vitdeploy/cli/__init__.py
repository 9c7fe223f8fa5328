"""Stage 8: the ``vitdeploy`` command line, a thin layer over the library's public functions."""

from __future__ import annotations

import click

from vitdeploy import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="vitdeploy")
@click.option("--verbose", "-v", is_flag=True, help="Show tracebacks for every command.")
@click.pass_context
def cli(ctx: click.Context, verbose: bool) -> None:
    """Export Vision Transformers (SAM, timm ViT) to ONNX and TensorRT, with measured parity and latency.

    \b
    Typical flow:
      vitdeploy export --recipe sam_vit_b --checkpoint sam_vit_b_01ec64.pth -o sam_vit_b.onnx
      vitdeploy validate sam_vit_b.onnx --checkpoint sam_vit_b_01ec64.pth
    """
    ctx.ensure_object(dict)
    ctx.obj["verbose"] = verbose


def _register() -> None:
    # Each command lives in its own module; importing them is cheap (heavy imports are inside commands).
    from vitdeploy.cli.export_cmd import export
    from vitdeploy.cli.validate_cmd import validate

    for command in (export, validate):
        cli.add_command(command)


_register()


def main() -> None:
    cli(prog_name="vitdeploy")
