"""Run an ONNX graph with its statistics computed inside ONNX Runtime, in bounded memory.

The precision passes need, for every calibration image, every tensor's range (FP16 islands, INT8
scales), each node's *local* FP16 drift (its output computed from its own inputs rounded to FP16,
stored in FP16, against FP32: the error it adds by itself, not the one it inherits) and, for the
INT8 histogram methods, the calibrated tensors themselves. Ways to get them, and why this one:

* one session with every tensor a graph output: the full-size SAM encoder at 1024 px produces
  ~31 GB of float tensors per image (its attention tensors are 805 MB each);
* one session per node (what vitdeploy did before): bounded memory, but ~950 sessions and Python
  round trips per image for ViT-B, run twice for FP16: about an hour for 12 images on 2 cores;
* segments with every tensor an output and the statistics in NumPy: measured on ViT-B at 1024 px
  (AMD EPYC, 2 threads), 32 s per image for the sessions plus 12 s of single-threaded NumPy
  reductions, before any drift;
* **the statistics as part of the graph** (this module): for every float tensor, ``ReduceMax``,
  ``ReduceMin`` and a sum of squares are added to the graph as scalar outputs; for FP16 drift each
  node gets a *shadow* copy in the same graph reading its FP32 inputs rounded to FP16 (explicit
  ``Cast`` pairs) and computing in FP32, whose output is rounded to FP16 and compared with the
  original's (sum of squared differences). Nothing large leaves ONNX Runtime unless asked for
  (``expose``: the INT8 histogram methods' tensors), so a run costs a few forward passes and ONNX
  Runtime's own threads do the reductions.

Drift without a second forward pass, measured on ViT-B at 1024 px (AMD EPYC Zen 1, AVX2, 2 threads,
one image): ranges + drift with a full shadow of every node took 78 s; with the two rules below,
34-39 s per image (a plain ONNX Runtime forward: 19-21 s; ranges alone: 21 s).

* Ops that only move or pick values (``ROUNDING_COMMUTES_OPS``: Reshape, Transpose, Slice, Pad, ...,
  Relu, Max) commute with rounding, ``f(round(x)) = round(f(x))``: their local drift is exactly the
  rounding error of their output, so they get no shadow, only the output's rounding.
* Large row-independent nodes are measured on a sample of rows (a row: the values along the last
  axis at one position of the others). A node whose rows are computed independently along some axis
  (MatMul/Gemm along A's leading axes, or only its row axis when B is batched; elementwise ops,
  Softmax and LayerNormalization over the last axis, along any other axis; the ops above, along any)
  and that has at least ``SAMPLE_FROM_ROWS`` rows is shadowed on every k-th index of its largest such
  axis (k keeps at least ``SAMPLE_ROWS`` rows and 8 indices), its inputs sliced where they carry that
  axis. It is the same relative L2 over a strided subset of >= 1024 rows (tested within 10 % of the
  full value; softmax errors are heavy-tailed). Ranges are always taken over whole tensors. The tiny
  test models have fewer rows: they are measured whole, and equal the node-by-node oracle.

Sums of squares are taken in two stages, partial sums over the last axis in float32 and those
summed in float64 (a one-stage float32 ``ReduceSumSquare`` was 1.2 % off over 67 M values). Inf and
NaN show in the extremes where ``ReduceMax``/``ReduceMin`` propagate them (they do not reliably for
NaN), and in the graph outputs, which are checked whole.

Memory: when tensors are exposed, the node list is cut, in topological order, into segments whose
exposed outputs fit ``budget_bytes`` (default 2 GiB; a single larger node is its own segment); each
segment is one session. Without exposed tensors the graph is one segment and ONNX Runtime frees
every intermediate after its last use, as in a plain run.

Sessions use no graph optimization (the kernels a single-node session would use; fusions could not
fire anyway, the statistics read every intermediate) and no memory arena. The model's weights are
in memory; sessions get them beside the graph (:mod:`vitdeploy.precision.model_io`), so models over
protobuf's 2 GiB limit (SAM ViT-H) run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from vitdeploy.errors import PrecisionError
from vitdeploy.precision.half_formats import HalfFormat
from vitdeploy.precision.model_io import plain_session, value_types

Feeds = dict[str, np.ndarray]
Observer = Callable[[str, np.ndarray], None]

DEFAULT_BUDGET_BYTES = 2 << 30
#: Drift of row-independent nodes with at least this many rows is measured on every k-th row, >= SAMPLE_ROWS rows.
SAMPLE_FROM_ROWS = 2048
SAMPLE_ROWS = 1024
#: Ops whose output rows (axis -2) depend only on the same rows of the inputs that carry that axis.
ELEMENTWISE_OPS = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Exp", "Log", "Erf", "Tanh", "Sigmoid", "Relu",
                             "Gelu", "Neg", "Abs", "Reciprocal", "Max", "Min", "Where", "Clip", "HardSigmoid",
                             "HardSwish", "LeakyRelu", "Softplus"})
LAST_AXIS_OPS = frozenset({"Softmax", "LogSoftmax", "LayerNormalization"})
#: Ops whose every output value is one of their inputs' values (or a monotone pick of them): they commute with
#: rounding, f(round(x)) = round(f(x)), so their local FP16 drift is exactly the rounding error of their output.
ROUNDING_COMMUTES_OPS = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Slice",
                                   "Concat", "Split", "Gather", "Expand", "Tile", "Pad", "DepthToSpace", "SpaceToDepth",
                                   "Relu", "Max", "Min", "ReduceMax", "ReduceMin", "MaxPool"})
#: Ops that only move or select elements: on FP16 inputs their outputs are FP16 values already, so the
#: FP16-storage graph runs them on the FP16 tensors themselves (ONNX Runtime's CPU kernels for them are
#: type-generic) instead of widening, computing and rounding again.
DATA_MOVEMENT_OPS = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Slice", "Concat",
                               "Split", "Gather", "Expand", "Tile"})
#: The ones ONNX Runtime's CPU also has BF16 kernels for (1.32: Expand and Tile have none).
BF16_DATA_MOVEMENT_OPS = DATA_MOVEMENT_OPS - {"Expand", "Tile"}
#: Ops whose attributes fix an output type: running them "in FP16" would change what they mean.
TYPED_OPS = frozenset({"Cast", "CastLike", "ConstantOfShape", "EyeLike", "RandomNormal", "RandomUniform",
                       "RandomNormalLike", "RandomUniformLike", "Multinomial", "Constant"})
_SEP = "::vd_"


def ensure_node_names(model: onnx.ModelProto) -> onnx.ModelProto:
    """Give every unnamed node a unique name, in place (the passes address nodes by name); returns ``model``."""
    seen = {n.name for n in model.graph.node if n.name}
    for i, node in enumerate(model.graph.node):
        if not node.name:
            name = f"{node.op_type}_{i}"
            while name in seen:
                name += "_"
            node.name = name
            seen.add(name)
    return model


@dataclass(frozen=True)
class TensorRange:
    """Extremes of one float tensor in one run (Inf, and NaN where the reductions propagate it, make it non-finite)."""

    low: float
    high: float

    @property
    def max_abs(self) -> float:
        return max(abs(self.low), abs(self.high))

    @property
    def finite(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)

    @classmethod
    def of(cls, array: np.ndarray) -> TensorRange:
        data = array.astype(np.float32, copy=False)
        if data.size == 0:
            return cls(0.0, 0.0)
        if not np.isfinite(data).all():
            return cls(float(np.nanmin(data)) if not np.isnan(data).any() else math.nan, math.inf)
        return cls(float(data.min()), float(data.max()))


@dataclass
class RunResult:
    """One run: the graph outputs, every measured tensor's range, and (FP16 drift) each node's local drift."""

    outputs: dict[str, np.ndarray]
    ranges: dict[str, TensorRange] = field(default_factory=dict)
    drift: dict[str, float] = field(default_factory=dict)


@dataclass
class Segment:
    """A run of consecutive nodes (indices into the graph) with the tensors it reads and writes."""

    nodes: list[int]
    inputs: list[str] = field(default_factory=list)
    carried: list[str] = field(default_factory=list)  # produced here, read by a later segment or a graph output
    exposed: list[str] = field(default_factory=list)
    bytes: int = 0


def _tensor_bytes(vtype: onnx.TypeProto | None, batch: int) -> int:
    if vtype is None or not vtype.tensor_type.HasField("shape"):
        return 0
    count = 1
    for dim in vtype.tensor_type.shape.dim:
        count *= dim.dim_value if dim.HasField("dim_value") else batch
    elem = vtype.tensor_type.elem_type
    return count * (np.dtype(helper.tensor_dtype_to_np_dtype(elem)).itemsize if elem else 4)


class SegmentRunner:
    """Runs a model with in-graph statistics (see the module docstring); sessions are built on first use.

    Args:
        model: the graph, weights in memory; node names are given where missing (in place).
        ranges: which float tensors get their range measured: ``"all"`` (every node output), or names.
        drift: also measure each measurable node's local drift in this 16-bit format (FP16 or BF16).
        expose: tensors handed to the ``observe`` callback of :meth:`run` (they leave ONNX Runtime).
        threads: ONNX Runtime intra-op threads.
        budget_bytes: the most exposed bytes one segment produces (a single larger node is its own segment).
        batch: the size assumed for symbolic dimensions when sizing segments.
    """

    def __init__(self, model: onnx.ModelProto, *, ranges: str | Collection[str] = (), drift: HalfFormat | None = None,
                 expose: Collection[str] = (), threads: int | None = None,
                 budget_bytes: int = DEFAULT_BUDGET_BYTES, batch: int = 1):
        for node in model.graph.node:
            if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
                raise PrecisionError(f"node '{node.name}' ({node.op_type}) holds a subgraph: precision passes need a flat graph")
        self.model = ensure_node_names(model)
        self.threads = threads
        self.drift = drift
        graph = self.model.graph
        self.types = value_types(self.model)
        self.inits = {t.name: t for t in graph.initializer}
        self.graph_inputs = [i.name for i in graph.input if i.name not in self.inits]
        self.graph_outputs = [o.name for o in graph.output]
        self.opset = next((o.version for o in self.model.opset_import if o.domain in ("", "ai.onnx")), 18)
        floats = {n for n, t in self.types.items() if t.tensor_type.elem_type == TensorProto.FLOAT and n not in self.inits}
        produced = {o for node in graph.node for o in node.output if o}
        wanted = produced if ranges == "all" else set(ranges)
        self.ranged = wanted & floats
        self.exposed = set(expose)
        self.segments = self._partition(budget_bytes, batch)
        #: per segment, the tensors a later segment or the caller still reads (the rest are dropped after it)
        self._read_after = [{n for s in self.segments[k + 1:] for n in s.inputs} | set(self.graph_outputs)
                            for k in range(len(self.segments))]
        self._sessions: dict[int, tuple[object, list[str]]] = {}

    # --- planning -----------------------------------------------------------------------------------

    def _partition(self, budget: int, batch: int) -> list[Segment]:
        nodes = self.model.graph.node
        segments: list[Segment] = []
        current = Segment([])
        for i, node in enumerate(nodes):
            size = sum(_tensor_bytes(self.types.get(o), batch) for o in node.output if o in self.exposed)
            if current.nodes and current.bytes + size > budget:
                segments.append(current)
                current = Segment([])
            current.nodes.append(i)
            current.bytes += size
        if current.nodes:
            segments.append(current)
        later_reads: dict[str, int] = {}
        for k, seg in enumerate(segments):
            for i in seg.nodes:
                for name in nodes[i].input:
                    later_reads[name] = k
        for k, seg in enumerate(segments):
            produced: set[str] = set()
            for i in seg.nodes:
                for name in nodes[i].input:
                    if name and name not in produced and name not in self.inits and name not in seg.inputs:
                        seg.inputs.append(name)
                produced.update(o for o in nodes[i].output if o)
            outs = [o for i in seg.nodes for o in nodes[i].output if o]
            seg.carried = [o for o in outs if later_reads.get(o, -1) > k or o in self.graph_outputs]
            seg.exposed = [o for o in outs if o in self.exposed]
        return segments

    # --- instrumented segment graphs ----------------------------------------------------------------

    def _value_info(self, name: str, as_name: str | None = None) -> onnx.ValueInfoProto:
        vtype = self.types.get(name)
        if vtype is None:
            raise PrecisionError(f"no type known for tensor '{name}' (shape inference could not type it)")
        return helper.make_value_info(as_name or name, vtype)

    def _reduce(self, op: str, x: str, out: str, axes: list[int] | None, nodes: list, inits: list) -> None:
        """``op`` over ``axes`` (all when None), keepdims 0, in the attribute/input form of the model's opset."""
        axes_as_input = self.opset >= 18 or op == "ReduceSum"
        inputs, attrs = [x], {"keepdims": 0}
        if axes is not None:
            if axes_as_input:
                const = f"{out}{_SEP}axes"
                inits.append(numpy_helper.from_array(np.array(axes, np.int64), const))
                inputs.append(const)
            else:
                attrs["axes"] = axes
        nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))

    def _sum_squares(self, x: str, out: str, nodes: list, inits: list) -> None:
        """float64 sum of squares of float32 ``x``: partial sums over the last axis, then in float64."""
        rank = len(self.types[x].tensor_type.shape.dim) if x in self.types else 1
        partial = f"{out}{_SEP}partial"
        if rank >= 1:
            self._reduce("ReduceSumSquare", x, partial, [-1], nodes, inits)
        else:
            nodes.append(helper.make_node("Mul", [x, x], [partial], name=partial))
        wide = f"{out}{_SEP}f64"
        nodes.append(helper.make_node("Cast", [partial], [wide], to=TensorProto.DOUBLE, name=wide))
        self._reduce("ReduceSum", wide, out, None, nodes, inits)

    def _measurable(self, node: onnx.NodeProto) -> bool:
        """Has a float output and a float input, and its meaning does not depend on types (see TYPED_OPS)."""
        if node.op_type in TYPED_OPS:
            return False
        is_float = lambda n: n in self.types and self.types[n].tensor_type.elem_type == TensorProto.FLOAT  # noqa: E731
        has_float_in = any(is_float(n) or (n in self.inits and self.inits[n].data_type == TensorProto.FLOAT)
                           for n in node.input if n)
        return has_float_in and any(is_float(o) for o in node.output if o)

    def init_array(self, name: str) -> np.ndarray:
        """The initializer ``name`` as an array."""
        return numpy_helper.to_array(self.inits[name])

    def _dims(self, name: str) -> list[int] | None:
        vtype = self.types.get(name)
        if vtype is None or not vtype.tensor_type.HasField("shape"):
            return None
        dims = [d.dim_value if d.HasField("dim_value") else 0 for d in vtype.tensor_type.shape.dim]
        return dims if all(dims) else None

    def _row_sampling(self, node: onnx.NodeProto) -> tuple[int, int, list[str]] | None:
        """(axis, stride, inputs to slice) when ``node``'s drift may be measured on every stride-th index of ``axis``.

        Rows are all positions but the last axis; a node qualifies when its output has at least
        ``SAMPLE_FROM_ROWS`` of them and is computed independently along the chosen axis (its largest
        such axis; a stride keeps >= ``SAMPLE_ROWS`` rows and >= 8 indices of that axis).
        """
        outs = [o for o in node.output if o]
        out = self._dims(outs[0]) if len(outs) == 1 else None
        if out is None or len(out) < 2:
            return None
        total = int(np.prod(out[:-1]))
        if total < SAMPLE_FROM_ROWS:
            return None
        if node.op_type in ("MatMul", "Gemm"):
            a = self._dims(node.input[0]) if node.input[0] not in self.inits else None
            b = self._dims(node.input[1]) if node.input[1] not in self.inits else list(self.inits[node.input[1]].dims)
            trans = next((x.i for x in node.attribute if x.name == "transA"), 0)
            if a is None or b is None or len(a) != len(out) or trans:
                return None
            axes = list(range(-len(out), -1)) if len(b) == 2 else [-2]  # a batched B pairs its batch axes with A's
        elif node.op_type in ROUNDING_COMMUTES_OPS:
            axis = max(range(-len(out), -1), key=lambda ax: out[ax])
            stride = min(total // SAMPLE_ROWS, out[axis] // 8)
            return (axis, stride, []) if stride >= 2 else None
        elif node.op_type in ELEMENTWISE_OPS or node.op_type in LAST_AXIS_OPS:
            if node.op_type in LAST_AXIS_OPS:
                axis = next((x.i for x in node.attribute if x.name == "axis"), -1)
                if axis not in (-1, len(out) - 1):
                    return None
            axes = list(range(-len(out), -1))
        else:
            return None
        axis = max(axes, key=lambda ax: out[ax])
        stride = min(total // SAMPLE_ROWS, out[axis] // 8)
        if stride < 2:
            return None
        inputs = node.input[:1] if node.op_type in ("MatMul", "Gemm") else [n for n in node.input if n]
        sliced = []
        for name in inputs:
            dims = self._dims(name) if name not in self.inits else list(self.inits[name].dims)
            if dims is None:
                return None
            if len(dims) >= -axis and dims[axis] == out[axis]:
                sliced.append(name)
            elif len(dims) >= -axis and dims[axis] != 1:
                return None
        return axis, stride, sliced

    def _segment_model(self, k: int) -> tuple[onnx.ModelProto, list[str]]:
        seg = self.segments[k]
        graph_nodes = [self.model.graph.node[i] for i in seg.nodes]
        nodes: list[onnx.NodeProto] = []
        inits = [self.inits[n] for n in sorted({n for node in graph_nodes for n in node.input if n in self.inits})]
        outputs = [self._value_info(n) for n in seg.carried]
        outputs += [self._value_info(n) for n in seg.exposed if n not in seg.carried]
        scalars: list[str] = []
        rounded: dict[str, str] = {}
        sliced: dict[tuple[str, int, int], str] = {}

        def rows(name: str, axis: int, stride: int) -> str:  # every stride-th index of ``axis`` of a tensor
            if (name, axis, stride) not in sliced:
                out = f"{name}{_SEP}rows{-axis}_{stride}"
                consts = [f"{out}_{tag}" for tag in ("starts", "ends", "axes", "steps")]
                for const, value in zip(consts, (0, np.iinfo(np.int64).max, axis, stride)):
                    inits.append(numpy_helper.from_array(np.array([value], np.int64), const))
                nodes.append(helper.make_node("Slice", [name, *consts], [out], name=out))
                sliced[(name, axis, stride)] = out
            return sliced[(name, axis, stride)]

        def round_half(name: str) -> str:  # the FP32 value rounded to the 16-bit format, as FP32 (overflow -> inf)
            if name not in rounded:
                half, back = f"{name}{_SEP}h", f"{name}{_SEP}r"
                if name in self.inits:
                    inits.append(numpy_helper.from_array(self.drift.round(self.init_array(name)), half))
                else:
                    nodes.append(helper.make_node("Cast", [name], [half], to=self.drift.onnx_type, name=half))
                nodes.append(helper.make_node("Cast", [half], [back], to=TensorProto.FLOAT, name=back))
                rounded[name] = back
            return rounded[name]

        for node in graph_nodes:
            nodes.append(node)
            for out in node.output:
                if out in self.ranged:
                    for op, tag in (("ReduceMax", "max"), ("ReduceMin", "min")):
                        self._reduce(op, out, f"{out}{_SEP}{tag}", None, nodes, inits)
                        scalars.append(f"{out}{_SEP}{tag}")
            if self.drift and self._measurable(node):
                sampling = self._row_sampling(node)
                axis, stride, to_slice = sampling if sampling else (-2, 1, [])
                commutes = node.op_type in ROUNDING_COMMUTES_OPS
                shadow = onnx.NodeProto.FromString(node.SerializeToString())
                shadow.name = f"{node.name}{_SEP}shadow"
                for j, name in enumerate(node.input if not commutes else ()):
                    is_float = (name in self.inits and self.inits[name].data_type == TensorProto.FLOAT) or (
                        name in self.types and self.types[name].tensor_type.elem_type == TensorProto.FLOAT)
                    source = rows(name, axis, stride) if name in to_slice else name
                    if name and is_float:
                        shadow.input[j] = round_half(source)
                    elif name in to_slice:
                        shadow.input[j] = source
                for j, name in enumerate(node.output):
                    if name:
                        shadow.output[j] = f"{name}{_SEP}shadow"
                if not commutes:
                    nodes.append(shadow)
                for name in node.output:
                    if not name or self.types.get(name) is None or self.types[name].tensor_type.elem_type != TensorProto.FLOAT:
                        continue
                    reference = rows(name, axis, stride) if sampling else name
                    computed = reference if commutes else f"{name}{_SEP}shadow"  # round(f(x)) for ops that commute
                    stored = f"{name}{_SEP}stored"
                    nodes.append(helper.make_node("Cast", [computed], [f"{stored}16"], to=self.drift.onnx_type,
                                                  name=f"{stored}16"))
                    nodes.append(helper.make_node("Cast", [f"{stored}16"], [stored], to=TensorProto.FLOAT, name=stored))
                    diff = f"{name}{_SEP}diff"
                    nodes.append(helper.make_node("Sub", [stored, reference], [diff], name=diff))
                    self._sum_squares(diff, f"{name}{_SEP}err2", nodes, inits)
                    self._sum_squares(reference, f"{name}{_SEP}ref2", nodes, inits)
                    scalars += [f"{name}{_SEP}err2", f"{name}{_SEP}ref2"]
        for name in scalars:
            elem = TensorProto.DOUBLE if name.endswith(("ref2", "err2")) else TensorProto.FLOAT
            outputs.append(helper.make_tensor_value_info(name, elem, []))
        graph = helper.make_graph(nodes, f"segment_{k}", [self._value_info(n) for n in seg.inputs], outputs, inits)
        model = helper.make_model(graph, opset_imports=list(self.model.opset_import), ir_version=self.model.ir_version)
        return model, [o.name for o in outputs]

    def _session(self, k: int):
        if k not in self._sessions:
            model, names = self._segment_model(k)
            try:
                self._sessions[k] = (plain_session(model, self.threads), names)
            except Exception as exc:  # ORT raises its own Fail/InvalidGraph types
                seg = self.segments[k]
                first, last = self.model.graph.node[seg.nodes[0]].name, self.model.graph.node[seg.nodes[-1]].name
                raise PrecisionError(f"ONNX Runtime cannot run the measured graph (nodes '{first}'..'{last}'): "
                                     f"{str(exc).strip().splitlines()[0]}") from exc
        return self._sessions[k]

    # --- running ------------------------------------------------------------------------------------

    def run(self, feeds: Feeds, observe: Observer | None = None,
            on_segment: Callable[[int], None] | None = None) -> RunResult:
        """Run once. ``observe(name, array)`` gets every graph input and every exposed tensor as it is produced;
        ``on_segment(k)`` is called after segment ``k`` (progress)."""
        values: dict[str, np.ndarray] = dict(feeds)
        result = RunResult({})
        for name in self.graph_inputs:
            if name in feeds and feeds[name].dtype == np.float32:
                result.ranges[name] = TensorRange.of(feeds[name])
            if observe is not None and name in feeds:
                observe(name, feeds[name])
        needed = {n for seg in self.segments for n in seg.inputs} | set(self.graph_outputs)
        for k, seg in enumerate(self.segments):
            later = self._read_after[k]
            session, names = self._session(k)
            outs = dict(zip(names, session.run(names, {n: values[n] for n in seg.inputs})))
            for name in seg.exposed:
                if observe is not None:
                    observe(name, outs[name])
            for name in seg.carried:
                values[name] = outs[name]
            self._collect(outs, result)
            for name in [n for n in values if n not in later and n in needed and n not in feeds]:
                del values[name]
            if on_segment is not None:
                on_segment(k)
        result.outputs = {o: values[o] for o in self.graph_outputs}
        for name, array in result.outputs.items():  # checked whole: NaN anywhere upstream usually lands here
            if array.dtype == np.float32 and (name not in result.ranges or not np.isfinite(array).all()):
                result.ranges[name] = TensorRange.of(array)
        return result

    @staticmethod
    def _collect(outs: dict[str, np.ndarray], result: RunResult) -> None:
        for name, value in outs.items():
            base, _, tag = name.rpartition(_SEP)
            if not base:
                continue
            if tag == "max":
                result.ranges[base] = TensorRange(float(outs[f"{base}{_SEP}min"]), float(value))
            elif tag == "err2":
                reference = float(outs[f"{base}{_SEP}ref2"])
                err2 = float(value)
                if math.isnan(err2) or math.isinf(err2):
                    drift = math.inf
                else:
                    drift = math.sqrt(err2 / reference) if reference > 0 else math.sqrt(err2)
                result.drift[base] = drift


__all__ = ["BF16_DATA_MOVEMENT_OPS", "DATA_MOVEMENT_OPS", "DEFAULT_BUDGET_BYTES", "SAMPLE_FROM_ROWS", "SAMPLE_ROWS",
           "RunResult", "Segment", "SegmentRunner", "TYPED_OPS", "TensorRange", "ensure_node_names"]
