"""OpenVINO as a second CPU runtime: the same ONNX files, the same :class:`~vitdeploy.runtime.backends.base.Runner` contract.

OpenVINO reads vitdeploy's ONNX files directly (``openvino.Core.read_model``: external weights, the
``com.microsoft.MultiHeadAttention`` of ``--target onnxruntime-cpu`` and INT8 Q/DQ pairs included),
so no conversion step or second file is needed. It is an optional extra (``pip install
'vitdeploy[openvino]'``), imported only when a runner is opened; ONNX Runtime stays the default CPU
runtime (README, "OpenVINO": the measured rule).

"fp32" means FP32 here too: OpenVINO's CPU plugin runs FP32 models in BF16 by default on CPUs with
AVX-512 BF16 or AMX (its ``INFERENCE_PRECISION_HINT`` property), which changes the numbers the way
TF32 does on CUDA. The runner pins ``f32`` unless the caller asks for another inference precision
(``inference_precision``), and ``provider`` says which ran. Files in FP16 (vitdeploy's islands) and
INT8 (Q/DQ) keep their own numerics: OpenVINO computes FP16 weights in the inference precision and runs
Q/DQ GEMMs as integer kernels.

INT8 on CPUs without VNNI/AMX (AVX2, AVX-512 without VNNI): OpenVINO's integer kernels add pairs of
u8 x s8 products in int16 there and saturate, which OpenVINO documents ("Saturation (overflow) issue
workaround": represent the weights in 7 bits). Measured on an AMD EPYC (AVX2, no VNNI), OpenVINO
2026.4.1, the tiny test encoder's INT8 file: cosine vs FP32 0.9895-0.9942 on OpenVINO against
0.9967-0.9985 on ONNX Runtime (whose u8u8 kernels vitdeploy selects there); with the weights
re-quantized to 7 bits OpenVINO gave 0.9950-0.9975, equal to ONNX Runtime on the same 7-bit file to
1e-5, so the loss was saturation and nothing else. The runner therefore loads an INT8 file with its
weights re-quantized to 7 bits (symmetric, -63..63, scale x 2; activations untouched) wherever
:class:`vitdeploy.cpu_features.CpuFeatures` says u8 x s8 saturates (``seven_bit_weights`` overrides),
and ``int8_weights`` says which ran. The file on disk is not changed.

What is tested (``tests/runtime/backends/test_openvino_runtime.py``, on the CPU the suite runs on), against the official
models: the SAM encoder's three export targets, the SAM decoder, a timm ViT and SAM 2's Hiera trunk within
the fp32 tolerance; the SAM encoder's FP16 and INT8 files within theirs on held-out images.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from vitdeploy.errors import InputError, MissingDependencyError, first_line
from vitdeploy.fileio import raise_if_weights_missing, require_onnx_file
from vitdeploy.runtime.forms.cpu_form import read_cpu_form
from vitdeploy.runtime.forms.openvino_gelu import DESCRIPTION as GELU_APART
from vitdeploy.runtime.forms.openvino_gelu import gelu_apart_from_gemms, keep_gelu_apart, read_openvino_form
from vitdeploy.runtime.forms.openvino_heads import DESCRIPTION as HEADS_IN_5D
from vitdeploy.runtime.forms.openvino_heads import heads_in_5d
from vitdeploy.metadata import read_onnx_metadata
from vitdeploy.precisions import Precision
from vitdeploy.runtime.backends.base import Runner, RunnerOptions, TensorMeta
from vitdeploy.runtime_facts import PROVEN_POLICIES
from vitdeploy.runtime.backends.registry import RUNTIMES, FileNeeds

OPENVINO_HINT = "pip install 'vitdeploy[openvino]' (or pip install openvino), or run on ONNX Runtime (--runtime onnxruntime)"
#: Inference precisions a caller may ask OpenVINO's CPU plugin for (``f32``: the file's FP32 math as written).
INFERENCE_PRECISIONS = ("f32", "bf16", "f16")


def import_openvino():
    """The ``openvino`` module, or MissingDependencyError naming the extra."""
    try:
        import openvino
    except ImportError as exc:
        raise MissingDependencyError("openvino", "running models on OpenVINO", OPENVINO_HINT) from exc
    return openvino


def openvino_version() -> str | None:
    """The installed OpenVINO's version (None when it is not installed); nothing is imported."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("openvino")
    except PackageNotFoundError:
        return None


def cpu_config(threads: int | None, inference_precision: str = "f32") -> dict[str, Any]:
    """The CPU plugin's ``compile_model`` properties vitdeploy runs with: one request at a time (``LATENCY``),
    the inference precision pinned (``f32``: FP32 as written) and ``threads`` (None: OpenVINO's default, all
    cores).

    With fewer threads than the cores this process may use, CPU pinning is off: the plugin pins its threads to
    the first cores, so two processes of 1 thread each (two Ray workers on 2 cores) would share core 0.
    Measured on a 2-core Xeon with AMX, SAM ViT-B BF16: two such processes took 18.6 s for 4 images each,
    against 9.0 s alone, with pinning on."""
    if inference_precision not in INFERENCE_PRECISIONS:
        raise InputError(f"OpenVINO inference precision '{inference_precision}' is not one of "
                         f"{', '.join(INFERENCE_PRECISIONS)}")
    config: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": inference_precision}
    if threads is not None:
        config["INFERENCE_NUM_THREADS"] = int(threads)
        from vitdeploy.cpu_features import available_cores

        if int(threads) < available_cores():
            config["ENABLE_CPU_PINNING"] = False
    return config


def _port_name(port: Any, declared: set[str]) -> str:
    """The output's ONNX name: OpenVINO gives a port every name its tensor had (``{'conv2d_5', 'high_res_feats_0'}``
    where the graph output is an alias of a convolution's) and ``get_any_name`` may return the internal one; the
    names the file's metadata declares win."""
    names = set(port.get_names())
    return next(iter(sorted(names & declared)), port.get_any_name())


def _compile_cache(core: Any, ov: Any, inference_precision: str) -> Path | None:
    """Turn on OpenVINO's model cache (``core.set_property({"CACHE_DIR": ...})``, its documented model caching) under
    vitdeploy's cache folder, one folder per OpenVINO version and inference precision; None where the cache is off
    (``VITDEPLOY_CACHE_DIR=none``) or cannot be written.

    OpenVINO keys a blob by the model and the device but not by ``INFERENCE_PRECISION_HINT``: on an Intel Xeon with
    AVX512-FP16 (family 6 model 207, OpenVINO 2026.4.1) one folder for every precision gave an ``f16`` compile the FP32
    blob an ``f32`` compile had left (FP32 numbers, rel. L2 0 against f32, where FP16 is 1.2e-3), and an ``f32``
    compile after an ``f16`` one FP16 numbers, while the compiled model read its hint back as asked. A changed file
    (another model hash) or a thread count (applied at load) needs no folder of its own."""
    from vitdeploy.fileio import user_cache_dir

    folder = user_cache_dir(f"openvino/{openvino_version() or ov.__version__}/{inference_precision}")
    if folder is None:
        return None
    core.set_property({"CACHE_DIR": str(folder)})
    return folder


class OpenVinoRunner(Runner):
    """Runs an ONNX file with OpenVINO's CPU plugin; reads the file's vitdeploy metadata.

    ``threads`` and ``inference_precision`` (default ``f32``): :func:`cpu_config` (one request at a time, as
    the ONNX Runtime runner runs). ``seven_bit_weights`` (INT8 files) and ``gelu_apart`` (FP32 files,
    :mod:`vitdeploy.runtime.forms.openvino_gelu`) are load-time forms, None: as this CPU measured best. Arrays
    returned by ``run`` are the runner's own copies.
    """

    backend = "openvino"

    @classmethod
    def from_options(cls, path: str | Path, options: RunnerOptions, **settings: Any) -> OpenVinoRunner:
        """A runner with the common ``options``: the precision policy ``file`` pins ``f32`` (an FP32 file's math as
        written; a BF16 file's layers in BF16 where the CPU has BF16 units, else in f32 on its BF16 weights),
        ``bf16``/``fp16`` ask the CPU plugin for BF16/FP16 inference; TF32 is CUDA math (refused)."""
        if options.tf32:
            raise InputError("--tf32 is CUDA math: OpenVINO runs on the CPU in FP32 (leave out --tf32)")
        precision = "f32" if options.policy == "file" else PROVEN_POLICIES[options.policy]["openvino_precision"]
        if options.policy == "file" and Precision.of(read_onnx_metadata(require_onnx_file(path))) is Precision.BF16:
            from vitdeploy.cpu_features import cpu_features

            precision = "bf16" if cpu_features().bf16_units else "f32"
        return cls(path, threads=options.threads, device=options.device, inference_precision=precision, **settings)

    def __init__(self, path: str | Path, threads: int | None = None, *, device: str = "cpu",
                 inference_precision: str = "f32", seven_bit_weights: bool | None = None, gelu_apart: bool | None = None):
        if device != "cpu":
            raise InputError(f"vitdeploy runs OpenVINO on the CPU only (asked for '{device}'): use --device cpu, or "
                             "--runtime onnxruntime for CUDA")
        config = cpu_config(threads, inference_precision)
        ov = import_openvino()
        path = require_onnx_file(path)
        file_metadata = read_onnx_metadata(path)  # a corrupt file says so before OpenVINO is asked
        refusal = RUNTIMES[self.backend].cpu_refusal(FileNeeds.of(file_metadata, f"'{path.name}'"), path.name)
        if refusal:
            form = read_cpu_form(file_metadata)
            raise InputError(refusal + (f", or give OpenVINO '{form.source}'" if form is not None and form.source else ""))
        core = ov.Core()
        #: Where OpenVINO keeps this model compiled for this CPU and config (its documented ``CACHE_DIR``): a new
        #: process loads it from there instead of compiling again; None where the cache is off or cannot be written.
        self.compile_cache = _compile_cache(core, ov, inference_precision)
        #: Seconds to read and compile (or load from the cache) the model.
        self.load_seconds = 0.0
        #: How an INT8 file's weights run here (None: not an INT8 graph).
        self.int8_weights: str | None = None
        source: Any = str(path)
        if Precision.of(file_metadata).quantized:
            from vitdeploy.cpu_features import cpu_features

            saturates = cpu_features().u8s8_saturates
            why = "this CPU has no VNNI/AMX, where OpenVINO's u8 x s8 kernels saturate int16 pair sums"
            if saturates if seven_bit_weights is None else seven_bit_weights:
                source, count = seven_bit_weight_graph(path)
                self.int8_weights = f"7-bit weights ({count} re-quantized at load: {why if saturates else 'as asked'})"
            else:
                self.int8_weights = "8-bit weights as in the file" + (f" ({why})" if saturates else "")
        #: The OpenVINO form the file holds (``vitdeploy optimize --runtime openvino``); None for any other file.
        self.openvino_form = read_openvino_form(file_metadata, f"'{path.name}'")
        if self.openvino_form is not None and gelu_apart is False:
            exported = self.openvino_form["source"] or "the exported file"
            raise InputError(f"'{path.name}' holds its GELUs apart from their GEMMs (written by 'vitdeploy optimize "
                             f"--runtime openvino'): for the fused reading run '{exported}'")
        if gelu_apart is None:
            from vitdeploy.cpu_features import cpu_features

            gelu_apart = keep_gelu_apart(cpu_features(), Precision.of(file_metadata))
        started = time.perf_counter()
        try:
            model = core.read_model(source)
            #: How many GELUs run apart from the GEMM before them (:mod:`vitdeploy.runtime.forms.openvino_gelu`):
            #: kept apart here, or as the file holds them.
            self.gelus_apart = gelu_apart_from_gemms(model, rewrite=bool(gelu_apart))
            #: How many heads transposes were written in 5-D (:mod:`vitdeploy.runtime.forms.openvino_heads`).
            self.heads_in_5d = heads_in_5d(model)
            self.compiled = core.compile_model(model, "CPU", config)
        except Exception as exc:  # OpenVINO raises RuntimeError (and its own types) for every unusable file
            raise_if_weights_missing(path, exc)
            # The file is a readable ONNX model (read_metadata_props above), so what OpenVINO lacks is an op or a type;
            # re-exporting the same file would not help.
            raise InputError(f"OpenVINO cannot load '{path}' ({_openvino_reason(exc)[:300]}): run it on ONNX Runtime "
                             "(--runtime onnxruntime), or give OpenVINO a file from 'vitdeploy export' (every --target "
                             "loads there)") from exc
        self.load_seconds = time.perf_counter() - started
        self.request = self.compiled.create_infer_request()
        self.path = path
        self.threads = threads
        self.device = device
        self.name = "openvino-cpu"
        self.version = str(openvino_version() or ov.__version__)
        self.warnings: list[str] = []
        self.metadata = file_metadata
        declared = {str(n) for n in (file_metadata.get("output_names") or [])} | {str(file_metadata.get("output_name"))}
        self.input_names = [port.get_any_name() for port in self.compiled.inputs]
        self.output_names = [_port_name(port, declared) for port in self.compiled.outputs]
        hint = self.compiled.get_property("INFERENCE_PRECISION_HINT")  # read back: what the plugin took
        #: The inference precision the compiled model runs (``f32`` unless asked otherwise).
        self.inference_precision = str(hint.get_type_name() if hasattr(hint, "get_type_name") else hint)
        #: What ran, in one line (as OnnxRuntimeRunner.provider).
        self.provider = (f"OpenVINO {self.version} CPU plugin, inference precision "
                         f"{self.inference_precision}, {self.compiled.get_property('INFERENCE_NUM_THREADS')} thread(s)")
        if self.int8_weights:
            self.provider += f", INT8 {self.int8_weights}"
        if self.gelus_apart:
            self.provider += f", {self.gelus_apart} {GELU_APART}" + (" as the file holds them"
                                                                      if self.openvino_form is not None else "")
        if self.heads_in_5d:
            self.provider += f", {self.heads_in_5d} {HEADS_IN_5D}"
        if self.inference_precision != inference_precision:
            units = next((" or ".join(u.upper().replace("_", "-") for u in facts["units"])
                          for facts in PROVEN_POLICIES.values() if facts["openvino_precision"] == inference_precision), "")
            self.warnings.append(f"OpenVINO runs inference precision {self.inference_precision}, not the {inference_precision} "
                                 f"asked for: its CPU plugin has no {inference_precision} kernels for this CPU"
                                 + (f" ({inference_precision} needs {units})" if units else ""))

    def input_metadata(self) -> dict[str, TensorMeta]:
        """Each input; a dynamic axis is ``"?"`` (OpenVINO keeps no ONNX axis names)."""
        return _ports(self.compiled.inputs, self.input_names)

    def output_metadata(self) -> dict[str, TensorMeta]:
        return _ports(self.compiled.outputs, self.output_names)

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            results = self.request.infer({n: np.ascontiguousarray(feeds[n]) for n in self.input_names})
        except RuntimeError as exc:  # a shape or type the compiled model does not take
            shapes = {n: list(np.shape(feeds[n])) for n in self.input_names}
            raise InputError(f"OpenVINO refused the inputs {shapes} for '{self.path.name}' (it takes "
                             f"{self.input_shapes()}): {_openvino_reason(exc)[:200]}") from exc
        return {name: np.array(results[port], copy=True) for port, name in zip(self.compiled.outputs, self.output_names)}


def _ports(ports: Any, names: list[str]) -> dict[str, TensorMeta]:
    """Name -> TensorMeta of compiled-model ports, under the runner's names for them (a dynamic axis is ``"?"``)."""
    out = {}
    for port, name in zip(ports, names):
        shape = tuple(d.get_length() if d.is_static else "?" for d in port.get_partial_shape())
        try:
            dtype: np.dtype | None = np.dtype(port.get_element_type().to_dtype())
        except Exception:  # noqa: BLE001 - an element type NumPy lacks (bf16): the shape still stands
            dtype = None
        out[name] = TensorMeta(name, shape, dtype)
    return out


def _openvino_reason(exc: Exception) -> str:
    """OpenVINO's messages are a stack of "Exception from src/...cpp:N:" lines around the one that says what failed."""
    return first_line(exc, skip="Exception from")


def seven_bit_weight_graph(path: Path) -> tuple[Any, int]:
    """(an in-memory copy of the INT8 graph at ``path`` for ``Core.read_model``, weights re-quantized): every
    DequantizeLinear of an int8 initializer with zero point 0 gets ``clip(round(q / 2), -63, 63)`` and twice
    its scale (per tensor or per channel alike).

    Why -63..63: 2 x 255 x 63 = 32130 fits int16, so a pair of u8 x s7 products cannot saturate.
    """
    import io

    import onnx
    from onnx import numpy_helper

    from vitdeploy.fileio import load_onnx_graph

    model = load_onnx_graph(path)
    onnx.load_external_data_for_model(model, str(path.parent))
    initializers = {init.name: init for init in model.graph.initializer}
    count, done = 0, set()
    for node in model.graph.node:
        if node.op_type != "DequantizeLinear" or node.input[0] not in initializers or node.input[1] not in initializers:
            continue
        if node.input[0] in done or node.input[1] in done:  # a shared weight or scale is re-quantized once
            continue
        weights = numpy_helper.to_array(initializers[node.input[0]])
        zero = initializers.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        if weights.dtype != np.int8 or (zero is not None and np.any(numpy_helper.to_array(zero))):
            continue
        scale = numpy_helper.to_array(initializers[node.input[1]])
        halved = np.clip(np.round(weights.astype(np.float32) / 2), -63, 63).astype(np.int8)
        initializers[node.input[0]].CopyFrom(numpy_helper.from_array(halved, node.input[0]))
        initializers[node.input[1]].CopyFrom(numpy_helper.from_array((scale * 2).astype(scale.dtype), node.input[1]))
        done.update(node.input[:2])
        count += 1
    return io.BytesIO(model.SerializeToString()), count


__all__ = ["INFERENCE_PRECISIONS", "OPENVINO_HINT", "OpenVinoRunner", "cpu_config", "import_openvino", "openvino_version",
           "seven_bit_weight_graph"]
