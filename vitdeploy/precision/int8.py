"""Explicit INT8: symmetric Q/DQ on the GEMM-like ops (MatMul, Gemm, Conv), calibrated on images.

What TensorRT's explicit quantization wants, and what is produced: QuantizeLinear/DequantizeLinear
pairs in front of each quantized op's inputs, INT8 with zero point 0 (symmetric), weights per
channel (output-channel axis), activations per tensor. Residual Adds, LayerNorm, Softmax and every
other op stay in FP32 (ViT INT8 accuracy collapses when they are quantized). The MatMuls that compute
a hand-written normalization's statistics (vitdeploy's MatMul LayerNorm2d) are not quantized either.

The rewrite is ONNX Runtime's ``quantize_static`` in QDQ format (the well-kept tool; ModelOpt's ONNX
quantizer needs its ``[onnx]`` extra, which pins onnx~=1.21 and onnxruntime-gpu). Two settings
differ from its defaults, for TensorRT: outputs of the quantized ops get no Q/DQ (ONNX Runtime adds
one by default, which quantizes the residual Adds and LayerNorms they feed: measured on the tiny SAM
encoder, worst cosine 0.979 with it), biases are left in FP32 (``QuantizeBias=False``) and constant
MatMul operands that are not 2-D (e.g. folded relative-position tables) are quantized per tensor,
because ONNX Runtime's CPU QLinearMatMul rejects per-channel zero points on N-D weights.

Calibration is vitdeploy's (:mod:`vitdeploy.precision.range_collection`): ranges are collected
image by image while the graph runs node by node, in bounded memory, and handed to
``quantize_static`` as its calibration cache. ONNX Runtime 1.31's own calibrators keep every
calibrated tensor of every image (tens of GB for the full-size SAM encoder at 1024 px) and give the
entropy method one candidate threshold (it never receives bin counts), so ``entropy`` equalled
``minmax``; the entropy search here uses TensorRT's 2048 bins / 128 levels.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from vitdeploy.errors import InputError, MissingDependencyError, PrecisionError
from vitdeploy.precision.checks import require_fp32
from vitdeploy.precision.islands import normalization_islands
from vitdeploy.precision.model_io import copy_model, save_onnx
from vitdeploy.precision.segments import ensure_node_names

Feeds = dict[str, np.ndarray]

#: CLI name -> ONNX Runtime CalibrationMethod member.
METHODS = {"minmax": "MinMax", "percentile": "Percentile", "entropy": "Entropy"}
QUANTIZED_OPS = ("MatMul", "Gemm", "Conv")


@dataclass(frozen=True)
class Int8Config:
    """Settings of the INT8 pass.

    Attributes:
        method: activation range calibration: minmax, percentile or entropy.
        percentile: the percentile for ``method='percentile'``.
        exclude_nodes: node names kept in FP32 (on top of the normalization statistics).
        threads: ONNX Runtime threads while calibrating.
        progress: ``progress(done, total)`` after each calibration input.
    """

    method: str = "minmax"
    percentile: float = 99.999
    exclude_nodes: tuple[str, ...] = ()
    threads: int | None = None
    progress: Callable[[int, int], None] | None = None


def tool_version() -> str:
    import onnxruntime

    return f"onnxruntime {onnxruntime.__version__} quantize_static (QDQ)"


def quantizable_nodes(model: onnx.ModelProto, exclude: Sequence[str] = ()) -> tuple[list[str], dict[str, str]]:
    """(nodes to quantize, {node: reason} for GEMM-like nodes left in FP32), by node name."""
    islands = normalization_islands(model)
    names = {n.name for n in model.graph.node}
    unknown = sorted(set(exclude) - names)
    if unknown:
        raise InputError(f"--keep-fp32 names nodes that are not in the graph: {', '.join(unknown[:5])}")
    constants = constant_tensors(model)
    chosen, skipped = [], {}
    for node in model.graph.node:
        if node.op_type not in QUANTIZED_OPS:
            continue
        if node.name in exclude:
            skipped[node.name] = "kept by the user"
        elif all(i in constants for i in node.input if i):
            # The SAM encoder's one-hot position map x rel_pos table: a constant that runtimes fold when they load
            # the FP32 graph; Q/DQ on it would stop the folding (ONNX Runtime then runs it every call) and
            # OpenVINO's low-precision MatMul transformation refuses it.
            skipped[node.name] = "computes a constant (all inputs are weights): folded at load, left FP32"
        elif node.name in islands:
            skipped[node.name] = f"{islands[node.name]}: statistics stay FP32"
        else:
            chosen.append(node.name)
    return chosen, skipped


def constant_tensors(model: onnx.ModelProto) -> set[str]:
    """Names of the tensors that depend on no graph input: initializers, Constant outputs and everything computed
    from those alone (ONNX nodes are in topological order)."""
    constants = {t.name for t in model.graph.initializer}
    for node in model.graph.node:
        if all(i in constants for i in node.input if i):
            constants.update(node.output)
    return constants


def _per_tensor_overrides(model: onnx.ModelProto, nodes: set[str]) -> dict[str, list[dict]]:
    """Per-tensor symmetric overrides for constant MatMul operands that are not 2-D (see module docstring)."""
    ranks = {t.name: len(t.dims) for t in model.graph.initializer}
    overrides = {}
    for node in model.graph.node:
        if node.op_type == "MatMul" and node.name in nodes:
            for name in node.input:
                if name in ranks and ranks[name] != 2:
                    overrides[name] = [{"symmetric": True}]
    return overrides


@contextlib.contextmanager
def _without_preprocessing_advice():
    """quantize_static logs "Please consider pre-processing before quantization" on the root logger at every
    call; its pre-processing (symbolic shape inference, optimization) is for dynamic graphs and would change
    ours, so the advice is dropped rather than shown to users."""
    root = logging.getLogger()

    def drop(record: logging.LogRecord) -> bool:
        return "pre-processing before quantization" not in record.getMessage()

    root.addFilter(drop)
    try:
        yield
    finally:
        root.removeFilter(drop)


def quantize_int8(model: onnx.ModelProto, calibration: Sequence[Feeds], config: Int8Config = Int8Config()) -> tuple[onnx.ModelProto, list[str], dict[str, str]]:
    """Quantize every eligible GEMM-like node; returns (Q/DQ model, quantized node names, {skipped node: reason}).

    ``model`` is not modified; unnamed nodes are named (:func:`ensure_node_names`) in the result.
    """
    try:
        from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
        from onnxruntime.quantization.calibrate import save_tensors_data
    except ImportError as exc:  # pragma: no cover - onnxruntime is a core dependency
        raise MissingDependencyError("onnxruntime", "INT8 quantization") from exc
    if config.method not in METHODS:
        raise InputError(f"unknown calibration method '{config.method}': use one of {', '.join(METHODS)}")
    if not calibration:
        raise PrecisionError("no calibration inputs for INT8 quantization")
    require_fp32(model)
    source = ensure_node_names(copy_model(model))
    nodes, skipped = quantizable_nodes(source, config.exclude_nodes)
    if not nodes:
        raise PrecisionError("the graph has no MatMul/Gemm/Conv node left to quantize")

    from vitdeploy.precision.range_collection import RangeConfig, calibrated_tensors, collect_ranges

    ranges = collect_ranges(source, calibration, calibrated_tensors(source, nodes),
                            RangeConfig(method=config.method, percentile=config.percentile),
                            threads=config.threads, progress=config.progress)
    extra = {
        "ActivationSymmetric": True,
        "WeightSymmetric": True,
        "QuantizeBias": False,
        # Only the inputs of the GEMMs: a Q/DQ on their outputs would quantize residual Adds and LayerNorm inputs.
        "OpTypesToExcludeOutputQuantization": list(QUANTIZED_OPS),
        "TensorQuantOverrides": _per_tensor_overrides(source, set(nodes)),
    }
    with tempfile.TemporaryDirectory(prefix="vitdeploy-int8-") as tmp:
        src, dst, cache = Path(tmp) / "fp32.onnx", Path(tmp) / "int8.onnx", Path(tmp) / "ranges.json"
        large = len(save_onnx(source, src)) > 1
        save_tensors_data(ranges, cache)
        try:
            with _without_preprocessing_advice():
                quantize_static(
                    str(src), str(dst), None, quant_format=QuantFormat.QDQ,
                    op_types_to_quantize=list(QUANTIZED_OPS), nodes_to_quantize=nodes, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                    calibrate_method=ranges.calibration_method, extra_options=extra, calibration_cache_path=cache,
                    use_external_data_format=large,
                )
        except (RuntimeError, ValueError) as exc:  # ORT reports calibration/graph failures with these
            raise PrecisionError(f"ONNX Runtime quantize_static failed: {str(exc).splitlines()[0]}") from exc
        quantized = onnx.load(str(dst))
    del quantized.metadata_props[:]
    quantized.metadata_props.extend(source.metadata_props)
    return quantized, nodes, skipped


def restrict_quantization(qmodel: onnx.ModelProto, fp32: onnx.ModelProto, quantized: set[str]) -> onnx.ModelProto:
    """A copy of ``qmodel`` where only the nodes in ``quantized`` keep their Q/DQ inputs; the rest read FP32 again.

    Works on one calibration: each tensor's scale does not depend on which other nodes are quantized,
    so any subset is a graph edit, not a new calibration. ``fp32`` is the named source model
    (node names as in ``qmodel``).
    """
    out = copy_model(qmodel)
    originals = {n.name: n for n in fp32.graph.node}
    fp32_inits = {t.name: t for t in fp32.graph.initializer}
    have = {t.name for t in out.graph.initializer}
    for node in out.graph.node:
        if node.op_type in QUANTIZED_OPS and node.name not in quantized and node.name in originals:
            original = originals[node.name]
            if list(node.input) != list(original.input):
                del node.input[:]
                node.input.extend(original.input)
                for name in original.input:
                    if name in fp32_inits and name not in have:
                        out.graph.initializer.append(fp32_inits[name])
                        have.add(name)
    _prune(out.graph)
    return out


def _prune(graph: onnx.GraphProto) -> None:
    """Remove nodes whose outputs nobody reads, then unreferenced initializers (in place)."""
    needed = {o.name for o in graph.output}
    keep = []
    for node in reversed(graph.node):
        if any(o in needed for o in node.output):
            keep.append(node)
            needed.update(i for i in node.input if i)
    keep.reverse()
    del graph.node[:]
    graph.node.extend(keep)
    inits = [t for t in graph.initializer if t.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(inits)
