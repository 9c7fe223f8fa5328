"""``vitdeploy optimize``: an export -> the graph vitdeploy runs on a CPU runtime, as a file (ONNX Runtime's CPU form of an
``onnxruntime-cpu`` or ``tensorrt`` export, or OpenVINO's form of an FP32 export)."""

from __future__ import annotations

import json

import click

from vitdeploy.cli.options import force_option, handle_errors, verbose_option


@click.command("optimize")
@click.argument("model", type=click.Path(dir_okay=False, path_type=str))
@click.option("--output", "-o", required=True, type=click.Path(dir_okay=False, path_type=str), help="ONNX file to write.")
@click.option("--runtime", type=click.Choice(["onnxruntime", "openvino"]), default="onnxruntime", show_default=True,
              help="The runtime the file is for: onnxruntime writes the CPU form of an onnxruntime-cpu or tensorrt "
                   "export; openvino writes an FP32 export with its GELUs kept apart from their GEMMs (what "
                   "vitdeploy's OpenVINO runner does at load time on x86 CPUs with AVX2 and without AVX-512).")
@click.option("--fused-attention", is_flag=True,
              help="Swap in vitdeploy's fused rel-pos attention kernel where this CPU takes a vector path (the file "
                   "then needs libvitdeploy_ort_ops.so, built by 'bash cpp/build.sh'). Default: the global blocks' "
                   "attention with the rel-pos term as an attention bias (standard ONNX Runtime ops).")
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
@force_option
@verbose_option
@handle_errors
def optimize(model: str, output: str, runtime: str, fused_attention: bool, as_json: bool, force: bool,
             verbose: bool) -> None:
    """Write the form of an export that vitdeploy's runner runs on a CPU runtime, as a file.

    vitdeploy's Python runner does not run such an export as written: at load time it gives the
    global blocks' folded attention its rel-pos term as an attention bias (faster on the CPU), or
    swaps in vitdeploy's fused kernel (--fused-attention). Programs that open the file themselves
    (the C++ app, your own ONNX Runtime session) run the slower folded form. This writes the
    transformed graph once, with the weights, so they run the same graph; its metadata says which
    form it holds. Keep the exported file: it is the portable one (TensorRT, GPUs, OpenVINO); the
    CPU form runs on ONNX Runtime's CPU provider only. INT8 files from that target work the same.
    A --target tensorrt export's attention (MatMul-Softmax-MatMul, TensorRT's pattern) is written as
    ONNX Runtime's MultiHeadAttention first, as the runner runs it.

    With --runtime openvino it writes an FP32 export (any --target) with each GELU kept apart from
    the GEMM before it, as vitdeploy's OpenVINO runner reads it on x86 CPUs with AVX2 and without
    AVX-512: OpenVINO then runs those GEMMs on MLAS instead of fusing the GELU into a slower kernel.
    For applications that read the file with their own OpenVINO; ONNX Runtime runs it too, without
    its GELU fusion (run the exported file there).

    \b
    Examples:
      vitdeploy optimize sam_vit_b.onnx -o sam_vit_b.cpu.onnx
      vitdeploy optimize sam_vit_b.onnx -o sam_vit_b.fused.onnx --fused-attention
      sam_cli --encoder sam_vit_b.fused.onnx --ort-ops cpp/build/libvitdeploy_ort_ops.so ...
      vitdeploy optimize sam_vit_b.onnx -o sam_vit_b.openvino.onnx --runtime openvino
    """
    from vitdeploy.errors import InputError
    from vitdeploy.fileio import require_onnx_file

    require_onnx_file(model)  # before the imports below
    if runtime == "openvino":
        if fused_attention:
            raise InputError("--fused-attention is ONNX Runtime's CPU form: leave it out with --runtime openvino")
        from vitdeploy.cpu_optimize import write_openvino_form

        written = write_openvino_form(model, output, force=force)
        click.echo(json.dumps(written.to_dict(), indent=2) if as_json
                   else f"wrote {', '.join(str(f) for f in written.files)}: {written.summary()}")
        return
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
