"""Open any deployed model behind the Runner contract: the runtime from the registry, by ``--runtime`` or the file's suffix."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, ClassVar

from vitdeploy.errors import InputError
from vitdeploy.runtime.backends.base import Runner, RunnerOptions
from vitdeploy.runtime.deploy.auto import resolve
from vitdeploy.runtime.deploy.deployment import AUTO, Deployment
from vitdeploy.runtime.backends.registry import (DEFAULT_RUNTIME, ENGINE_SUFFIXES, ONNX_RUNTIMES, ONNX_SUFFIXES, RUNTIMES,
                                                 runtime_for_file)


def attention_flag(fused_attention: bool | None, folded_attention: bool) -> str | None:
    """The option that asks ONNX Runtime for an attention form (``--fused-attention``/``--folded-attention``), or None
    (``--no-fused-attention`` asks for nothing another runtime could not give)."""
    return "--fused-attention" if fused_attention is True else "--folded-attention" if folded_attention else None


def checked(runner: Runner, path: Path) -> Runner:
    """``runner`` after its file's vitdeploy metadata passed :func:`metadata_refusal`: an edited or damaged file is
    refused here in one line naming the field, not deep inside a verb (``KeyError: 'pixel_std'``)."""
    refusal = metadata_refusal(runner.metadata, runner.input_shapes(), runner.output_names, path.name)
    if refusal is not None:
        raise InputError(refusal)
    return runner


def metadata_refusal(metadata: dict[str, Any], input_shapes: dict[str, Any] | None, output_names: Any,
                     name: str) -> str | None:
    """The one-line refusal of a file named ``name`` whose vitdeploy metadata is damaged (None where it is not):
    :func:`vitdeploy.metadata.metadata_problems` (each known field's type, and names and sizes against the graph's
    ``input_shapes`` and ``output_names``) and every key its family's runtime reads (``runtime_metadata``)."""
    from vitdeploy.families import FAMILIES
    from vitdeploy.metadata import metadata_problems

    problems = metadata_problems(metadata, input_shapes, output_names)
    family_name = metadata.get("family")
    family = FAMILIES.get(family_name) if isinstance(family_name, str) else None
    if family is not None:  # what the runtime reads from a file of this family
        problems += [f"it lacks '{key}', which a {family_name} file carries" for key in family.runtime_metadata
                     if metadata.get(key) is None]
    if not problems:
        return None
    return (f"'{name}' has damaged vitdeploy metadata ({'; '.join(problems)}): export it again with 'vitdeploy export' "
            "(files edited by hand are not trusted)")


@dataclass(frozen=True)
class OpenOptions:
    """How to open a deployed file, one name per value: what :func:`open_runner` and the applications
    (``SamPredictor``, ``Sam2ImagePredictor``, ``Sam2VideoPredictor``, ``SamService``) take.

    Attributes:
        runtime: ``auto`` (the deployment profile beside the file, else this CPU's measured default), ``onnxruntime``
            or ``openvino`` for ``.onnx`` files; an engine's suffix picks TensorRT.
        threads: intra-op CPU threads (None: the profile's, else the runtime's default).
        device: ONNX Runtime's device: ``cpu``, ``cuda`` or ``tensorrt``.
        gpu: CUDA device index for engines.
        policy: the precision policy the runner applies to the file (:data:`~vitdeploy.precisions.PRECISION_POLICIES`:
            ``file`` runs the file's own math, ``bf16`` runs an FP32 file's layers in BF16 on OpenVINO); None: the
            deployment's. Not the file's precision, which the file states (``Precision.of(metadata)``).
        tf32: TF32 math for FP32 layers on CUDA.
        allow_unverified: run on a GPU provider the file was not verified on.
        profile: a deployment profile to read instead of the one beside the file (``runtime="auto"`` only).
        fused_attention, folded_attention: ONNX Runtime's attention forms (asking for one asks for ONNX Runtime).
        gelu_apart: OpenVINO's GELU form (None: where this CPU measured it faster).
    """

    runtime: str = AUTO
    threads: int | None = None
    device: str = "cpu"
    gpu: int = 0
    policy: str | None = None
    tf32: bool = False
    allow_unverified: bool = False
    profile: str | Path | None = None
    fused_attention: bool | None = None
    folded_attention: bool = False
    gelu_apart: bool | None = None

    #: The keyword names the applications' constructors kept (public API) -> the field each one sets.
    ALIASES: ClassVar[dict[str, str]] = {"inference_precision": "policy", "precision": "policy", "ort_device": "device"}

    @classmethod
    def of(cls, options: OpenOptions | None = None, **keywords: Any) -> OpenOptions:
        """``options``, or one made from the keywords the applications and :func:`open_runner` kept (``device``,
        ``threads``, ``runtime``, ``inference_precision``, ...); both at once only where the keywords are defaults."""
        named = {cls.ALIASES.get(key, key): value for key, value in keywords.items()}
        unknown = sorted(set(named) - {f.name for f in fields(cls)})
        if unknown:
            raise TypeError(f"unexpected keyword argument(s) {', '.join(unknown)}")
        if options is None:
            return cls(**named)
        defaults = cls()
        given = sorted(key for key, value in named.items() if value != getattr(defaults, key))
        if given:
            raise InputError(f"give the options either as OpenOptions or as keywords, not both ({', '.join(given)} "
                             "beside options=)")
        return options

    def for_part(self) -> OpenOptions:
        """The options for a file beside the one the precision policy is for (a decoder next to its encoder): the
        policy is the deployment's own there."""
        return replace(self, policy=None)


def open_runner(path: str | Path, options: OpenOptions | None = None, **keywords: Any) -> Runner:
    """The runner for ``path`` as ``options`` say (:class:`OpenOptions`; without them, ``runtime`` defaults to
    ``onnxruntime``, the file as written, as it always did here; the keywords of earlier releases are taken too:
    ``threads``, ``ort_device``, ``gpu``, ``fused_attention``, ``folded_attention``, ``tf32``, ``allow_unverified``,
    ``runtime``, ``precision``, ``profile``, ``gelu_apart``): an ``.onnx`` file on its runtime
    (ONNX Runtime on ``device`` by default, with its attention forms and ``allow_unverified``; or OpenVINO on the
    CPU), an engine (``.plan``/``.engine``/``.trt``) on TensorRT on CUDA device ``gpu`` (its math was fixed when it
    was built).

    The file is decided by :func:`decide` and opened by :func:`open_deployed`; the runner's ``deployment`` says what
    ``auto`` chose and why (None where a runtime was asked)."""
    if options is None:
        keywords.setdefault("runtime", DEFAULT_RUNTIME)  # open_runner's own default: the file as written
    o = OpenOptions.of(options, **keywords)
    deployment, chosen = decide(path, o)
    runner = open_deployed(path, deployment, device=o.device, gpu=o.gpu, tf32=o.tf32, allow_unverified=o.allow_unverified)
    runner.deployment = deployment if chosen else None
    return runner


def decide(path: str | Path, options: OpenOptions) -> tuple[Deployment, bool]:
    """How ``path`` runs as ``options`` say, decided without opening it: (the deployment, whether ``auto`` chose it).

    ``runtime="auto"``: the :mod:`~vitdeploy.runtime.deploy.auto` choice (the deployment profile beside the file, or
    an explicit ``profile``; else the probe, else this CPU's measured rows); ``policy`` and ``threads``, where given,
    narrow it, an attention flag asks for ONNX Runtime, and a setting asked here wins over the profile's. Any other
    runtime: what is asked is what runs."""
    o = options
    path = Path(path)
    flag = attention_flag(o.fused_attention, o.folded_attention)
    asked = tuple((key, value) for key, value in (("fused_attention", o.fused_attention),
                                                  ("folded_attention", o.folded_attention or None),
                                                  ("gelu_apart", o.gelu_apart)) if value is not None)
    runtime = o.runtime
    if runtime == AUTO and path.suffix.lower() not in ONNX_SUFFIXES:
        runtime = DEFAULT_RUNTIME  # an engine (or an unknown file, refused when opened): its suffix decides
    if runtime == AUTO:
        if flag:
            return Deployment(DEFAULT_RUNTIME, o.policy or "file", o.threads, asked, source=f"asked ({flag})"), True
        deployment = resolve(path, precision=o.policy, threads=o.threads, device=o.device, profile=o.profile)
        return replace(deployment, settings=tuple(sorted({**dict(deployment.settings), **dict(asked)}.items()))), True
    if o.profile is not None:
        raise InputError("a deployment profile is read by --runtime auto: leave out --runtime or the profile")
    return Deployment(runtime, o.policy or "file", o.threads, asked), False


def open_deployed(path: str | Path, deployment: Deployment, *, device: str = "cpu", gpu: int = 0, tf32: bool = False,
                  allow_unverified: bool = False) -> Runner:
    """Open ``path`` as a resolved ``deployment`` says: its runtime, precision policy, threads and **every** runner
    setting it holds (a tuned profile's ``io_binding``, ``session_config``, ``gelu_apart``, ...).

    The one translation from a :class:`~vitdeploy.runtime.deploy.deployment.Deployment` to a runner:
    :func:`open_runner` ends here, and so do the routes that decide once and open the file elsewhere (dataset
    workers, Ray Serve replicas), so a profile's setting reaches each of them alike. The file's metadata is checked.
    """
    path = Path(path)
    settings = dict(deployment.settings)
    flag = attention_flag(settings.get("fused_attention"), bool(settings.get("folded_attention")))
    runtime = deployment.runtime
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
    if "gelu_apart" in settings and "gelu_apart" not in entry.settings:
        raise InputError(f"gelu_apart is an OpenVINO setting: leave it out for '{path.name}' on {entry.name}")
    if "allow_unverified" in entry.settings:
        settings = {"allow_unverified": allow_unverified, **settings}
    settings = {key: value for key, value in settings.items() if key in entry.settings}
    options = RunnerOptions(threads=deployment.threads, device=device if entry.reads_onnx else "cuda", gpu=gpu,
                            policy=deployment.precision, tf32=tf32 and entry.reads_onnx)
    runner = checked(entry.open(path, options, **settings), path)
    runner.deployment = None
    return runner


def as_runner(model: Runner | str | os.PathLike, options: OpenOptions | None = None, **keywords: Any) -> Runner:
    """``model`` if it already is a Runner; otherwise the runner :func:`open_runner` opens for the file as ``options``
    (or the keywords :meth:`OpenOptions.of` takes) say."""
    if isinstance(model, (str, os.PathLike)):
        return open_runner(Path(model), OpenOptions.of(options, **keywords))
    if isinstance(model, Runner):
        return model
    raise InputError(f"expected a model path or a Runner (a vitdeploy.runtime.Runner subclass), got {type(model).__name__}")


__all__ = ["ENGINE_SUFFIXES", "ONNX_RUNTIMES", "ONNX_SUFFIXES", "OpenOptions", "as_runner", "attention_flag", "checked",
           "decide", "metadata_refusal", "open_deployed", "open_runner"]
