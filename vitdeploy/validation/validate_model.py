"""``vitdeploy validate`` as a library call: a deployed file against the eager official model it was made from."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vitdeploy.echo import Echo, quiet
from vitdeploy.precisions import Precision
from vitdeploy.validation.validate import ValidationReport


@dataclass(frozen=True)
class ValidateOptions:
    """What to compare on and how (``vitdeploy validate``'s options)."""

    checkpoint: str | None = None  # the checkpoint the model was exported from (None for random weights)
    images: tuple[str, ...] = ()  # image files or folders, through the family's preprocessing
    random_inputs: int = 2  # seeded random input sets
    load_inputs: tuple[str, ...] = ()  # saved inputs: .npz or Polygraphy .json
    tolerance: str = "auto"  # a TOLERANCES name, or auto: the model's precision
    runs: int = 5  # timed runs per backend (0: no timing)
    warmup: int = 1
    device: str = "cpu"  # ONNX Runtime's execution provider for .onnx files
    tf32: bool = False
    runtime: str = "onnxruntime"  # or openvino (CPU) for .onnx files, or auto (vitdeploy.runtime.deploy.auto)
    inference_precision: str | None = None  # file (None), or bf16 / fp16 (OpenVINO): judged by that budget, or against
    # the official's own reduced precision where it publishes one (vitdeploy.validation.official_practice)
    fused_attention: bool | None = None  # None: the runner's default (the kernel where built and faster)
    folded_attention: bool = False
    threads: int | None = None


def validate_model(model: str | Path, options: ValidateOptions = ValidateOptions(),
                   echo: Echo = quiet) -> ValidationReport:
    """Parity (and latency unless ``runs`` is 0) of an ``.onnx`` or ``.plan`` file against the official eager
    model rebuilt from its metadata. The report is falsy when a tolerance fails; nothing is raised for that."""
    from vitdeploy.errors import InputError
    from vitdeploy.families import family_of
    from vitdeploy.parity import TOLERANCES
    from vitdeploy.runtime.deploy.loader import open_runner
    from vitdeploy.runtime_facts import official_precision
    from vitdeploy.validation.inputs import image_input_sets, saved_input_sets
    from vitdeploy.validation.official_practice import Beside
    from vitdeploy.validation.validate import validate_runner

    # .onnx -> ONNX Runtime on the device, .plan -> TensorRT
    candidate = open_runner(str(model), threads=options.threads, fused_attention=options.fused_attention,
                            folded_attention=options.folded_attention,
                            ort_device=options.device, tf32=options.tf32, allow_unverified=True,
                            runtime=options.runtime, precision=options.inference_precision)
    for note in candidate.notes(options.threads):
        echo(note)
    meta = candidate.metadata
    family = family_of(meta, f"'{model}'", for_reference=True)
    preprocess = family.image_preprocessor(meta) if options.images else None
    if meta.get("random_weights"):
        echo(f"note: {Path(model).name} has RANDOM WEIGHTS (seed {meta.get('random_seed')}); parity is still meaningful")
    precision = Precision.of(meta)
    policy = candidate.deployment.precision if candidate.deployment is not None else options.inference_precision
    if policy not in (None, "file") and precision is Precision.FP32:
        precision = Precision(policy)  # the FP32 layers ran in BF16 or FP16: that precision's budget judges them
    tol = TOLERANCES[precision if options.tolerance == "auto" else options.tolerance]
    # The inputs first: a missing image or input file is answered before torch is imported.
    shapes = candidate.input_shapes()
    input_sets = family.random_input_sets(meta, candidate.input_names, shapes, options.random_inputs)
    if preprocess is not None:
        input_sets += image_input_sets(options.images, preprocess, candidate.input_names[0])
    input_sets += saved_input_sets(options.load_inputs, shapes)
    if not input_sets:
        raise InputError("no inputs to compare: use --random-inputs N, --images PATH or --load-inputs FILE")
    echo(f"building the eager official reference ({family.name}, {meta.get('variant')})")
    eager = family.eager_reference(meta, options.checkpoint)  # a wrong checkpoint is refused before torch loads
    from vitdeploy.validation.torch_runner import TorchRunner

    reference = TorchRunner(eager, candidate.input_names, candidate.output_names, threads=options.threads, metadata=meta)
    practice = official_precision(family.name)
    beside = None
    if (practice is not None and options.tolerance == "auto" and precision.reduced
            and precision.value in practice.rounding and policy not in (None, "file")):
        beside = Beside(TorchRunner(eager, candidate.input_names, candidate.output_names, threads=options.threads,
                                    metadata=meta, autocast=practice.precision), practice, precision.value, family.name)
        echo(f"parity of {Path(model).name} ({precision}) vs eager official, judged against the official's own "
             f"{practice.precision} ({practice.autocast}, measured beside it on the same inputs): each output, pooled "
             f"over the inputs, within {practice.margin:g}x the official autocast's distance from its FP32:")
    else:
        echo(f"parity of {Path(model).name} ({precision}) vs eager official, tolerance '{tol.name}' "
             f"(cosine >= {tol.cosine_min}, rel L2 <= {tol.rel_l2_max}, max-abs/scale <= {tol.max_abs_rel}):")
    return validate_runner(reference, candidate, input_sets, tol, latency_runs=options.runs,
                           latency_warmup=options.warmup, threads=options.threads, echo=echo, beside=beside)
