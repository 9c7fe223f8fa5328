"""16-bit mixed precision: an FP16 or BF16 graph with FP32 islands where the format is unsafe, measured on
calibration data.

The two formats (:mod:`vitdeploy.precision.half_formats`) go through the same rules; the text below says
FP16, and BF16 differs where its facts differ: no range rule (BF16 has FP32's exponent range: its
``safe_max`` is an eighth of its largest value, as FP16's 8192 is of 65504), a drift limit scaled by its
unit roundoff (``drift_max`` 0.04 against FP16's 5e-3, both ~10x one rounding), the ``bf16`` parity
budget as the target, and a final retype (:func:`retype_to_bf16`): the FP16 graph's types become BF16 and
every weight is rounded to BF16 from its FP32 original, never through FP16. A BF16 graph is what a
strongly typed TensorRT build turns into a BF16 engine, and what ONNX Runtime CUDA runs in BF16; ONNX
Runtime's CPU has no BF16 kernels, so on a CPU it is measured with every tensor stored in BF16 around
FP32 arithmetic (:func:`vitdeploy.precision.evaluation.run_faithful`).

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
from onnx import numpy_helper

from vitdeploy.errors import MissingDependencyError, PrecisionError
from vitdeploy.onnx_graph import cast_to
from vitdeploy.precision.checks import graph_problems, raise_if_problems, require_fp32
from vitdeploy.precision.evaluation import StageProgress, compare_outputs, ort_session, run_all, run_faithful, worst_cosine
from vitdeploy.precision.islands import structural_fp32_nodes
from vitdeploy.precision.activation_stats import DRIFT_IMAGES, NodeStats, collect_node_stats
from vitdeploy.precision.half_formats import BF16, FP16, HalfFormat
from vitdeploy.precision.model_io import copy_model, infer_shapes, is_large
from vitdeploy.precision.segments import ensure_node_names
from vitdeploy.parity import TOLERANCES, ParityResult

Feeds = dict[str, np.ndarray]
FP16_MAX = FP16.max_finite
#: FP16's smallest subnormal: smaller non-zero weights would flush to zero.
FP16_MIN_POSITIVE = FP16.min_positive
#: Local drift limit per format: ~10x one rounding (FP16: 5e-3 at unit roundoff 4.9e-4; BF16 the same multiple
#: of its 3.9e-3).
DRIFT_MAX = {"fp16": 5e-3, "bf16": 4e-2}


@dataclass(frozen=True)
class HalfConfig:
    """Limits of the 16-bit pass (see the module docstring for what each rule does).

    ``safe_max``, ``drift_max`` and ``target_cosine`` left None take the format's defaults: an eighth of its
    largest value (FP16: 8192, 8x headroom under 65504, because deployment images can reach further than
    calibration ones), :data:`DRIFT_MAX`, and its parity budget's cosine.
    """

    format: HalfFormat = FP16
    safe_max: float | None = None
    drift_max: float | None = None
    target_cosine: float | None = None
    keep_io_types: bool = True
    structural: bool = True
    keep_nodes: tuple[str, ...] = ()
    max_budget_steps: int = 10
    drift_images: int = DRIFT_IMAGES
    threads: int | None = None

    def __post_init__(self) -> None:
        fmt = self.format
        defaults = {"safe_max": 8192.0 if fmt is FP16 else fmt.max_finite / 8, "drift_max": DRIFT_MAX[fmt.name],
                    "target_cosine": TOLERANCES[fmt.name].cosine_min}
        for name, value in defaults.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)


@dataclass
class HalfResult:
    """The converted graph, the nodes kept in FP32 with their reasons, and its parity against FP32."""

    model: onnx.ModelProto
    kept: dict[str, str]
    stats: dict[str, NodeStats]
    parity: list[ParityResult]
    node_count: int
    tool: str
    #: How many calibration feeds the local drift was measured on (ranges: all of them).
    drift_images: int = 0
    #: The converted graph's outputs on the evaluation feeds (every tensor rounded to its type), for
    #: comparisons against other references (calibrate's eager parity) without running it again.
    outputs: list[dict[str, np.ndarray]] = field(default_factory=list)

    @property
    def cosine(self) -> float:
        return worst_cosine(self.parity)


def tool_version(fmt: HalfFormat = FP16) -> str:
    import onnxconverter_common

    tool = f"onnxconverter-common {onnxconverter_common.__version__}"
    return tool if fmt is FP16 else f"{tool} + vitdeploy BF16 retype"


def rewrite_to_half(model: onnx.ModelProto, keep_fp32: Sequence[str], keep_io_types: bool = True,
                    fmt: HalfFormat = FP16) -> onnx.ModelProto:
    """The graph rewrite only: every node in ``fmt`` (FP16 or BF16) except ``keep_fp32`` (node names); ``model`` is
    not modified."""
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
    converted = remove_half_roundtrips(restore_fp32_weights(retarget_float_casts(reread_half_outputs(converted)), model))
    return retype_to_bf16(converted, model) if fmt is BF16 else converted


def retarget_float_casts(model: onnx.ModelProto) -> onnx.ModelProto:
    """Make each ``Cast(to=FLOAT)`` whose output the converter typed FP16 cast to FLOAT16, in place; returns ``model``.

    onnxconverter-common retypes every FP32 tensor of a converted node as FP16 but leaves a ``Cast``'s ``to`` as it
    was: a cast from another type (SAM 3's detector casts boolean masks to float, ``(~mask).float()``) then
    produces FLOAT into a tensor declared FLOAT16, and ONNX Runtime refuses the graph."""
    half = {info.name for info in (*model.graph.value_info, *model.graph.output)
            if info.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16}
    for node in model.graph.node:
        if node.op_type == "Cast" and node.output[0] in half:
            for attr in node.attribute:
                if attr.name == "to" and attr.i == onnx.TensorProto.FLOAT:
                    attr.i = onnx.TensorProto.FLOAT16
    return model


def reread_half_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """Let converted nodes that read a graph output read its FP16 value, in place; returns ``model``.

    With ``keep_io_types`` onnxconverter-common makes each FP32 graph output a ``Cast(to=FLOAT)`` of the converted
    tensor under the output's name, but a converted node that also reads that tensor keeps reading the name -- now
    FLOAT -- while its own outputs are typed FLOAT16 (SAM 2's and SAM 3's decoders return ``mask_tokens`` and read it
    again: ``onnx.checker`` refuses the Gather). Such a node reads the cast's FP16 input instead."""
    graph = model.graph
    half = {info.name for info in graph.value_info if info.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16}
    half |= {t.name for t in graph.initializer if t.data_type == onnx.TensorProto.FLOAT16}
    widened = {node.output[0]: node.input[0] for node in graph.node
               if cast_to(node) == onnx.TensorProto.FLOAT and node.input[0] in half}
    widened = {name: source for name, source in widened.items() if name in {o.name for o in graph.output}}
    for node in graph.node:
        if node.op_type == "Cast" or not any(o in half for o in node.output):
            continue
        for i, name in enumerate(node.input):
            if name in widened:
                node.input[i] = widened[name]
    return model


def retype_to_bf16(model: onnx.ModelProto, source: onnx.ModelProto) -> onnx.ModelProto:
    """The FP16 rewrite of ``source`` as a BF16 graph, in place; returns ``model``.

    Every FP16 type becomes BF16: tensor types, ``Cast(to=FLOAT16)``, initializers and tensor attributes
    (``Constant``). Values are rounded to BF16 from the FP32 original where ``source`` has it (the initializer
    or the node of the same name), so no weight goes through FP16's range or subnormals first; a value the
    converter made itself (none in vitdeploy's graphs) is widened from its FP16 value, which BF16 holds within
    one BF16 rounding.
    """
    half, wide = onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16
    originals = {t.name: t for t in source.graph.initializer if t.data_type == onnx.TensorProto.FLOAT}
    source_nodes = {n.name: n for n in source.graph.node if n.name}

    def rounded(tensor: onnx.TensorProto, original: onnx.TensorProto | None) -> onnx.TensorProto:
        values = numpy_helper.to_array(original if original is not None else tensor).astype(np.float32)
        return numpy_helper.from_array(BF16.round(values), tensor.name)

    graph = model.graph
    for k, tensor in enumerate(graph.initializer):
        if tensor.data_type == half:
            graph.initializer[k].CopyFrom(rounded(tensor, originals.get(tensor.name)))
    for node in graph.node:
        if node.op_type in ("Cast", "CastLike"):
            for attr in node.attribute:
                if attr.name == "to" and attr.i == half:
                    attr.i = wide
        original_node = source_nodes.get(node.name)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type == half:
                original = next((a.t for a in (original_node.attribute if original_node else ())
                                 if a.name == attr.name and a.t.data_type == onnx.TensorProto.FLOAT), None)
                attr.t.CopyFrom(rounded(attr.t, original))
    for info in (*graph.input, *graph.output, *graph.value_info):
        if info.type.tensor_type.elem_type == half:
            info.type.tensor_type.elem_type = wide
    return model


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


def remove_half_roundtrips(model: onnx.ModelProto) -> onnx.ModelProto:
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


def untyped_fp32_nodes(model: onnx.ModelProto, fmt: HalfFormat) -> dict[str, str]:
    """Nodes whose op has no ``fmt`` tensor type at the model's opset (ONNX's own schemas), so they stay FP32.

    BF16 joined most ops' types at opset 13, but not ``Conv``, ``ConvTranspose``, ``Resize``'s scales,
    ``Einsum`` or ``Cos``/``Sin`` before opset 22; vitdeploy exports at 17-18, so SAM's patch embedding and
    neck convolutions stay FP32 in a BF16 graph (``onnx.checker`` refuses them otherwise). Ops outside the
    ONNX domain (ONNX Runtime's contrib ops) stay FP32 in BF16: nothing documents their BF16 kernels.
    """
    from onnx import defs

    type_name = f"tensor({'float16' if fmt is FP16 else 'bfloat16'})"
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 18)
    kept = {}
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx"):
            if fmt is BF16:
                kept[node.name] = f"{node.op_type} ({node.domain}) has no documented BF16 kernel"
            continue
        try:
            schema = defs.get_schema(node.op_type, opset)
        except defs.SchemaError:
            continue
        floats = [c for c in schema.type_constraints if any("float" in t for t in c.allowed_type_strs)]
        if floats and not all(type_name in c.allowed_type_strs for c in floats):
            kept[node.name] = f"{node.op_type} has no {fmt.label} type in ONNX opset {opset}"
    return kept


def measured_fp32_nodes(stats: dict[str, NodeStats], config: HalfConfig) -> dict[str, str]:
    """Nodes rules 2-3 keep in FP32, with the measured value in the reason."""
    kept = {}
    label, largest = config.format.label, config.format.max_finite
    for name, st in stats.items():
        if st.init_max_abs > largest:
            kept[name] = f"weights reach {st.init_max_abs:.4g} > {label} max {largest:g}"
        elif max(st.max_abs_in, st.max_abs_out) > config.safe_max:
            kept[name] = f"activations reach {max(st.max_abs_in, st.max_abs_out):.4g} > safe {label} range {config.safe_max:g}"
        elif st.drift is not None and not np.isfinite(st.drift):
            kept[name] = f"overflows when run in {label}"
        elif st.drift is not None and st.drift > config.drift_max:
            kept[name] = f"{label} drift {st.drift:.3g} > {config.drift_max:g}"
    return kept


def convert_half(
    model: onnx.ModelProto,
    calibration: Sequence[Feeds],
    evaluation: Sequence[Feeds] | None = None,
    config: HalfConfig = HalfConfig(),
    *,
    progress: StageProgress | None = None,
    echo: Callable[[str], None] | None = None,
) -> HalfResult:
    """Convert an FP32 graph to ``config.format`` (FP16 or BF16) with FP32 islands; measured on ``calibration``,
    judged on ``evaluation`` against that format's parity budget.

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
    for name, reason in untyped_fp32_nodes(source, config.format).items():
        kept.setdefault(name, reason)
    fmt = config.format
    stats = collect_node_stats(source, calibration, drift=fmt, threads=config.threads, drift_images=config.drift_images,
                               progress=(lambda d, t: progress("measuring activations", d, t)) if progress else None)
    broken = [s.name for s in stats.values() if s.nonfinite_out]
    if broken:
        raise PrecisionError(f"the FP32 graph itself gives NaN/Inf on the calibration data (first at node '{broken[0]}')")
    for name, reason in measured_fp32_nodes(stats, config).items():
        kept.setdefault(name, reason)

    reference = run_all(ort_session(source, config.threads), evaluation, progress, "FP32 reference on the evaluation images")
    candidates = sorted((s for s in stats.values() if s.name not in kept and s.drift is not None),
                        key=lambda s: -(s.drift or 0.0))
    step = 1
    for attempt in range(config.max_budget_steps + 1):
        converted = rewrite_to_half(source, list(kept), config.keep_io_types, fmt)
        outputs = run_faithful(converted, evaluation, config.threads, progress, f"{fmt.label} parity, attempt {attempt + 1}")
        parity = compare_outputs(reference, outputs, fmt.name)
        cosine = worst_cosine(parity)
        if echo:
            echo(f"  {fmt.name} attempt {attempt + 1}: {len(kept)} node(s) in FP32, worst cosine vs FP32 {cosine:.8f}")
        if cosine >= config.target_cosine or not candidates:
            break
        if attempt == config.max_budget_steps:
            break
        for st in candidates[:step]:
            kept[st.name] = f"accuracy budget: drift {st.drift:.3g} among the largest while cosine {cosine:.6f} < {config.target_cosine}"
        candidates = candidates[step:]
        step *= 2
    if cosine < config.target_cosine:
        raise PrecisionError(f"{fmt.label} graph reaches cosine {cosine:.6f} vs FP32, below the target {config.target_cosine} "
                             f"with {len(kept)} node(s) kept in FP32: lower --target-cosine or keep more nodes (--keep-fp32)")
    raise_if_problems(graph_problems(converted), f"the {fmt.label} graph")
    return HalfResult(converted, kept, stats, parity, len(source.graph.node), tool_version(fmt),
                      min(config.drift_images, len(calibration)), outputs)
