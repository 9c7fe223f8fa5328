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
    """Add every verb: each lives in ``vitdeploy/cli/<verb>_cmd.py`` as a click command named ``COMMAND``.

    Importing them is cheap: heavy imports (torch, onnxruntime, tensorrt) happen inside the commands.
    """
    import importlib
    import pkgutil

    import vitdeploy.cli as package

    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name.endswith("_cmd"):
            module = importlib.import_module(f"vitdeploy.cli.{info.name}")
            cli.add_command(module.COMMAND)


_register()


def main() -> None:
    cli(prog_name="vitdeploy")
