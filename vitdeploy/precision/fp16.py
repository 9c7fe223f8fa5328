"""FP16 mixed precision: an FP16 graph with FP32 islands where FP16 is unsafe, measured on calibration data.

Which nodes stay FP32 (each reason is reported):

1. structural rules (:mod:`vitdeploy.precision.islands`): normalization ops, Softmax/LogSoftmax (their
   inputs are cast up), normalization written out by hand (vitdeploy's MatMul LayerNorm2d);
2. range: a node whose float inputs or outputs, measured on the calibration images, exceed
   ``safe_max`` (default 8192: 8x headroom under FP16's 65504, because deployment images can reach
   further than calibration ones), or whose weights exceed 65504;
3. drift: a node whose output, run in FP16 on its own FP32 inputs rounded to FP16, differs from FP32
   by more than ``drift_max`` (relative L2; FP16's unit roundoff is 4.9e-4), measured on the first
   ``drift_images`` calibration feeds (:mod:`vitdeploy.precision.activation_stats` says why);
4. budget: if the whole graph still misses ``target_cosine`` against FP32 on the evaluation feeds
   (every tensor rounded to its type, see :func:`vitdeploy.precision.evaluation.run_faithful`),
   the remaining nodes with the largest drift are added, in doubling steps, until it holds.

The graph rewrite itself (FP16 initializers, Cast nodes around FP32 islands, FP32 inputs/outputs)
is onnxconverter-common's ``convert_float_to_float16`` with a node block list. Chosen over NVIDIA
ModelOpt AutoCast because ModelOpt's ONNX extra pins onnx~=1.21 and onnxruntime-gpu and pulls
cupy-cuda12x, which this project's CPU stack cannot take; AutoCast's own rules (I/O range with a
default limit of 512, initializer range, reduction depth) are covered by rules 1-2 above, and it has
no drift rule. onnxconverter-common clamps weights to ``max_finite_val`` silently (default 1e4): it
is called with 65504 and nodes with larger weights are kept FP32 instead.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx

from vitdeploy.errors import MissingDependencyError, PrecisionError
from vitdeploy.onnx_graph import cast_to
from vitdeploy.precision.checks import graph_problems, raise_if_problems, require_fp32
from vitdeploy.precision.evaluation import StageProgress, compare_outputs, ort_session, run_all, run_faithful, worst_cosine
from vitdeploy.precision.islands import structural_fp32_nodes
from vitdeploy.precision.activation_stats import DRIFT_IMAGES, NodeStats, collect_node_stats
from vitdeploy.precision.model_io import copy_model, infer_shapes, is_large
from vitdeploy.precision.segments import ensure_node_names
from vitdeploy.validation.parity import TOLERANCES, ParityResult

Feeds = dict[str, np.ndarray]
FP16_MAX = 65504.0
#: FP16's smallest subnormal: smaller non-zero weights would flush to zero.
FP16_MIN_POSITIVE = 2.0**-24


@dataclass(frozen=True)
class Fp16Config:
    """Limits of the FP16 pass (see the module docstring for what each rule does)."""

    safe_max: float = 8192.0
    drift_max: float = 5e-3
    target_cosine: float = TOLERANCES["fp16"].cosine_min
    keep_io_types: bool = True
    structural: bool = True
    keep_nodes: tuple[str, ...] = ()
    max_budget_steps: int = 10
    drift_images: int = DRIFT_IMAGES
    threads: int | None = None


@dataclass
class Fp16Result:
    """The converted graph, the nodes kept in FP32 with their reasons, and its parity against FP32."""

    model: onnx.ModelProto
    kept: dict[str, str]
    stats: dict[str, NodeStats]
    parity: list[ParityResult]
    node_count: int
    tool: str
    #: How many calibration feeds the local FP16 drift was measured on (ranges: all of them).
    drift_images: int = 0
    #: The converted graph's outputs on the evaluation feeds (every tensor rounded to its type), for
    #: comparisons against other references (calibrate's eager parity) without running it again.
    outputs: list[dict[str, np.ndarray]] = field(default_factory=list)

    @property
    def cosine(self) -> float:
        return worst_cosine(self.parity)


def tool_version() -> str:
    import onnxconverter_common

    return f"onnxconverter-common {onnxconverter_common.__version__}"


def rewrite_to_fp16(model: onnx.ModelProto, keep_fp32: Sequence[str], keep_io_types: bool = True) -> onnx.ModelProto:
    """The graph rewrite only: every node in FP16 except ``keep_fp32`` (node names); ``model`` is not modified."""
    try:
        from onnxconverter_common import float16
    except ImportError as exc:
        raise MissingDependencyError("onnxconverter-common", "FP16 conversion") from exc
    copy = copy_model(model)
    large = is_large(copy)
    if large:  # the converter's own shape inference serializes the model: give it the types, inferred on the structure
        inferred = infer_shapes(copy).graph.value_info
        del copy.graph.value_info[:]
        copy.graph.value_info.extend(inferred)
    try:
        with warnings.catch_warnings():
            # One UserWarning per weight clamped into FP16's range: the clamp is what we ask for
            # (min_positive_val, max_finite_val); ViT-B printed 73 of them.
            warnings.simplefilter("ignore", UserWarning)
            converted = float16.convert_float_to_float16(
                copy, min_positive_val=FP16_MIN_POSITIVE, max_finite_val=FP16_MAX, keep_io_types=keep_io_types,
                node_block_list=list(keep_fp32), disable_shape_infer=large,
            )
    except ValueError as exc:  # raised for already-FP16 graphs and unsupported structures
        raise PrecisionError(f"onnxconverter-common could not convert the graph: {str(exc).splitlines()[0]}") from exc
    return remove_fp16_roundtrips(restore_fp32_weights(converted, model))


def restore_fp32_weights(model: onnx.ModelProto, source: onnx.ModelProto) -> onnx.ModelProto:
    """Give FP32 islands their weights in FP32 again, in place; returns ``model``.

    onnxconverter-common 1.16 means to leave a blocked node's initializers in FP32, but it wraps the
    node's inputs in casts first, so the weight it then sees is read by a ``Cast(to=FLOAT)``, not by
    the blocked node, and is stored in FP16 (measured on the stress model: block 0's fc2 weights,
    ~4e-7, lost 2.9 % (relative L2) in FP16 subnormals, so the kept MatMul computed on rounded weights
    and the whole graph stayed at cosine 0.99975 however many nodes were kept). Every
    ``Cast(to=FLOAT)`` of such a weight is removed and its readers read the original FP32 tensor
    (under the weight's own name when nothing reads the FP16 copy any more, else under
    ``<name>::weight_fp32`` beside it).
    """
    graph = model.graph
    original = {t.name: t for t in source.graph.initializer if t.data_type == onnx.TensorProto.FLOAT}
    inits = {t.name: t for t in graph.initializer}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    outputs = {o.name for o in graph.output}
    rename: dict[str, str] = {}
    dropped: set[int] = set()
    for name, tensor in inits.items():
        if tensor.data_type != onnx.TensorProto.FLOAT16 or name not in original:
            continue
        casts = [n for n in readers.get(name, []) if cast_to(n) == onnx.TensorProto.FLOAT and n.output[0] not in outputs]
        if not casts:
            continue
        if len(casts) == len(readers[name]):
            tensor.CopyFrom(original[name])
            for info in graph.value_info:
                if info.name == name:
                    info.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
            wide = name
        else:
            wide = f"{name}::weight_fp32"
            copy = graph.initializer.add()
            copy.CopyFrom(original[name])
            copy.name = wide
        for cast in casts:
            rename[cast.output[0]] = wide
            dropped.add(id(cast))
    if not rename:
        return model
    kept_nodes = [n for n in graph.node if id(n) not in dropped]
    for node in kept_nodes:
        for i, name in enumerate(node.input):
            if name in rename:
                node.input[i] = rename[name]
    del graph.node[:]
    graph.node.extend(kept_nodes)
    return model


def remove_fp16_roundtrips(model: onnx.ModelProto) -> onnx.ModelProto:
    """Let FP32 islands pass FP32 tensors to each other directly, in place; returns ``model``.

    onnxconverter-common stores every tensor in FP16 and wraps each blocked node in casts, so the
    tensor between two FP32 nodes still goes FP32 -> FP16 -> FP32 (measured: the overflow test model's
    blocked MLP still gives Inf through these casts). Each ``Cast(to=FLOAT)`` of a ``Cast(to=FLOAT16)``
    output is bypassed: its consumers read the FP32 source; casts nobody reads are removed.
    """
    graph = model.graph
    producer = {o: n for n in graph.node for o in n.output}
    outputs = {o.name for o in graph.output}

    rename: dict[str, str] = {}
    for node in graph.node:
        if cast_to(node) != onnx.TensorProto.FLOAT or node.output[0] in outputs:
            continue
        first = producer.get(node.input[0])
        if first is not None and cast_to(first) == onnx.TensorProto.FLOAT16:
            source = producer.get(first.input[0])
            # Only bypass when the source really is FP32: the output of a node that is itself FP32.
            if source is not None and source.op_type == "Cast" and cast_to(source) != onnx.TensorProto.FLOAT:
                continue
            rename[node.output[0]] = first.input[0]
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name in rename:
                node.input[i] = rename[name]
    needed = {o.name for o in graph.output}
    keep = []
    for node in reversed(graph.node):
        if any(o in needed for o in node.output):
            keep.append(node)
            needed.update(node.input)
    del graph.node[:]
    graph.node.extend(reversed(keep))
    return model


def default_blocked_nodes(model: onnx.ModelProto) -> dict[str, str]:
    """Nodes onnxconverter-common keeps in FP32 by itself (ops without FP16 kernels in ONNX Runtime)."""
    from onnxconverter_common.float16 import DEFAULT_OP_BLOCK_LIST

    blocked = set(DEFAULT_OP_BLOCK_LIST)
    return {n.name: f"{n.op_type} has no FP16 kernel in ONNX Runtime (converter default)" for n in model.graph.node
            if n.op_type in blocked}


def measured_fp32_nodes(stats: dict[str, NodeStats], config: Fp16Config) -> dict[str, str]:
    """Nodes rules 2-3 keep in FP32, with the measured value in the reason."""
    kept = {}
    for name, st in stats.items():
        if st.init_max_abs > FP16_MAX:
            kept[name] = f"weights reach {st.init_max_abs:.4g} > FP16 max {FP16_MAX:g}"
        elif max(st.max_abs_in, st.max_abs_out) > config.safe_max:
            kept[name] = f"activations reach {max(st.max_abs_in, st.max_abs_out):.4g} > safe FP16 range {config.safe_max:g}"
        elif st.fp16_drift is not None and not np.isfinite(st.fp16_drift):
            kept[name] = "overflows when run in FP16"
        elif st.fp16_drift is not None and st.fp16_drift > config.drift_max:
            kept[name] = f"FP16 drift {st.fp16_drift:.3g} > {config.drift_max:g}"
    return kept


def convert_fp16(
    model: onnx.ModelProto,
    calibration: Sequence[Feeds],
    evaluation: Sequence[Feeds] | None = None,
    config: Fp16Config = Fp16Config(),
    *,
    progress: StageProgress | None = None,
    echo: Callable[[str], None] | None = None,
) -> Fp16Result:
    """Convert an FP32 graph to FP16 with FP32 islands; measured on ``calibration``, judged on ``evaluation``.

    ``model`` is not modified; unnamed nodes get names in the result. Raises PrecisionError when the
    target cosine cannot be met or the result fails ``onnx.checker``/hygiene.
    """
    require_fp32(model)
    source = ensure_node_names(copy_model(model))
    names = {n.name for n in source.graph.node}
    unknown = sorted(set(config.keep_nodes) - names)
    if unknown:
        raise PrecisionError(f"--keep-fp32 names nodes that are not in the graph: {', '.join(unknown[:5])}")
    evaluation = list(evaluation or calibration)

    kept: dict[str, str] = {}
    kept.update({n: "kept by the user" for n in config.keep_nodes})
    if config.structural:
        for name, reason in structural_fp32_nodes(source).items():
            kept.setdefault(name, reason)
    for name, reason in default_blocked_nodes(source).items():
        kept.setdefault(name, reason)
    stats = collect_node_stats(source, calibration, fp16=True, threads=config.threads, drift_images=config.drift_images,
                               progress=(lambda d, t: progress("measuring activations", d, t)) if progress else None)
    broken = [s.name for s in stats.values() if s.nonfinite_out]
    if broken:
        raise PrecisionError(f"the FP32 graph itself gives NaN/Inf on the calibration data (first at node '{broken[0]}')")
    for name, reason in measured_fp32_nodes(stats, config).items():
        kept.setdefault(name, reason)

    reference = run_all(ort_session(source, config.threads), evaluation, progress, "FP32 reference on the evaluation images")
    candidates = sorted((s for s in stats.values() if s.name not in kept and s.fp16_drift is not None),
                        key=lambda s: -(s.fp16_drift or 0.0))
    step = 1
    for attempt in range(config.max_budget_steps + 1):
        converted = rewrite_to_fp16(source, list(kept), config.keep_io_types)
        outputs = run_faithful(converted, evaluation, config.threads, progress, f"FP16 parity, attempt {attempt + 1}")
        parity = compare_outputs(reference, outputs, "fp16")
        cosine = worst_cosine(parity)
        if echo:
            echo(f"  fp16 attempt {attempt + 1}: {len(kept)} node(s) in FP32, worst cosine vs FP32 {cosine:.8f}")
        if cosine >= config.target_cosine or not candidates:
            break
        if attempt == config.max_budget_steps:
            break
        for st in candidates[:step]:
            kept[st.name] = f"accuracy budget: drift {st.fp16_drift:.3g} among the largest while cosine {cosine:.6f} < {config.target_cosine}"
        candidates = candidates[step:]
        step *= 2
    if cosine < config.target_cosine:
        raise PrecisionError(f"FP16 graph reaches cosine {cosine:.6f} vs FP32, below the target {config.target_cosine} "
                             f"with {len(kept)} node(s) kept in FP32: lower --target-cosine or keep more nodes (--keep-fp32)")
    raise_if_problems(graph_problems(converted), "the FP16 graph")
    return Fp16Result(converted, kept, stats, parity, len(source.graph.node), tool_version(),
                      min(config.drift_images, len(calibration)), outputs)
