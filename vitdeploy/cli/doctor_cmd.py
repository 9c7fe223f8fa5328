"""``vitdeploy doctor``: what this machine can do (torch, ONNX Runtime, TensorRT, GPU) and which verbs work."""

from __future__ import annotations

import json

import click

from vitdeploy.cli.options import force_option, handle_errors, report_option, verbose_option


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON instead of a table.")
@click.option("--deep", is_flag=True, help="Import every package (torch, segment_anything, timm, ...) instead of reading "
                                           "their installed metadata: slower, catches broken installs.")
@report_option
@force_option
@verbose_option
@handle_errors
def doctor(as_json: bool, deep: bool, report: str | None, force: bool, verbose: bool) -> None:
    """Say what this machine can do and which verbs will work here.

    Loads ONNX Runtime (and lists its providers), TensorRT, cuda-python and the GPU; finds PyTorch and
    the other packages with their versions (imports them with --deep). Always exits 0: it reports, it does not judge.

    \b
    Examples:
      vitdeploy doctor
      vitdeploy doctor --json --report machine.json
    """
    from vitdeploy.doctor import diagnose
    from vitdeploy.fileio import atomic_write_bytes, claim_outputs

    claim_outputs([report], force)
    group = click.get_current_context().parent
    verbs = sorted(group.command.commands) if group is not None and isinstance(group.command, click.Group) else []
    result = diagnose(verbs, deep)
    text = json.dumps(result.to_dict(), indent=2)
    click.echo(text if as_json else result.text())
    if report:
        atomic_write_bytes(report, text.encode())
        click.echo(f"report: {report}", err=as_json)


COMMAND = doctor
