"""``vitdeploy build-engine``: ONNX -> TensorRT engine (.plan) + JSON sidecar, strongly typed (classic TensorRT or TensorRT-RTX)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import click

from vitdeploy.cli.groups import Outputs, option_group, outputs_group
from vitdeploy.cli.options import handle_errors, verbose_option
from vitdeploy.engine.library import BUILDER_CHOICES


@dataclass(frozen=True)
class Build:
    """How TensorRT builds the engine: workspace, shape profiles, timing cache, optimization, compatibility, math, library and target GPUs."""

    workspace_mib: int | None
    batch_profile: tuple[int, int, int] | None
    input_profile: tuple[str, ...]
    timing_cache: str | None
    optimization_level: int | None
    hardware_compatibility: str
    version_compatible: bool
    tf32: bool
    legacy_fp16: bool
    builder: str
    compute_capabilities: tuple[str, ...]


@click.command("build-engine")
@click.argument("model", type=click.Path(dir_okay=False, path_type=str))
@click.option("--output", "-o", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="Engine file to write (its sidecar goes to OUTPUT.json).")
@option_group("build", Build,
    click.option("--workspace", "workspace_mib", type=click.IntRange(min=1), default=None,
                 help="Workspace memory pool limit in MiB (default: TensorRT's, the GPU's memory)."),
    click.option("--batch-profile", type=click.IntRange(min=1), nargs=3, default=None, metavar="MIN OPT MAX",
                 help="Batch range of a dynamic-batch model, and the batch TensorRT optimizes for."),
    click.option("--input-profile", "input_profile", multiple=True, metavar="NAME=MIN:OPT:MAX",
                 help="Shape range of one dynamic input, shapes like 1x5x2 (repeatable; e.g. a decoder's prompt count)."),
    click.option("--timing-cache", type=click.Path(dir_okay=False, path_type=str), default=None,
                 help="Tactic timing cache: read if it exists, written after the build (speeds up rebuilds)."),
    click.option("--optimization-level", type=click.IntRange(0, 5), default=None,
                 help="Builder optimization level 0-5 (default: TensorRT's, 3). Higher: longer build, maybe faster engine."),
    click.option("--hardware-compatibility", type=click.Choice(["none", "ampere_plus", "same_compute_capability"]),
                 default="none", show_default=True, help="GPUs the engine may run on besides this one's architecture."),
    click.option("--version-compatible", is_flag=True, help="Let later TensorRT releases run the engine (may be slower)."),
    click.option("--tf32", is_flag=True, help="Allow TF32 for FP32 tensors (faster on Ampere+; FP32 parity tolerances then do not hold)."),
    click.option("--legacy-fp16", is_flag=True,
                 help="TensorRT 10 only: weakly typed network with BuilderFlag.FP16 (TensorRT picks precisions). "
                      "Default and TensorRT 11: strongly typed, precision exactly as in the ONNX."),
    click.option("--builder", type=click.Choice(BUILDER_CHOICES), default="auto", show_default=True,
                 help="TensorRT library: 'auto' takes classic TensorRT where it imports, else TensorRT for RTX "
                      "(builds without a GPU; the engine runs on compute capability 8.0+ GPUs)."),
    click.option("--compute-capability", "compute_capabilities", multiple=True, metavar="X.Y",
                 help="TensorRT-RTX: a GPU compute capability to build for (repeatable; default 8.0, 8.6, 8.9, 12.0 "
                      "and later; 7.5 for Turing only when named)."))
@click.option("--log-file", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Write TensorRT's verbose build log here.")
@click.option("--device", type=click.IntRange(min=0), default=0, show_default=True,
              help="CUDA device index (classic TensorRT; TensorRT-RTX builds on the CPU).")
@outputs_group()
@verbose_option
@handle_errors
def build_engine(model: str, output: str, build: Build, log_file: str | None, device: int, outputs: Outputs,
                 verbose: bool) -> None:
    """Build a TensorRT engine from an ONNX model, with a JSON sidecar of its metadata.

    The network is strongly typed: TensorRT computes in exactly the precision the ONNX graph
    declares (FP32, FP16 mixed from 'vitdeploy calibrate', INT8 Q/DQ). Classic TensorRT 10/11 needs
    an NVIDIA GPU, polygraphy and cuda-python; TensorRT for RTX ('pip install vitdeploy[tensorrt-rtx]')
    builds on any machine, no GPU needed, and the engine runs on the user's GPU ('vitdeploy doctor'
    says what is here).

    \b
    Examples:
      vitdeploy build-engine sam_vit_b.onnx -o sam_vit_b.plan
      vitdeploy build-engine sam_vit_b_fp16.onnx -o sam_vit_b_fp16.plan --builder tensorrt --timing-cache trt.cache
      vitdeploy build-engine encoder_dyn.onnx -o encoder_dyn.plan --batch-profile 1 2 8 --workspace 4096
      vitdeploy build-engine sam_vit_b.onnx -o sam_vit_b.plan --builder tensorrt-rtx --compute-capability 8.9
    """
    workspace_mib, batch_profile, input_profile, timing_cache, optimization_level, hardware_compatibility, version_compatible, tf32, legacy_fp16, builder, compute_capabilities = (
        build.workspace_mib, build.batch_profile, build.input_profile, build.timing_cache, build.optimization_level, build.hardware_compatibility, build.version_compatible, build.tf32, build.legacy_fp16, build.builder, build.compute_capabilities)
    report, force = outputs.report, outputs.force
    from vitdeploy.fileio import require_model_file

    require_model_file(model)
    from vitdeploy.engine.builder import BuildOptions, build_engine as build
    from vitdeploy.engine.profiles import BatchProfile, parse_input_profile
    from vitdeploy.engine.sidecar import sidecar_path
    from vitdeploy.fileio import atomic_write_bytes, claim_outputs

    claim_outputs([output, sidecar_path(output), report, log_file], force, inputs=[model])
    explicit = dict(parse_input_profile(text) for text in input_profile)
    options = BuildOptions(
        workspace_mib=workspace_mib,
        batch_profile=BatchProfile(*batch_profile) if batch_profile else None,
        input_profiles=explicit,
        timing_cache=timing_cache,
        optimization_level=optimization_level,
        hardware_compatibility=hardware_compatibility,
        version_compatible=version_compatible,
        tf32=tf32,
        legacy_fp16=legacy_fp16,
        log_file=log_file,
        device=device,
        builder=builder,
        compute_capabilities=tuple(compute_capabilities),
    )
    result = build(model, output, options, echo=click.echo)
    for note in result.notes:
        click.echo(f"note: {note}")
    if report:
        atomic_write_bytes(report, json.dumps(result.to_dict(), indent=2).encode())
        click.echo(f"report: {report}")


COMMAND = build_engine
