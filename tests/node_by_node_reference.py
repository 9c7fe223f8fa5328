"""The reference the precision passes' segmented measurement is tested against: the graph run node by node.

This is how vitdeploy measured before :mod:`vitdeploy.precision.segments` (kept here, unchanged in
what it computes, as the slow, obviously-correct oracle: each node alone in its own ONNX Runtime
session, fed exactly its inputs). Original description follows.

Run an ONNX graph node by node with ONNX Runtime: per-node value ranges and local FP16 drift.

Why node by node instead of one session with every intermediate tensor exposed as an output: a
full-size SAM encoder at 1024 px holds ~800 MB attention tensors; exposing all of them at once needs
tens of GB, while a node-by-node run keeps only the tensors still to be consumed. It also lets each
node be run a second time in FP16 on its own FP32 inputs rounded to FP16, which measures the error
that node adds by itself (its *local* drift), not the error it inherits from the nodes before it.

Limits: on a CPU, ONNX Runtime runs FP16 nodes that lack an FP16 kernel in FP32 between casts, so the
local drift measures the rounding of inputs and outputs, which is what exposes overflow, cancellation
(``x - mean``) and amplification (``exp`` of large logits); it does not model a GPU kernel's
accumulation order. Nodes with subgraphs (If/Loop) are not supported (the export's hygiene check
bans them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from vitdeploy.errors import PrecisionError
from vitdeploy.precision.activation_stats import NodeStats
from vitdeploy.precision.segments import TYPED_OPS, ensure_node_names

Feeds = dict[str, np.ndarray]
Progress = Callable[[int, int], None]

def _float_arrays(arrays: list[np.ndarray]) -> list[np.ndarray]:
    return [a for a in arrays if isinstance(a, np.ndarray) and a.dtype == np.float32]


def _max_abs(arrays: list[np.ndarray]) -> float:
    vals = [float(np.abs(a[np.isfinite(a)]).max()) for a in arrays if a.size and np.isfinite(a).any()]
    return max(vals, default=0.0)


def _rel_l2(ref: np.ndarray, cand: np.ndarray) -> float:
    ref64, cand64 = ref.astype(np.float64), cand.astype(np.float64)
    if not np.isfinite(cand64).all():
        return float("inf")
    norm = float(np.linalg.norm(ref64))
    diff = float(np.linalg.norm(cand64 - ref64))
    return diff / norm if norm > 0 else diff


class NodeByNodeRunner:
    """Runs a model node by node; each node is its own small ONNX Runtime session (built once)."""

    def __init__(self, model: onnx.ModelProto, threads: int | None = None, fp16: bool = True):
        try:
            import onnxruntime  # noqa: F401  (checked here so the error names the package)
        except ImportError as exc:  # pragma: no cover - onnxruntime is a core dependency
            from vitdeploy.errors import MissingDependencyError

            raise MissingDependencyError("onnxruntime", "measuring activations") from exc
        for node in model.graph.node:
            if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
                raise PrecisionError(f"node '{node.name}' ({node.op_type}) holds a subgraph: precision passes need a flat graph")
        self.model = ensure_node_names(onnx.shape_inference.infer_shapes(model, strict_mode=False))
        self.threads = threads
        self.fp16 = fp16
        graph = self.model.graph
        self.inits = {t.name: t for t in graph.initializer}
        self.types = {v.name: v.type for v in [*graph.input, *graph.value_info, *graph.output]}
        self.outputs = {o.name for o in graph.output}
        self.last_use: dict[str, int] = {}
        for i, node in enumerate(graph.node):
            for name in node.input:
                self.last_use[name] = i
        self._sessions: dict[tuple[int, bool], object] = {}
        self._init_arrays = {name: numpy_helper.to_array(t) for name, t in self.inits.items()}

    def _session(self, index: int, half: bool):
        key = (index, half)
        if key not in self._sessions:
            self._sessions[key] = self._build_session(self.model.graph.node[index], half)
        return self._sessions[key]

    def _value_info(self, name: str, half: bool) -> onnx.ValueInfoProto:
        vtype = self.types.get(name)
        if vtype is None:
            return onnx.ValueInfoProto(name=name)
        vtype = onnx.TypeProto.FromString(vtype.SerializeToString())
        if half and vtype.tensor_type.elem_type == TensorProto.FLOAT:
            vtype.tensor_type.elem_type = TensorProto.FLOAT16
        return helper.make_value_info(name, vtype)

    def _build_session(self, node: onnx.NodeProto, half: bool):
        import onnxruntime as ort

        inputs, initializers, seen = [], [], set()
        for name in node.input:
            if not name or name in seen:
                continue
            seen.add(name)
            if name in self.inits:
                arr = self._init_arrays[name]
                if half and arr.dtype == np.float32:
                    arr = arr.astype(np.float16)
                initializers.append(numpy_helper.from_array(arr, name))
            else:
                inputs.append(self._value_info(name, half))
        outputs = [self._value_info(name, half) for name in node.output if name]
        graph = helper.make_graph([node], f"single_{node.name}", inputs, outputs, initializers)
        single = helper.make_model(graph, opset_imports=list(self.model.opset_import), ir_version=self.model.ir_version)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.log_severity_level = 3
        if self.threads:
            options.intra_op_num_threads = int(self.threads)
        options.inter_op_num_threads = 1
        # Hundreds of small sessions: idle pool threads must sleep, not spin (spinning ones starve the CPU).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        # ... and none may keep its outputs' memory: with each session's arena holding what it once
        # allocated, the full-size SAM encoder (ViT-B, 1024 px, ~950 nodes) peaked at 17 GB RSS.
        options.enable_cpu_mem_arena = False
        options.enable_mem_pattern = False
        try:
            return ort.InferenceSession(single.SerializeToString(), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # ORT raises its own Fail/InvalidGraph types
            if half:
                return None  # no FP16 form of this node here: its drift is not measurable
            raise PrecisionError(f"ONNX Runtime cannot run node '{node.name}' ({node.op_type}) on its own: {str(exc).splitlines()[0]}") from exc

    def _half_measurable(self, node: onnx.NodeProto, float_inputs: list[np.ndarray]) -> bool:
        return self.fp16 and node.op_type not in TYPED_OPS and bool(float_inputs)

    def run(self, feeds: Feeds, stats: dict[str, NodeStats] | None,
            observe: Callable[[str, np.ndarray], None] | None = None) -> dict[str, np.ndarray]:
        """Run once, updating ``stats`` (keyed by node name; None: no statistics); returns the graph outputs.

        ``observe(name, array)`` is called for every graph input and every node output as soon as it
        exists, before the runner drops it (streaming consumers such as INT8 range collection).
        """
        values: dict[str, np.ndarray] = dict(feeds)
        if observe is not None:
            for name, array in feeds.items():
                observe(name, array)
        for i, node in enumerate(self.model.graph.node):
            act_in = {n: values[n] for n in node.input if n and n not in self.inits}
            session = self._session(i, False)
            out_names = [o for o in node.output if o]
            outs = session.run(out_names, act_in)
            if observe is not None:
                for name, array in zip(out_names, outs):
                    observe(name, array)
            if stats is not None:
                self._update_stats(i, node, act_in, outs, stats)
            values.update(zip(out_names, outs))
            for name in node.input:
                if self.last_use.get(name) == i and name not in self.outputs and name not in feeds:
                    values.pop(name, None)
        return {o: values[o] for o in self.outputs}

    def _update_stats(self, i: int, node: onnx.NodeProto, act_in: Feeds, outs: list[np.ndarray],
                      stats: dict[str, NodeStats]) -> None:
        """Ranges and local FP16 drift of node ``i`` from its FP32 inputs and outputs (see :class:`NodeStats`)."""
        out_names = [o for o in node.output if o]
        init_in = [self._init_arrays[n] for n in node.input if n in self.inits]
        st = stats.setdefault(node.name, NodeStats(node.name, node.op_type))
        float_in = _float_arrays(list(act_in.values()))
        float_out = _float_arrays(outs)
        st.max_abs_in = max(st.max_abs_in, _max_abs(float_in))
        st.max_abs_out = max(st.max_abs_out, _max_abs(float_out))
        st.init_max_abs = max(st.init_max_abs, _max_abs(_float_arrays(init_in)))
        st.nonfinite_out += int(sum((~np.isfinite(a)).sum() for a in float_out))
        if float_out and self._half_measurable(node, float_in + _float_arrays(init_in)):
            half_session = self._session(i, True)
            if half_session is not None:
                # Values beyond 65504 becoming inf is what this measures, not an accident to warn about.
                with np.errstate(over="ignore"):
                    half_feeds = {n: (v.astype(np.float16) if v.dtype == np.float32 else v) for n, v in act_in.items()}
                half_outs = half_session.run(out_names, half_feeds)
                drift = max((_rel_l2(r, h) for r, h in zip(outs, half_outs) if r.dtype == np.float32), default=0.0)
                st.drift = drift if st.drift is None else max(st.drift, drift)


def collect_node_stats(
    model: onnx.ModelProto,
    feeds_list: Sequence[Feeds],
    *,
    fp16: bool = True,
    threads: int | None = None,
    progress: Progress | None = None,
) -> dict[str, NodeStats]:
    """Per-node ranges (and local FP16 drift when ``fp16``) over every feed, keyed by node name.

    Node names are those of :func:`ensure_node_names` applied to ``model`` (a copy is measured).
    """
    if not feeds_list:
        raise PrecisionError("no calibration inputs to measure activations with")
    runner = NodeByNodeRunner(model, threads=threads, fp16=fp16)
    stats: dict[str, NodeStats] = {}
    for k, feeds in enumerate(feeds_list):
        runner.run(feeds, stats)
        if progress:
            progress(k + 1, len(feeds_list))
    return stats
