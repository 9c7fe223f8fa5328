"""The public call behind ``vitdeploy calibrate``: FP32 ONNX file + images -> FP16 or INT8 ONNX file + report."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from vitdeploy.errors import InputError, PrecisionError, VitdeployError
from vitdeploy.fileio import atomic_output, check_output_path, load_onnx_graph
from vitdeploy.precision.calibration_data import DEFAULT_MIN_IMAGES, CalibrationSet, load_calibration_set
from vitdeploy.precision.report import PrecisionReport, precision_metadata, read_metadata, stamp_metadata
from vitdeploy.validation.parity import ParityResult

Echo = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


@dataclass(frozen=True)
class CalibrateOptions:
    """Options of one ``calibrate`` run (the CLI's flags, typed)."""

    precision: str
    images: tuple[str, ...] = ()
    method: str = "minmax"
    percentile: float = 99.999
    target_cosine: float | None = None
    holdout: int = 4
    min_images: int = DEFAULT_MIN_IMAGES
    max_images: int | None = None
    keep_fp32: tuple[str, ...] = ()
    cache_dir: str | None = None
    use_cache: bool = True
    sensitivity: bool = False
    checkpoint: str | None = None
    eager: bool = True
    threads: int | None = 2
    extra: dict[str, Any] = field(default_factory=dict)


#: The precision passes copy, serialize and hand the whole model to ONNX Runtime as one protobuf
#: message, which protobuf caps at 2 GiB (SAM ViT-H in FP32 carries ~2.5 GB of weights).
PRECISION_PASS_MAX_WEIGHT_BYTES = 2**31 - 2**24


def initializer_bytes(model: onnx.ModelProto) -> int:
    """Bytes of all initializers, from their shapes and types (external data is not read)."""
    total = 0
    for tensor in model.graph.initializer:
        count = 1
        for dim in tensor.dims:
            count *= dim
        total += count * onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    return total


def load_fp32_onnx(path: str | Path) -> onnx.ModelProto:
    """Load an ONNX file with errors for people (missing, not ONNX, too large for the precision passes)."""
    path = Path(path)
    model = load_onnx_graph(path)
    weights = initializer_bytes(model)
    if weights > PRECISION_PASS_MAX_WEIGHT_BYTES:
        raise PrecisionError(
            f"'{path.name}' holds {weights / 1e9:.2f} GB of weights, over the 2 GiB the FP16/INT8 passes can handle "
            "(they keep the model in one protobuf message; SAM ViT-H is the case): convert vit_b or vit_l, "
            "or deploy this model in FP32"
        )
    try:
        onnx.load_external_data_for_model(model, str(path.parent))
    except (OSError, ValueError) as exc:
        raise InputError(f"the external weights of '{path}' cannot be read ({exc}): keep the .data file next to the .onnx file") from exc
    return model


def image_input(model: onnx.ModelProto) -> tuple[str, list[int | str | None]]:
    """(name, shape) of the model's first real input."""
    inits = {t.name for t in model.graph.initializer}
    for value in model.graph.input:
        if value.name not in inits:
            dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in value.type.tensor_type.shape.dim]
            return value.name, dims
    raise InputError("the model has no inputs")


def _calibration_feeds(cal: CalibrationSet, batch_dim: int | str | None) -> list[dict]:
    if isinstance(batch_dim, int) and batch_dim > 1:
        if len(cal) < batch_dim:
            raise InputError(f"the model's static batch is {batch_dim} but only {len(cal)} calibration image(s) remain")
        return cal.batches(batch_dim)
    return cal.feeds()


def _eager_parity(meta: dict[str, Any], checkpoint: str | None, held: CalibrationSet, candidate_path: Path,
                  precision: str, threads: int | None) -> tuple[list[ParityResult], str | None]:
    """Converted model vs the eager official model on the held-out images, or why that was not possible."""
    try:
        from vitdeploy.runtime.runners import OnnxRuntimeRunner
        from vitdeploy.validation.references import eager_reference
        from vitdeploy.validation.torch_runner import TorchRunner
        from vitdeploy.validation.validate import InputSet, validate_runner
        from vitdeploy.validation.parity import TOLERANCES

        candidate = OnnxRuntimeRunner(candidate_path, threads=threads)
        module = eager_reference(meta, checkpoint)
        reference = TorchRunner(module, candidate.input_names, candidate.output_names, threads=threads, metadata=meta)
    except ImportError as exc:
        return [], f"eager parity skipped: {exc.name or exc} is not installed"
    except VitdeployError as exc:
        return [], f"eager parity skipped: {exc}"
    sets = [InputSet(f"image:{n}", f, n) for n, f in zip(held.names, held.feeds())]
    report = validate_runner(reference, candidate, sets, TOLERANCES[precision], latency_runs=0, threads=threads)
    return report.parity, None


def calibrate_onnx(model_path: str | Path, output: str | Path, options: CalibrateOptions, *, echo: Echo = _quiet,
                   progress: Callable[[str, int, int], None] | None = None) -> PrecisionReport:
    """Convert an FP32 vitdeploy ONNX file to FP16 (mixed) or INT8 (Q/DQ), write it atomically, measure parity.

    ``progress(stage, done, total)`` is called while decoding images and measuring.
    """
    from vitdeploy.precision.checks import require_fp32

    if options.precision not in ("fp16", "int8"):
        raise InputError(f"unknown precision '{options.precision}': use fp16 or int8")
    out = check_output_path(output)
    if out.resolve() == Path(model_path).resolve():
        raise InputError("the output path is the input model: choose another -o path")
    timings: dict[str, float] = {}
    start = time.perf_counter()
    model = load_fp32_onnx(model_path)
    require_fp32(model, what=f"'{model_path}'")
    meta = read_metadata(model)
    name, shape = image_input(model)
    cal_set = load_calibration_set(
        list(options.images), meta, name, shape, min_images=options.min_images, max_images=options.max_images,
        cache_dir=options.cache_dir, use_cache=options.use_cache, warn=echo,
        progress=(lambda d, t, _n: progress("decoding images", d, t)) if progress else None,
    )
    timings["load_images"] = time.perf_counter() - start
    cal, held = cal_set.split(options.holdout)
    skipped = "".join(f"\n  skipped {s.path}: {s.reason}" for s in cal_set.skipped)
    echo(f"calibration: {len(cal)} image(s), {len(held)} held out for evaluation, from {cal_set.source}"
         f"{' (cached)' if cal_set.cache_hit else ''}{skipped}")
    calibration = _calibration_feeds(cal, shape[0])
    evaluation = _calibration_feeds(held, shape[0]) if len(held) else calibration

    t0 = time.perf_counter()
    extra: dict[str, Any] = {}
    if options.precision == "fp16":
        from vitdeploy.precision.fp16 import Fp16Config, convert_fp16

        config = Fp16Config(keep_nodes=tuple(options.keep_fp32), threads=options.threads,
                            **({"target_cosine": options.target_cosine} if options.target_cosine is not None else {}))
        result = convert_fp16(model, calibration, evaluation, config, echo=echo,
                              progress=(lambda d, t: progress("measuring activations", d, t)) if progress else None)
        method, sensitivity, budget = "activation range + local FP16 drift", [], None
        extra_meta = {"fp16_safe_max": config.safe_max, "fp16_drift_max": config.drift_max}
    else:
        from vitdeploy.precision.int8 import Int8Config
        from vitdeploy.precision.int8_pass import convert_int8

        config = Int8Config(method=options.method, percentile=options.percentile, exclude_nodes=tuple(options.keep_fp32),
                            threads=options.threads,
                            progress=(lambda d, t: progress("collecting activation ranges", d, t)) if progress else None)
        result = convert_int8(model, calibration, evaluation, config, target_cosine=options.target_cosine,
                              always_sensitivity=options.sensitivity, echo=echo,
                              progress=(lambda d, t: progress("layer sensitivity", d, t)) if progress else None)
        method = options.method + (f" ({options.percentile})" if options.method == "percentile" else "")
        sensitivity = [s.to_dict() for s in result.sensitivity]
        budget = None
        if result.budget is not None:
            budget = {"target_cosine": options.target_cosine, "kept": result.budget.kept, "cosine": result.budget.cosine,
                      "steps": [{"kept": k, "cosine": c} for k, c in result.budget.steps]}
        extra = {"default_cosine": result.default_cosine, "quantized_nodes": result.quantized}
        extra_meta = {"quantized_nodes": len(result.quantized), "quantized_ops": ["MatMul", "Gemm", "Conv"],
                      "target_cosine": options.target_cosine}
    timings["convert"] = time.perf_counter() - t0

    new_meta = precision_metadata(meta, precision=options.precision, method=method, image_count=len(cal),
                                  kept=result.kept, tool=result.tool, calibration_source=cal_set.source, extra=extra_meta)
    stamp_metadata(result.model, new_meta)
    with atomic_output(out) as tmp:
        onnx.save_model(result.model, str(tmp))
    echo(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB, {options.precision})")

    t0 = time.perf_counter()
    eager, note = ([], "eager parity not requested") if not options.eager else _eager_parity(
        new_meta, options.checkpoint, held if len(held) else cal, out, options.precision, options.threads)
    timings["eager_parity"] = time.perf_counter() - t0
    return PrecisionReport(
        model=str(model_path), output=str(out), precision=options.precision, method=method, tool=result.tool,
        calibration={**cal_set.describe(), "used_for_calibration": len(cal), "held_out": list(held.names)},
        kept=result.kept, node_count=len(result.model.graph.node), parity_fp32=result.parity, parity_eager=eager,
        eager_note=note, sensitivity=sensitivity, budget=budget, timings_s=timings, extra=extra,
    )
