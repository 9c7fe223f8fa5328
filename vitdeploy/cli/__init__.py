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


#: Every verb, in ``--help`` order (Polygraphy's ``tools/registry.py``): each module holds one click command named
#: ``COMMAND``. A new verb is a line here; importing them is cheap (heavy imports happen inside the commands).
VERB_MODULES: tuple[str, ...] = (
    "benchmark_cmd",
    "build_engine_cmd",
    "calibrate_cmd",
    "doctor_cmd",
    "embed_cmd",
    "export_cmd",
    "inspect_cmd",
    "optimize_cmd",
    "predict_cmd",
    "segment_all_cmd",
    "segment_concept_cmd",
    "serve_cmd",
    "track_cmd",
    "tune_cmd",
    "validate_cmd",
    "web_cmd",
)


def _register() -> None:
    """Add every verb of :data:`VERB_MODULES`."""
    import importlib

    for name in VERB_MODULES:
        cli.add_command(importlib.import_module(f"vitdeploy.cli.{name}").COMMAND)


_register()


def main() -> None:
    cli(prog_name="vitdeploy")
