"""``vitdeploy optimize``: an ``onnxruntime-cpu`` or ``tensorrt`` export -> the graph vitdeploy runs on the CPU, as a file."""

from __future__ import annotations

import json

import click

from vitdeploy.cli.options import force_option, handle_errors, verbose_option


@click.command("optimize")
@click.argument("model", type=click.Path(dir_okay=False, path_type=str))
@click.option("--output", "-o", required=True, type=click.Path(dir_okay=False, path_type=str), help="ONNX file to write.")
@click.option("--fused-attention", is_flag=True,
              help="Swap in vitdeploy's fused rel-pos attention kernel where this CPU takes a vector path (the file "
                   "then needs libvitdeploy_ort_ops.so, built by 'bash cpp/build.sh'). Default: the global blocks' "
                   "attention with the rel-pos term as an attention bias (standard ONNX Runtime ops).")
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
@force_option
@verbose_option
@handle_errors
def optimize(model: str, output: str, fused_attention: bool, as_json: bool, force: bool, verbose: bool) -> None:
    """Write the CPU form of a --target onnxruntime-cpu (or tensorrt) export: what vitdeploy's runner runs, as a file.

    vitdeploy's Python runner does not run such an export as written: at load time it gives the
    global blocks' folded attention its rel-pos term as an attention bias (faster on the CPU), or
    swaps in vitdeploy's fused kernel (--fused-attention). Programs that open the file themselves
    (the C++ app, your own ONNX Runtime session) run the slower folded form. This writes the
    transformed graph once, with the weights, so they run the same graph; its metadata says which
    form it holds. Keep the exported file: it is the portable one (TensorRT, GPUs, OpenVINO); the
    CPU form runs on ONNX Runtime's CPU provider only. INT8 files from that target work the same.
    A --target tensorrt export's attention (MatMul-Softmax-MatMul, TensorRT's pattern) is written as
    ONNX Runtime's MultiHeadAttention first, as the runner runs it.

    \b
    Examples:
      vitdeploy optimize sam_vit_b.onnx -o sam_vit_b.cpu.onnx
      vitdeploy optimize sam_vit_b.onnx -o sam_vit_b.fused.onnx --fused-attention
      sam_cli --encoder sam_vit_b.fused.onnx --ort-ops cpp/build/libvitdeploy_ort_ops.so ...
    """
    from vitdeploy.fileio import require_onnx_file

    require_onnx_file(model)  # before the imports below
    from vitdeploy.cpu_optimize import write_cpu_form

    result = write_cpu_form(model, output, fused_attention=fused_attention, force=force)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
        return
    click.echo(f"wrote {', '.join(str(f) for f in result.files)}: {result.form.summary()}")
    if result.form.kept:
        from vitdeploy.runtime.forms.folded_attention import kept_reasons

        click.echo(f"  {len(result.form.kept)} attention node(s) left as exported ({kept_reasons(result.form.kept)})")
    if fused_attention:
        click.echo("  runs on ONNX Runtime with libvitdeploy_ort_ops.so registered: vitdeploy's runner does it itself "
                   "(VITDEPLOY_ORT_OPS or cpp/build), sam_cli with --ort-ops")


COMMAND = optimize
