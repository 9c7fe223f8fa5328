"""The public call behind ``vitdeploy calibrate``: FP32 ONNX file + images -> FP16, BF16 or INT8 ONNX file + report."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from vitdeploy.echo import Echo, quiet
from vitdeploy.errors import InputError, VitdeployError
from vitdeploy.fileio import check_output_path, load_onnx_graph
from vitdeploy.precisions import Precision
from vitdeploy.precision.model_io import save_onnx_atomic
from vitdeploy.precision.calibration_data import DEFAULT_MIN_IMAGES, CalibrationSet, RecordedInputSet, load_calibration_set
from vitdeploy.precision.report import PrecisionReport, precision_metadata, read_metadata, stamp_metadata
from vitdeploy.precision.evaluation import StageProgress
from vitdeploy.parity import ParityResult, compare


#: The precisions a calibrate run writes from an FP32 export.
CALIBRATED = (Precision.FP16, Precision.BF16, Precision.INT8)


@dataclass(frozen=True)
class CalibrateOptions:
    """Options of one ``calibrate`` run (the CLI's flags, typed). ``precision`` is given by name or as a
    :class:`~vitdeploy.precisions.Precision` and held as one: FP16, BF16 or INT8 (what calibrate writes)."""

    precision: Precision
    images: tuple[str, ...] = ()
    feeds: str | None = None  # recorded input sets (.npz) instead of images
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

    def __post_init__(self) -> None:
        written = next((p for p in CALIBRATED if p.value == str(self.precision).lower()), None)
        if written is None:
            raise InputError(f"unknown precision '{self.precision}': use {', '.join(p.value for p in CALIBRATED)}")
        object.__setattr__(self, "precision", written)


def load_fp32_onnx(path: str | Path) -> onnx.ModelProto:
    """Load an ONNX file and its external weights into memory, with errors for people (missing, not ONNX).

    Any size: the passes never serialize the whole model (see :mod:`vitdeploy.precision.model_io`).
    """
    path = Path(path)
    model = load_onnx_graph(path)
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


def _eager_parity(meta: dict[str, Any], checkpoint: str | None, model: onnx.ModelProto, feeds: list[dict],
                  labels: list[str], outputs: list[dict], precision: str, threads: int | None,
                  progress: StageProgress | None) -> tuple[list[ParityResult], str | None]:
    """The converted model's ``outputs`` (already measured on ``feeds``) vs the eager official model, or why not.

    The outputs are the ones the FP32 comparison used (the FP16 graph with every tensor rounded, the
    INT8 graph as ONNX Runtime runs it), so the candidate is not run a second time: at full size that
    run costs as much as the eager one.
    """
    try:
        from vitdeploy.parity import TOLERANCES
        from vitdeploy.families import eager_reference
        from vitdeploy.validation.torch_runner import TorchRunner

        module = eager_reference(meta, checkpoint)
    except ImportError as exc:
        return [], f"eager parity skipped: {exc.name or exc} is not installed"
    except VitdeployError as exc:
        return [], f"eager parity skipped: {exc}"
    inits = {t.name for t in model.graph.initializer}
    input_names = [v.name for v in model.graph.input if v.name not in inits]
    output_names = [v.name for v in model.graph.output]
    reference = TorchRunner(module, input_names, output_names, threads=threads, metadata=meta)
    results: list[ParityResult] = []
    if progress:
        progress("eager parity", 0, len(feeds))
    for k, (feed, label, candidate) in enumerate(zip(feeds, labels, outputs)):
        expected = reference.run(feed)
        results.extend(compare(expected[name], candidate[name], TOLERANCES[precision], label=f"{label}/{name}")
                       for name in output_names)
        if progress:
            progress("eager parity", k + 1, len(feeds))
    return results, None


def _labels(images: CalibrationSet | RecordedInputSet, feeds: list[dict], batch_dim: int | str | None) -> list[str]:
    if isinstance(images, RecordedInputSet):  # recorded input sets: their own names
        return list(images.names)
    if len(feeds) == len(images):
        return [f"image:{n}" for n in images.names]
    return [f"batch{k}:{','.join(images.names[k * batch_dim:(k + 1) * batch_dim])}" for k in range(len(feeds))]


def calibrate_onnx(model_path: str | Path, output: str | Path, options: CalibrateOptions, *, echo: Echo = quiet,
                   progress: StageProgress | None = None) -> PrecisionReport:
    """Convert an FP32 vitdeploy ONNX file to FP16 or BF16 (mixed) or INT8 (Q/DQ), write it atomically, measure parity.

    ``progress(stage, done, total)`` is called through every stage that runs the model; the report's
    ``timings_s`` gives the seconds of each step (load, images, measure+convert, write, eager parity).
    """
    from vitdeploy.precision.checks import require_fp32

    out = check_output_path(output)
    if out.resolve() == Path(model_path).resolve():
        raise InputError("the output path is the input model: choose another -o path")
    timings: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[name] = round(now - clock, 3)
        clock = now

    model = load_fp32_onnx(model_path)
    require_fp32(model, what=f"'{model_path}'")
    meta = read_metadata(model)
    name, shape = image_input(model)
    lap("load_model")
    if options.feeds:
        if options.images:
            raise InputError("give calibration images (--images) or recorded inputs (--feeds), not both")
        from vitdeploy.precision.calibration_data import load_recorded_input_set

        cal_set = load_recorded_input_set(options.feeds, model)
        unit, plural = "recorded input set(s)", "recorded input sets"
    else:
        cal_set = load_calibration_set(
            list(options.images), meta, name, shape, min_images=options.min_images, max_images=options.max_images,
            cache_dir=options.cache_dir, use_cache=options.use_cache, warn=echo,
            progress=(lambda d, t, _n: progress("decoding images", d, t)) if progress else None,
        )
        unit, plural = "image(s)", "images"
    lap("load_images")
    cal, held = cal_set.split(options.holdout)
    if not len(held):
        echo(f"warning: no {plural} held out (--holdout 0): parity is measured on the calibration {plural} themselves, "
             "which flatters INT8; hold out at least one for an honest figure")
    skipped = "".join(f"\n  skipped {s.path}: {s.reason}" for s in cal_set.skipped)
    echo(f"calibration: {len(cal)} {unit}, {len(held)} held out for evaluation, from {cal_set.source}"
         f"{' (cached)' if cal_set.cache_hit else ''}{skipped}")
    recorded = options.feeds is not None
    calibration = cal.feeds() if recorded else _calibration_feeds(cal, shape[0])
    judged = held if len(held) else cal
    evaluation = judged.feeds() if recorded else _calibration_feeds(judged, shape[0])

    extra: dict[str, Any] = {}
    if options.precision in (Precision.FP16, Precision.BF16):
        from vitdeploy.precision.half_formats import HALF_FORMATS
        from vitdeploy.precision.half_precision import HalfConfig, convert_half

        fmt = HALF_FORMATS[options.precision]
        config = HalfConfig(format=fmt, keep_nodes=tuple(options.keep_fp32), threads=options.threads,
                            target_cosine=options.target_cosine)
        result = convert_half(model, calibration, evaluation, config, echo=echo, progress=progress)
        method, sensitivity, budget = f"activation range + local {fmt.label} drift", [], None
        extra_meta = {f"{fmt.name}_safe_max": config.safe_max, f"{fmt.name}_drift_max": config.drift_max}
        extra = {"drift_measured_on_images": result.drift_images, "ranges_measured_on_images": len(calibration)}
    else:
        from vitdeploy.precision.int8 import Int8Config
        from vitdeploy.precision.int8_pass import convert_int8

        config = Int8Config(method=options.method, percentile=options.percentile, exclude_nodes=tuple(options.keep_fp32),
                            threads=options.threads,
                            progress=(lambda d, t: progress("collecting activation ranges", d, t)) if progress else None)
        result = convert_int8(model, calibration, evaluation, config, target_cosine=options.target_cosine,
                              always_sensitivity=options.sensitivity, echo=echo, progress=progress)
        method = options.method + (f" ({options.percentile})" if options.method == "percentile" else "")
        sensitivity = [s.to_dict() for s in result.sensitivity]
        budget = None
        if result.budget is not None:
            budget = {"target_cosine": options.target_cosine, "kept": result.budget.kept, "cosine": result.budget.cosine,
                      "steps": [{"kept": k, "cosine": c} for k, c in result.budget.steps]}
        extra = {"default_cosine": result.default_cosine, "quantized_nodes": result.quantized}
        extra_meta = {"quantized_nodes": len(result.quantized), "quantized_ops": ["MatMul", "Gemm", "Conv"],
                      "target_cosine": options.target_cosine}
    lap("measure_and_convert")

    new_meta = precision_metadata(meta, precision=options.precision, method=method, image_count=len(cal),
                                  kept=result.kept, tool=result.tool, calibration_source=cal_set.source, extra=extra_meta)
    stamp_metadata(result.model, new_meta)
    written = save_onnx_atomic(result.model, out)
    echo(f"wrote {out} ({sum(p.stat().st_size for p in written) / 1e6:.1f} MB, {options.precision}"
         f"{', weights in ' + written[1].name if len(written) > 1 else ''})")
    lap("write")

    eager, note = ([], "eager parity not requested") if not options.eager else _eager_parity(
        new_meta, options.checkpoint, result.model, evaluation, _labels(judged, evaluation, shape[0]), result.outputs,
        options.precision, options.threads, progress)
    lap("eager_parity")
    return PrecisionReport(
        model=str(model_path), output=str(out), precision=options.precision, method=method, tool=result.tool,
        calibration={**cal_set.describe(), "used_for_calibration": len(cal), "held_out": list(held.names)},
        kept=result.kept, node_count=len(result.model.graph.node), parity_fp32=result.parity, parity_eager=eager,
        eager_note=note, sensitivity=sensitivity, budget=budget, timings_s=timings, extra=extra,
    )
