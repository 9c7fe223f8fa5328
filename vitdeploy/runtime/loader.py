"""Open any deployed model behind the Runner interface, chosen by its file suffix."""

from __future__ import annotations

from pathlib import Path

from vitdeploy.errors import InputError
from vitdeploy.runtime.runners import Runner

ONNX_SUFFIXES = (".onnx",)
ENGINE_SUFFIXES = (".plan", ".engine", ".trt")
#: Runtimes for ONNX files: ONNX Runtime (the default, every provider) and OpenVINO (CPU, optional extra).
ONNX_RUNTIMES = ("onnxruntime", "openvino")


def attention_flag(fused_attention: bool | None, folded_attention: bool) -> str | None:
    """The option that asks ONNX Runtime for an attention form (``--fused-attention``/``--folded-attention``), or None
    (``--no-fused-attention`` asks for nothing another runtime could not give)."""
    return "--fused-attention" if fused_attention is True else "--folded-attention" if folded_attention else None


def checked(runner: Runner, path: Path) -> Runner:
    """``runner`` after its file's vitdeploy metadata passed :func:`vitdeploy.metadata.metadata_problems` (each
    known field's type, and names and ``input_size`` against the graph): an edited or damaged file is refused
    here in one line naming the field, not deep inside a verb."""
    from vitdeploy.metadata import metadata_problems

    # The Runner protocol does not declare input_shapes(); the three runners open_runner makes all have it.
    shapes = runner.input_shapes() if hasattr(runner, "input_shapes") else None
    problems = metadata_problems(runner.metadata, shapes, runner.output_names)
    if problems:
        raise InputError(f"'{path.name}' has damaged vitdeploy metadata ({'; '.join(problems)}): export it again with "
                         "'vitdeploy export' (files edited by hand are not trusted)")
    return runner


def open_runner(path: str | Path, *, threads: int | None = None, ort_device: str = "cpu", gpu: int = 0,
                fused_attention: bool | None = None, folded_attention: bool = False, tf32: bool = False,
                allow_unverified: bool = False, runtime: str = "onnxruntime") -> Runner:
    """``.onnx`` -> :class:`OnnxRuntimeRunner` (``threads``, ``ort_device``, ``fused_attention``,
    ``folded_attention``, ``tf32``, ``allow_unverified``), or with ``runtime="openvino"`` :class:`OpenVinoRunner` (CPU, FP32 pinned);
    ``.plan``/``.engine``/``.trt`` -> :class:`TensorRTRunner` on CUDA device ``gpu`` (an engine's math was
    fixed when it was built)."""
    path = Path(path)
    suffix = path.suffix.lower()
    flag = attention_flag(fused_attention, folded_attention)
    if runtime not in ONNX_RUNTIMES:
        raise InputError(f"runtime '{runtime}' is not one of {', '.join(ONNX_RUNTIMES)}")
    if runtime == "openvino":
        if suffix not in ONNX_SUFFIXES:
            raise InputError(f"--runtime openvino runs ONNX models ({', '.join(ONNX_SUFFIXES)}), not '{path.name}': "
                             "TensorRT engines run on TensorRT (leave out --runtime)")
        if flag:
            raise InputError(f"{flag} is an ONNX Runtime setting: leave it out with --runtime openvino")
        if tf32:
            raise InputError("--tf32 is CUDA math: OpenVINO runs on the CPU in FP32 (leave out --tf32)")
        from vitdeploy.runtime.openvino_runner import OpenVinoRunner

        return checked(OpenVinoRunner(path, threads=threads, device=ort_device), path)
    if suffix in ONNX_SUFFIXES:
        from vitdeploy.runtime.runners import OnnxRuntimeRunner

        return checked(OnnxRuntimeRunner(path, threads=threads, device=ort_device, fused_attention=fused_attention,
                                         folded_attention=folded_attention, tf32=tf32, allow_unverified=allow_unverified), path)
    if flag:
        raise InputError(f"{flag} applies to ONNX models on ONNX Runtime, not to '{path.name}'")
    if suffix in ENGINE_SUFFIXES:
        from vitdeploy.runtime.tensorrt_runner import TensorRTRunner

        return checked(TensorRTRunner(path, device=gpu), path)
    raise InputError(
        f"'{path.name}' is neither an ONNX model ({', '.join(ONNX_SUFFIXES)}) nor a TensorRT engine "
        f"({', '.join(ENGINE_SUFFIXES)}): give a file written by 'vitdeploy export' or 'vitdeploy build-engine'"
    )


def runner_notes(runner: Runner, threads: int | None = None) -> list[str]:
    """What a user should know about how an opened runner runs its file, one line each (``validate`` and
    ``benchmark`` print them): where it runs unless that is ONNX Runtime's CPU provider, the fused-kernel
    swap or the unfolded attention, the runner's warnings, and why a reduced-precision file may be slow on the CPU."""
    from vitdeploy.runtime.ort_fusions import runner_precision_note

    notes = []
    provider = getattr(runner, "provider", None)
    if provider and runner.name != "onnxruntime-cpu":
        notes.append(f"runs on {provider}")
    cpu_form = getattr(runner, "cpu_form", None)
    fusion = getattr(runner, "fusion", None)
    unfold = getattr(runner, "unfold", None)
    if cpu_form is not None:  # the file holds the form: nothing was changed at load time
        taken = fusion.taken if fusion is not None else []
        notes.append(f"rel-pos attention as written in the file: {cpu_form.summary()}"
                     + (f"; this CPU runs the kernel's {', '.join(taken)} path" if taken else ""))
        fusion = unfold = None
    sdpa = getattr(runner, "sdpa", None)
    if sdpa is not None and sdpa.converted:
        notes.append(f"attention: {sdpa.summary()}")
    if fusion is not None:
        notes.append(f"fused rel-pos attention: {fusion.summary()}")
    if unfold is not None and unfold.unfolded:
        notes.append(f"rel-pos attention: {unfold.summary()} (--folded-attention runs the file's form as written)")
    notes += [f"warning: {warning}" for warning in getattr(runner, "warnings", [])]
    note = runner_precision_note(runner, getattr(runner, "device", "cpu"), threads)
    if note:
        notes.append(note)
    return notes
