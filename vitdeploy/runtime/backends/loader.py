"""Open any deployed model behind the Runner contract: the runtime from the registry, by ``--runtime`` or the file's suffix."""

from __future__ import annotations

from pathlib import Path

from vitdeploy.errors import InputError
from vitdeploy.runtime.backends.base import Runner, RunnerOptions
from vitdeploy.runtime.backends.deployment import AUTO, Deployment, resolve
from vitdeploy.runtime.backends.registry import (DEFAULT_RUNTIME, ENGINE_SUFFIXES, ONNX_RUNTIMES, ONNX_SUFFIXES, RUNTIMES,
                                                 runtime_for_file)


def attention_flag(fused_attention: bool | None, folded_attention: bool) -> str | None:
    """The option that asks ONNX Runtime for an attention form (``--fused-attention``/``--folded-attention``), or None
    (``--no-fused-attention`` asks for nothing another runtime could not give)."""
    return "--fused-attention" if fused_attention is True else "--folded-attention" if folded_attention else None


def checked(runner: Runner, path: Path) -> Runner:
    """``runner`` after its file's vitdeploy metadata passed :func:`vitdeploy.metadata.metadata_problems` (each
    known field's type, and names and ``input_size`` against the graph): an edited or damaged file is refused
    here in one line naming the field, not deep inside a verb."""
    from vitdeploy.metadata import metadata_problems

    problems = metadata_problems(runner.metadata, runner.input_shapes(), runner.output_names)
    if problems:
        raise InputError(f"'{path.name}' has damaged vitdeploy metadata ({'; '.join(problems)}): export it again with "
                         "'vitdeploy export' (files edited by hand are not trusted)")
    return runner


def open_runner(path: str | Path, *, threads: int | None = None, ort_device: str = "cpu", gpu: int = 0,
                fused_attention: bool | None = None, folded_attention: bool = False, tf32: bool = False,
                allow_unverified: bool = False, runtime: str = DEFAULT_RUNTIME, precision: str | None = None,
                profile: str | Path | None = None, gelu_apart: bool | None = None) -> Runner:
    """The runner for ``path``: an ``.onnx`` file on ``runtime`` (ONNX Runtime on ``ort_device`` by default, with its
    attention forms and ``allow_unverified``; or OpenVINO on the CPU), an engine (``.plan``/``.engine``/``.trt``) on
    TensorRT on CUDA device ``gpu`` (its math was fixed when it was built). ``precision`` is the
    :class:`~vitdeploy.runtime.backends.base.RunnerOptions` precision policy (None: ``file``). ``gelu_apart``: OpenVINO's
    GELU form (:mod:`vitdeploy.runtime.forms.openvino_gelu`; None: where this CPU measured it faster).

    ``runtime="auto"``: the :mod:`~vitdeploy.runtime.backends.deployment` choice (the deployment profile beside the
    file, or an explicit ``profile``; else this CPU's measured default); ``precision`` and ``threads``, where given,
    narrow it, an attention flag asks for ONNX Runtime. The runner's ``deployment`` says what was chosen and why.
    The file's metadata is checked."""
    path = Path(path)
    flag = attention_flag(fused_attention, folded_attention)
    deployment = None
    if runtime == AUTO and path.suffix.lower() not in ONNX_SUFFIXES:
        runtime = DEFAULT_RUNTIME  # an engine (or an unknown file, refused below): its suffix decides
    if runtime == AUTO:
        if flag:
            deployment = Deployment(DEFAULT_RUNTIME, precision or "file", threads, source=f"asked ({flag})")
        else:
            deployment = resolve(path, precision=precision, threads=threads, device=ort_device, profile=profile)
        runtime, precision, threads = deployment.runtime, deployment.precision, deployment.threads
        if deployment.settings:
            chosen = dict(deployment.settings)
            fused_attention = chosen.get("fused_attention", fused_attention)
            folded_attention = chosen.get("folded_attention", folded_attention)
            gelu_apart = chosen.get("gelu_apart", gelu_apart)
    elif profile is not None:
        raise InputError("a deployment profile is read by --runtime auto: leave out --runtime or the profile")
    precision = precision or "file"
    if runtime not in ONNX_RUNTIMES:
        raise InputError(f"runtime '{runtime}' is not one of {', '.join((AUTO, *ONNX_RUNTIMES))}")
    by_suffix = runtime_for_file(path)
    if runtime != DEFAULT_RUNTIME:
        if by_suffix is None or not by_suffix.reads_onnx:
            raise InputError(f"--runtime {runtime} runs ONNX models ({', '.join(ONNX_SUFFIXES)}), not '{path.name}': "
                             "TensorRT engines run on TensorRT (leave out --runtime)")
        if flag:
            raise InputError(f"{flag} is an ONNX Runtime setting: leave it out with --runtime {runtime}")
        entry = RUNTIMES[runtime]
    elif by_suffix is not None and by_suffix.reads_onnx:
        entry = by_suffix
    else:
        if flag:
            raise InputError(f"{flag} applies to ONNX models on ONNX Runtime, not to '{path.name}'")
        if by_suffix is None:
            raise InputError(
                f"'{path.name}' is neither an ONNX model ({', '.join(ONNX_SUFFIXES)}) nor a TensorRT engine "
                f"({', '.join(ENGINE_SUFFIXES)}): give a file written by 'vitdeploy export' or 'vitdeploy build-engine'")
        entry = by_suffix
    if gelu_apart is not None and "gelu_apart" not in entry.settings:
        raise InputError(f"gelu_apart is an OpenVINO setting: leave it out for '{path.name}' on {entry.name}")
    wanted = {"fused_attention": fused_attention, "folded_attention": folded_attention,
              "allow_unverified": allow_unverified, "gelu_apart": gelu_apart}
    settings = {key: value for key, value in wanted.items() if key in entry.settings}
    options = RunnerOptions(threads=threads, device=ort_device if entry.reads_onnx else "cuda", gpu=gpu,
                            precision=precision, tf32=tf32 and entry.reads_onnx)
    runner = checked(entry.open(path, options, **settings), path)
    runner.deployment = deployment
    return runner


__all__ = ["ENGINE_SUFFIXES", "ONNX_RUNTIMES", "ONNX_SUFFIXES", "attention_flag", "checked", "open_runner"]
