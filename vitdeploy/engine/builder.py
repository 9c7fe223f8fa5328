"""ONNX -> TensorRT engine (``.plan``) + JSON sidecar, strongly typed by default.

The chain, Polygraphy style: ONNX file -> network (TensorRT's ONNX parser) -> builder config
(Polygraphy's ``CreateConfig``) + optimization profile (Polygraphy's ``Profile``) -> serialized plan
(``build_serialized_network``) -> plan + sidecar written atomically.

What differs from using Polygraphy's loaders end to end, and why:

- The network is parsed here, not by ``NetworkFromOnnxPath``: Polygraphy logs parser errors and
  raises a generic "Could not parse ONNX correctly"; vitdeploy's error must name the failing node
  and quote TensorRT (:mod:`vitdeploy.engine.diagnostics`). ``parse_from_file`` is the same call
  Polygraphy makes, so external-data weights are found next to the ONNX file.
- The builder gets vitdeploy's logger (:mod:`vitdeploy.engine.build_log`), so TensorRT's build
  errors end up in the error message and the optional log file.
- ``CreateConfig`` is called with ``network=None`` (documented: "steps requiring the network will be
  skipped") and the profile is added here. With a network it inspects every layer's
  ``precision_is_set``, which TensorRT 10.12 deprecated and TensorRT 11 removed; with ``None`` only
  the options set below touch the config.
- ``build_serialized_network`` is called here instead of through ``EngineBytesFromNetwork``, which
  probes ``IBuilderConfig.int8_calibrator`` (removed in TensorRT 11) and writes the timing cache
  and engine non-atomically.

Two libraries build engines (:mod:`vitdeploy.engine.library` holds every difference): classic TensorRT
10/11 through Polygraphy's ``CreateConfig`` as above, on the GPU the engine is for; and TensorRT for RTX,
whose config is made here with its documented ``IBuilderConfig`` calls (Polygraphy imports the classic
``tensorrt`` module) and whose ahead-of-time build needs no GPU: the engine names the compute
capabilities it targets and is JIT-compiled on the user's GPU when it loads. TensorRT-RTX's config also
asks for ``ProfilingVerbosity.DETAILED``, so the builder's layer list says which precision each engine
layer computes in (:mod:`vitdeploy.engine.layers`; recorded in the sidecar, shown by ``inspect``).

Precision: with ``NetworkDefinitionCreationFlag.STRONGLY_TYPED`` (TensorRT 10; always on and the flag
ignored in TensorRT 11) TensorRT computes in exactly the types the ONNX graph declares: an FP32 graph
gives an FP32 engine, an FP16 mixed graph an FP16 engine with its FP32 islands kept, a Q/DQ graph an
INT8 engine. The weakly typed FP16 build (``BuilderFlag.FP16``, TensorRT decides per layer) exists
only on TensorRT 10, only with ``legacy_fp16=True``.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vitdeploy.echo import Echo, quiet
from vitdeploy.engine.build_log import BuildLog, make_trt_logger
from vitdeploy.engine.compat import HARDWARE_LEVELS
from vitdeploy.engine.diagnostics import format_build_failure, format_parse_failure, parser_problems
from vitdeploy.engine.layers import parse_layer_list, summarize_layers
from vitdeploy.engine.library import (CLASSIC, RTX, RTX_DEFAULT_TARGETS, TensorRTLibrary, load_library, parse_compute_capability,
                                      set_rtx_targets)
from vitdeploy.engine.onnx_facts import OnnxFacts, read_onnx_facts
from vitdeploy.engine.profiles import BatchProfile, ShapeSet, input_profiles
from vitdeploy.engine.sidecar import make_sidecar, sidecar_path, write_sidecar
from vitdeploy.engine.versions import import_polygraphy_trt, weak_typing_available
from vitdeploy.errors import EngineError, InputError
from vitdeploy.targets import target_of
from vitdeploy.fileio import atomic_output, atomic_write_bytes, check_output_path, sha256_file

MAX_OPTIMIZATION_LEVEL = 5

#: vitdeploy's name for each TensorRT ``HardwareCompatibilityLevel`` member.
HARDWARE_LEVEL_MEMBERS = {"ampere_plus": "AMPERE_PLUS", "same_compute_capability": "SAME_COMPUTE_CAPABILITY"}


@dataclass(frozen=True)
class BuildOptions:
    """What a TensorRT user sets for a build; every field lands in the sidecar's ``build_options``.

    Attributes:
        workspace_mib: workspace memory pool limit (None: TensorRT's default, the device's memory).
        batch_profile: min/opt/max batch for inputs whose only dynamic axis is the batch.
        input_profiles: full min/opt/max shapes per input (e.g. a decoder's prompt count).
        timing_cache: tactic timing cache file, read if present and written after the build.
        optimization_level: builder optimization level 0..5 (None: TensorRT's default, 3).
        hardware_compatibility: none | ampere_plus | same_compute_capability.
        version_compatible: build a plan later TensorRT releases can run (lean runtime inside).
        tf32: allow TF32 for FP32 tensors (off by default: an FP32 engine then computes in FP32,
            which the fp32 parity tolerance assumes; TensorRT's own default is on).
        legacy_fp16: TensorRT 10 only: weakly typed network with ``BuilderFlag.FP16``.
        log_file: write TensorRT's full (verbose) build log here.
        device: CUDA device index to build on (classic TensorRT; TensorRT-RTX builds on the CPU).
        builder: ``auto`` (classic TensorRT where it imports, else TensorRT-RTX), ``tensorrt`` or ``tensorrt-rtx``.
        compute_capabilities: TensorRT-RTX only: the GPUs' compute capabilities to build for, e.g.
            ``("8.6", "12.0")`` (empty: its default, 8.0, 8.6, 8.9, 12.0 and later; 7.5 only when named).
    """

    workspace_mib: int | None = None
    batch_profile: BatchProfile | None = None
    input_profiles: dict[str, ShapeSet] = field(default_factory=dict)
    timing_cache: str | None = None
    optimization_level: int | None = None
    hardware_compatibility: str = "none"
    version_compatible: bool = False
    tf32: bool = False
    legacy_fp16: bool = False
    log_file: str | None = None
    device: int = 0
    builder: str = "auto"
    compute_capabilities: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["batch_profile"] = asdict(self.batch_profile) if self.batch_profile else None
        d["compute_capabilities"] = list(self.compute_capabilities)
        return d


def check_options(options: BuildOptions, tensorrt_version: str, library: str = CLASSIC) -> None:
    """Reject option combinations the installed TensorRT cannot honour (InputError, with the fix)."""
    if library == RTX:
        _check_rtx_options(options, tensorrt_version)
    elif options.compute_capabilities:
        raise InputError(f"--compute-capability is a TensorRT-RTX option; TensorRT {tensorrt_version} builds for the GPU "
                         "it runs on: drop it, or add --builder tensorrt-rtx")
    if options.legacy_fp16 and not weak_typing_available(tensorrt_version):
        raise InputError(
            f"--legacy-fp16 needs TensorRT 10; TensorRT {tensorrt_version} removed weak typing (BuilderFlag.FP16): "
            "build from an FP16 ONNX instead (vitdeploy calibrate), which the strongly typed build keeps exactly"
        )
    if options.optimization_level is not None and not 0 <= options.optimization_level <= MAX_OPTIMIZATION_LEVEL:
        raise InputError(f"--optimization-level {options.optimization_level} is outside 0..{MAX_OPTIMIZATION_LEVEL}")
    if options.workspace_mib is not None and options.workspace_mib < 1:
        raise InputError("--workspace must be at least 1 MiB")
    if options.hardware_compatibility not in HARDWARE_LEVELS:
        raise InputError(f"--hardware-compatibility must be one of {', '.join(HARDWARE_LEVELS)}")


def _check_rtx_options(options: BuildOptions, version: str) -> None:
    """The classic options TensorRT-RTX has no use for, each refused with what to do instead."""
    label = f"TensorRT-RTX {version}"
    if options.legacy_fp16:
        raise InputError(f"--legacy-fp16 is a TensorRT 10 option; {label} builds strongly typed networks only: "
                         "build from an FP16 ONNX instead (vitdeploy calibrate -p fp16)")
    if options.timing_cache:
        raise InputError(f"--timing-cache has no effect on {label} engines and would make its CPU-only build query a GPU "
                         "(NVIDIA's porting guide): drop it; TensorRT-RTX keeps JIT-compiled kernels in a runtime cache at load")
    if options.hardware_compatibility != "none":
        raise InputError(f"--hardware-compatibility is a classic TensorRT option; {label} engines target compute "
                         "capabilities: use --compute-capability (repeatable), or leave it out for 8.0, 8.6, 8.9, 12.0 and later")
    if options.version_compatible:
        raise InputError(f"--version-compatible is a classic TensorRT option; nothing documents it for {label}: "
                         "drop it, and rebuild the engine when TensorRT-RTX is upgraded")
    for cc in options.compute_capabilities:
        parse_compute_capability(cc)


def engine_precision(facts: OnnxFacts, legacy_fp16: bool) -> str:
    """What the engine computes in: the graph's own precision; ``fp16`` for a legacy FP16 build of an FP32 graph."""
    if legacy_fp16 and facts.graph_precision == "fp32":
        return "fp16"
    return facts.graph_precision


@dataclass
class BuildResult:
    plan: Path
    sidecar_file: Path
    sidecar: dict[str, Any]
    warnings: list[str]
    notes: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"plan": str(self.plan), "sidecar_file": str(self.sidecar_file), "sidecar": self.sidecar,
                "warnings": list(self.warnings), "notes": list(self.notes)}


def config_kwargs(trt: Any, options: BuildOptions, timing_cache_exists: bool) -> dict[str, Any]:
    """Polygraphy ``CreateConfig`` keyword arguments for ``options`` (only what the user set, plus TF32 and FP16).

    ``tf32`` is always passed because Polygraphy's default (off) is what vitdeploy wants for FP32
    parity; ``fp16`` (``BuilderFlag.FP16``) is True only for the legacy weakly typed TensorRT 10 build.
    No quantization flags, calibrator or precision constraints: TensorRT 11 removed them.
    """
    kwargs: dict[str, Any] = {"tf32": options.tf32, "fp16": options.legacy_fp16}
    if options.workspace_mib is not None:
        kwargs["memory_pool_limits"] = {trt.MemoryPoolType.WORKSPACE: int(options.workspace_mib) << 20}
    if options.timing_cache and timing_cache_exists:
        kwargs["load_timing_cache"] = options.timing_cache
    if options.optimization_level is not None:
        kwargs["builder_optimization_level"] = int(options.optimization_level)
    if options.hardware_compatibility != "none":
        member = HARDWARE_LEVEL_MEMBERS[options.hardware_compatibility]
        if not hasattr(trt.HardwareCompatibilityLevel, member):  # SAME_COMPUTE_CAPABILITY arrived in TensorRT 10.9
            raise InputError(f"--hardware-compatibility {options.hardware_compatibility} is not in TensorRT "
                             f"{getattr(trt, '__version__', '?')}: use ampere_plus, or TensorRT 10.9 or newer")
        kwargs["hardware_compatibility_level"] = getattr(trt.HardwareCompatibilityLevel, member)
    if options.version_compatible:
        kwargs["version_compatible"] = True
    return kwargs


def _create_config(trt: Any, builder: Any, options: BuildOptions, timing_cache_exists: bool) -> Any:
    """Polygraphy's ``CreateConfig`` with vitdeploy's options, evaluated without the network (see module docstring)."""
    poly = import_polygraphy_trt("building TensorRT engines")
    from polygraphy.logger import G_LOGGER

    with G_LOGGER.verbosity(G_LOGGER.WARNING):  # Polygraphy's INFO lines would interleave with vitdeploy's progress
        return poly.CreateConfig(**config_kwargs(trt, options, timing_cache_exists))(builder, None)


def _create_rtx_config(library: TensorRTLibrary, builder: Any, options: BuildOptions) -> tuple[Any, tuple[str, ...]]:
    """A TensorRT-RTX builder config from its documented ``IBuilderConfig`` calls; returns it and the engine's targets.

    TF32 is cleared unless asked for, as for classic builds (FP32 parity); the profiling verbosity is
    DETAILED so the builder logs its layer list.
    """
    trt = library.module
    config = builder.create_builder_config()
    if options.workspace_mib is not None:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(options.workspace_mib) << 20)
    if options.optimization_level is not None:
        config.builder_optimization_level = int(options.optimization_level)
    if options.tf32:
        config.set_flag(trt.BuilderFlag.TF32)
    else:
        config.clear_flag(trt.BuilderFlag.TF32)
    config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
    targets = set_rtx_targets(library, config, tuple(parse_compute_capability(cc) for cc in options.compute_capabilities))
    return config, targets


def _add_rtx_profile(builder: Any, network: Any, config: Any, profiles: dict[str, ShapeSet]) -> None:
    """One optimization profile through the library's own API: dynamic inputs' ranges, static inputs at their shape."""
    if not profiles:
        return
    profile = builder.create_optimization_profile()
    for index in range(network.num_inputs):
        tensor = network.get_input(index)
        shapes = profiles.get(tensor.name)
        if shapes is None:
            static = tuple(tensor.shape)
            profile.set_shape(tensor.name, static, static, static)
        else:
            profile.set_shape(tensor.name, tuple(shapes["min"]), tuple(shapes["opt"]), tuple(shapes["max"]))
    config.add_optimization_profile(profile)


def _add_profile(builder: Any, network: Any, config: Any, profiles: dict[str, ShapeSet]) -> None:
    """One optimization profile: the dynamic inputs' ranges, every static input at its own shape.

    ``Profile.to_trt`` needs every network input in the profile; ``fill_defaults`` adds the static
    ones (a dynamic input it would fix to 1 never reaches it: :func:`input_profiles` covers them all).
    """
    if not profiles:
        return
    poly = import_polygraphy_trt("building TensorRT engines")
    profile = poly.Profile()
    for name, shapes in profiles.items():
        profile.add(name, min=tuple(shapes["min"]), opt=tuple(shapes["opt"]), max=tuple(shapes["max"]))
    profile.fill_defaults(network)
    config.add_optimization_profile(profile.to_trt(builder, network))


def build_engine(
    onnx_path: str | Path,
    plan_path: str | Path,
    options: BuildOptions | None = None,
    echo: Echo = quiet,
) -> BuildResult:
    """Build a TensorRT engine from an ONNX file and write ``plan_path`` and its sidecar.

    Raises:
        InputError: a missing or invalid ONNX file, an unusable output path, bad options.
        MissingDependencyError: tensorrt, polygraphy or cuda-python is not installed.
        EngineError: no usable GPU (classic TensorRT), TensorRT rejected the graph (the node is named) or the build failed.
    """
    options = options or BuildOptions()
    plan = check_output_path(plan_path)
    check_output_path(sidecar_path(plan))
    if options.log_file:
        check_output_path(options.log_file)
    if options.timing_cache:
        check_output_path(options.timing_cache)
    facts = read_onnx_facts(onnx_path)
    target = target_of(facts.metadata)
    if target is not None and not target.tensorrt_parsable:
        # That graph holds com.microsoft contrib ops, which TensorRT's ONNX parser does not know.
        raise InputError(f"'{Path(onnx_path).name}' was exported with --target {target.name} (ONNX Runtime contrib ops): "
                         "re-export with --target tensorrt or generic for TensorRT")
    if plan.resolve() == facts.path.resolve():
        raise InputError(f"-o '{plan}' is the ONNX file itself: choose another output name, e.g. {facts.path.with_suffix('.plan')}")
    recorded = facts.metadata.get("shape_profile") if isinstance(facts.metadata.get("shape_profile"), dict) else None
    profiles = input_profiles(facts.inputs, options.batch_profile, options.input_profiles, facts.path.name, recorded)
    library = load_library(options.builder, "building TensorRT engines")
    trt = library.module
    check_options(options, library.version, library.name)
    if library.builds_without_gpu:
        gpu_record: dict[str, Any] = {"name": None, "compute_capability": None, "index": None, "driver_cuda_version": None}
        where = "ahead of time on the CPU"
    else:
        from vitdeploy.cuda import query_gpu, set_device

        import_polygraphy_trt("building TensorRT engines")
        gpu = query_gpu(options.device)
        set_device(options.device)
        gpu_record = {"name": gpu.name, "compute_capability": gpu.compute_capability, "index": gpu.index,
                      "driver_cuda_version": gpu.driver_cuda_version}
        where = f"{gpu.name} (compute capability {gpu.compute_capability})"
    precision = engine_precision(facts, options.legacy_fp16)
    notes = []
    declared = facts.metadata.get("precision")
    if declared and declared != facts.graph_precision:
        notes.append(f"the ONNX metadata says precision '{declared}' but the graph computes in {facts.graph_precision}; "
                     f"the sidecar records what the graph computes")
    typing = "weakly_typed_fp16" if options.legacy_fp16 else "strongly_typed"
    timing_cache_exists = bool(options.timing_cache) and Path(str(options.timing_cache)).is_file()
    echo(f"building {facts.path.name} -> {plan.name}: {library.label}, {where}, {typing.replace('_', ' ')}, precision {precision}"
         + (f", profile {profiles}" if profiles else ""))
    if options.timing_cache:
        echo(f"timing cache {options.timing_cache}: {'reusing' if timing_cache_exists else 'new, written after the build'}")

    with BuildLog(options.log_file, echo) as log:
        log.note(f"vitdeploy build-engine {facts.path} -> {plan}; options {options.to_dict()}")
        logger = make_trt_logger(trt, log)
        builder = trt.Builder(logger)
        network = builder.create_network(library.network_flags(options.legacy_fp16))
        trt.init_libnvinfer_plugins(logger, "")
        parser = trt.OnnxParser(network, logger)
        parsed = parser.parse_from_file(str(facts.path))
        if not parsed or parser.num_errors:
            raise EngineError(format_parse_failure(facts.path.name, parser_problems(parser), facts.initializer_types,
                                                   library.label))
        targets: tuple[str, ...] = ()
        if library.builds_without_gpu:  # ahead of time (TensorRT-RTX): its own config API, no Polygraphy, no autotuning
            config, targets = _create_rtx_config(library, builder, options)
            _add_rtx_profile(builder, network, config, profiles)
            gpu_record["targets"] = list(targets)
        else:
            from polygraphy.exception import PolygraphyException

            try:
                config = _create_config(trt, builder, options, timing_cache_exists)
                _add_profile(builder, network, config, profiles)
            except PolygraphyException as exc:
                raise EngineError(f"{library.label} rejected a build option: {exc}") from exc
        echo("building the engine (minutes for a full-size model)...")
        start = time.perf_counter()
        serialized = builder.build_serialized_network(network, config)
        seconds = time.perf_counter() - start
        if serialized is None:
            raise EngineError(format_build_failure(facts.path.name, log.errors, facts.node_ops))
        log.note(f"built in {seconds:.1f} s")
        if options.timing_cache:
            cache = config.get_timing_cache()
            if cache is not None:
                atomic_write_bytes(options.timing_cache, bytes(cache.serialize()))
        warnings = list(log.warnings)
        layers = summarize_layers(parse_layer_list(log.layer_list)) if log.layer_list else None

    data = memoryview(serialized)
    sidecar = make_sidecar(
        plan_file=plan.name,
        plan_size=data.nbytes,
        plan_sha256=hashlib.sha256(data).hexdigest(),
        onnx_file=facts.path.name,
        onnx_sha256=sha256_file(facts.path),
        external_data={f.name: sha256_file(f) for f in facts.external_data},
        metadata={**facts.metadata, "precision": precision},  # what the engine computes in, for every runtime
        precision=precision,
        network=typing,
        tensorrt_version=library.version,
        tensorrt_library=library.name,
        gpu=gpu_record,
        profiles=[profiles] if profiles else [],
        io={"inputs": [t.to_dict() for t in facts.inputs], "outputs": [t.to_dict() for t in facts.outputs]},
        build_options=options.to_dict(),
        build_seconds=seconds,
        layers=layers,
    )
    with atomic_output(plan) as tmp:
        tmp.write_bytes(data)
    sidecar_file = write_sidecar(plan, sidecar)
    if layers:
        counts = ", ".join(f"{n} {p}" for p, n in layers["by_precision"].items())
        echo(f"engine layers: {layers['count']} ({counts})")
    if library.targets_compute_capabilities:
        echo(f"{library.title} engine for compute capability {', '.join(targets)}"
             f"{' and later' if targets == RTX_DEFAULT_TARGETS else ''}: it runs (JIT-compiled at load) on such an NVIDIA GPU")
    echo(f"built in {seconds:.1f} s: wrote {plan} ({data.nbytes / 1e6:.1f} MB) and {sidecar_file.name}")
    return BuildResult(plan=plan, sidecar_file=sidecar_file, sidecar=sidecar, warnings=warnings, notes=notes)
