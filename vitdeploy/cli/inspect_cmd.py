"""``vitdeploy inspect``: what an ONNX file or TensorRT engine is, without running it."""

from __future__ import annotations

import json

import click

from vitdeploy.cli.options import handle_errors, verbose_option


@click.command("inspect")
@click.argument("artifact", type=click.Path(dir_okay=False, path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print the facts as JSON instead of text.")
@click.option("--no-verify", is_flag=True, help="Engines: skip hashing the plan against its sidecar's SHA-256.")
@verbose_option
@handle_errors
def inspect(artifact: str, as_json: bool, no_verify: bool, verbose: bool) -> None:
    """Show an artifact's inputs, outputs, precision, op counts and vitdeploy metadata.

    Exit code 1 when the artifact is damaged (weights file cut short, metadata of the wrong type or
    contradicting the graph, a plan that no longer matches its sidecar); every problem is listed.

    ONNX files are read without their weights; TensorRT engines through their JSON sidecar (no
    TensorRT or GPU needed), with the plan checked against the SHA-256 recorded at build time.

    \b
    Examples:
      vitdeploy inspect sam_vit_b.onnx
      vitdeploy inspect sam_vit_b.fp16.onnx --json
      vitdeploy inspect sam_vit_b.plan
    """
    from vitdeploy.artifact_info import describe, inspect_artifact

    from vitdeploy.errors import InputError

    info = inspect_artifact(artifact, verify=not no_verify)
    if as_json:
        click.echo(json.dumps(info, indent=2, default=str))
    else:
        for line in describe(info):
            click.echo(line)
    problems = info.get("problems", [])
    if problems:  # a damaged artifact is not reported healthy: exit 1, the first problem as the error line
        more = f" (+{len(problems) - 1} more above)" if len(problems) > 1 else ""
        raise InputError(f"'{artifact}' is damaged: {problems[0]}{more}; export or build it again")


COMMAND = inspect
