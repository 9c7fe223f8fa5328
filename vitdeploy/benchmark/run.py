"""``vitdeploy benchmark`` as a library call: deployed models (and the eager official model) timed side by side."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vitdeploy.echo import Echo, quiet
from vitdeploy.benchmark.report import BenchmarkReport


@dataclass(frozen=True)
class BenchmarkOptions:
    """What to time and how (``vitdeploy benchmark``'s options)."""

    eager: bool = True  # time the official eager model too (rebuilt from the first model's metadata)
    eager_precisions: tuple[str, ...] = ()  # fp32 (the default), or fp16/bf16 under torch.autocast
    checkpoint: str | None = None
    device: str = "cpu"  # where eager PyTorch and ONNX Runtime run
    tf32: bool = False
    allow_unverified: bool = False
    gpu: int = 0  # CUDA device of TensorRT engines
    batches: tuple[int, ...] = (1,)
    runs: int = 20
    warmup: int = 3
    shapes: tuple[str, ...] = ()  # dynamic axes besides the batch, as trtexec's --shapes
    fused_attention: bool | None = None  # None: the runner's default (the kernel where built and faster)
    folded_attention: bool = False
    threads: int | None = None
    inference_precision: str | None = None  # file (None), or bf16: OpenVINO's BF16 inference of FP32 layers
    runtimes: tuple[str, ...] = ("onnxruntime",)  # each .onnx file is timed on each (onnxruntime, openvino)


def benchmark_models(models: list[str] | tuple[str, ...], options: BenchmarkOptions = BenchmarkOptions(),
                     echo: Echo = quiet) -> BenchmarkReport:
    """Latency and throughput of each model (``.onnx`` on ONNX Runtime, ``.plan`` on TensorRT) and of the eager
    baseline, per batch size, with the environment; the first contender is the speed-up's baseline."""
    from vitdeploy.benchmark.contenders import deployed_contender, eager_contender, input_template, parse_shapes
    from vitdeploy.benchmark.harness import run_benchmark
    from vitdeploy.benchmark.report import TIMING, environment
    from vitdeploy.errors import InputError
    from vitdeploy.families import family_of
    from vitdeploy.runtime.deploy.loader import ONNX_SUFFIXES, attention_flag

    if not options.eager and options.eager_precisions:
        raise InputError("--eager-precision needs the eager baseline: drop --no-eager")
    runtimes = list(dict.fromkeys(options.runtimes or ("onnxruntime",)))
    flag = attention_flag(options.fused_attention, options.folded_attention)
    if flag and runtimes != ["onnxruntime"]:
        raise InputError(f"{flag} is an ONNX Runtime setting: time it with --runtime onnxruntime alone")
    deployed = [deployed_contender(m, threads=options.threads, device=options.device, gpu=options.gpu, tf32=options.tf32,
                                   allow_unverified=options.allow_unverified, runtime=runtime,
                                   inference_precision=options.inference_precision,
                                   **({"fused_attention": options.fused_attention, "folded_attention": options.folded_attention}
                                      if Path(m).suffix.lower() in ONNX_SUFFIXES else {}))
                for m in models
                for runtime in (runtimes if Path(m).suffix.lower() in ONNX_SUFFIXES else ["onnxruntime"])]
    for c in deployed:
        for note in c.runner.notes(options.threads):
            echo(f"{c.label}: {note}")
    first = deployed[0].runner
    template = input_template(first, parse_shapes(options.shapes))
    contenders = []
    if options.eager:
        meta = first.metadata
        family = family_of(meta, f"'{models[0]}' (to rebuild the eager model from; --no-eager times without it)",
                           for_reference=True)
        if meta.get("random_weights"):
            echo(f"note: RANDOM WEIGHTS (seed {meta.get('random_seed')}); timings are still meaningful")
        for precision in options.eager_precisions or ("fp32",):
            echo(f"building the eager official model ({family.name}, {meta.get('variant')}, {precision}, {options.device})")
            contenders.append(eager_contender(first, metadata=meta, checkpoint=options.checkpoint, precision=precision,
                                              device=options.device, threads=options.threads, tf32=options.tf32))
    contenders += deployed
    batches = list(options.batches)
    rows = run_benchmark(contenders, template, batches, runs=options.runs, warmup=options.warmup, echo=echo,
                         metadata=first.metadata)
    return BenchmarkReport(
        rows=rows,
        settings={"runs": options.runs, "warmup": options.warmup, "batches": batches, "threads": options.threads,
                  "input_shapes": {name: dims[1:] for name, dims in template.items()},
                  "device": options.device, "tf32": options.tf32, "runtimes": runtimes, "timing": TIMING, "models": list(models)},
        environment=environment(options.threads, contenders),
    )
