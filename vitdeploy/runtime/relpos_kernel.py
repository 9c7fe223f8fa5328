"""vitdeploy's fused rel-pos attention kernel for ONNX Runtime on the CPU (an optional custom-op library).

``--target onnxruntime-cpu`` exports SAM's attention as ONNX Runtime's contrib ``MultiHeadAttention``
over the folded queries/keys (:mod:`vitdeploy.rewrites.fused_attention`): the rel-pos term rides in
``grid_h + grid_w`` extra query/key columns, so the kernel's Q.K product is 192 wide instead of 64
for ViT-B's global blocks. ``ai.vitdeploy::RelPosAttention`` (``cpp/ort_ops/relpos_attention.cpp``,
built by ``bash cpp/build.sh`` as ``libvitdeploy_ort_ops.so``) takes the same three inputs, knows the
one-hot key columns, and adds the rel-pos term per tile of queries itself: same numbers, about half
the attention arithmetic.

The library has an AVX-512 path, an AVX2/FMA path and a portable one (:data:`PATHS`). Which one a
node takes is asked of the library itself (:func:`kernel_path`): the widest the CPU has, no wider than
vitdeploy requests from :func:`vitdeploy.cpu_features.cpu_features` (so ``VITDEPLOY_CPU_MASK`` forces
the narrower paths on any CPU); the request is written into the node's ``isa`` attribute.

:func:`fuse_relpos_attention` swaps a ``MultiHeadAttention`` node for it only after checking, in the
graph, that its key input is ``Pad(k) + one-hot table`` with exactly the table the kernel assumes;
and only where a vector path applies (on the portable path ONNX Runtime's kernel is faster). When no
node can take one on this CPU, the runner keeps ONNX Runtime's attention and says so. The file on
disk is not changed: :class:`vitdeploy.runtime.runners.OnnxRuntimeRunner` does the swap in memory
with ``fused_attention=True``.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from vitdeploy.cpu_features import CpuFeatures, cpu_features
from vitdeploy.errors import InputError, MissingDependencyError
from vitdeploy.relpos_layout import onehot_key_table

DOMAIN = "ai.vitdeploy"
OP_TYPE = "RelPosAttention"
LIBRARY_ENV = "VITDEPLOY_ORT_OPS"
LIBRARY_NAME = "libvitdeploy_ort_ops.so"
#: Where ``bash cpp/build.sh`` puts the library in a source checkout.
DEFAULT_LIBRARY = Path(__file__).resolve().parents[2] / "cpp" / "build" / LIBRARY_NAME


def library_path() -> Path | None:
    """The custom-op library: ``$VITDEPLOY_ORT_OPS`` if set, else the checkout's ``cpp/build`` one; None if absent."""
    env = os.environ.get(LIBRARY_ENV)
    path = Path(env) if env else DEFAULT_LIBRARY
    return path if path.is_file() else None


def require_library() -> Path:
    path = library_path()
    if path is None:
        where = os.environ.get(LIBRARY_ENV) or str(DEFAULT_LIBRARY)
        raise MissingDependencyError(
            LIBRARY_NAME, "fused rel-pos attention",
            f"{where} not found: build it with 'bash cpp/build.sh' or point {LIBRARY_ENV} at the built {LIBRARY_NAME}")
    return path


#: Kernel paths, by the library's index (the node attribute ``isa``, the probe's answer).
PATHS = ("portable", "avx2", "avx512")


@lru_cache(maxsize=4)
def _path_probe(path: str):
    lib = ctypes.CDLL(path)
    try:
        probe = lib.VitdeployRelPosPath
    except AttributeError as exc:
        raise InputError(f"{path} was built by an older vitdeploy (no VitdeployRelPosPath): rebuild it with "
                         "'bash cpp/build.sh'") from exc
    probe.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]
    probe.restype = ctypes.c_int
    return probe


def requested_path(cpu: CpuFeatures | None = None) -> str:
    """The widest path vitdeploy asks for on this CPU (its vector ISA, after ``VITDEPLOY_CPU_MASK``)."""
    simd = (cpu or cpu_features()).simd
    return simd if simd in PATHS else "portable"


def kernel_path(tokens: int, head_dim: int, library: Path | None = None, requested: str | None = None) -> str:
    """The path (:data:`PATHS`) the library takes for this shape on this CPU when asked for ``requested``
    (default :func:`requested_path`): asked of the library itself, which checks the real CPU."""
    path = library or require_library()
    want = requested or requested_path()
    if want not in PATHS:
        raise InputError(f"unknown kernel path '{want}': use one of {', '.join(PATHS)}")
    return PATHS[_path_probe(str(path))(tokens, head_dim, PATHS.index(want))]


@dataclass
class FusionReport:
    """Which MultiHeadAttention nodes were swapped (and the kernel path each takes), and why the others were not."""

    swapped: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)
    #: Nodes in the folded form that only the portable path would take (shape or CPU): left to ONNX Runtime.
    portable_only: list[str] = field(default_factory=list)

    def summary(self) -> str:
        taken = sorted(set(self.paths.values()))
        return (f"{len(self.swapped)} attention node(s) on vitdeploy's kernel"
                f"{' (' + ', '.join(taken) + ' path)' if taken else ''}, {len(self.kept)} left to ONNX Runtime")

    def to_dict(self) -> dict:
        return {"swapped": list(self.swapped), "kept": dict(self.kept), "paths": dict(self.paths),
                "portable_only": list(self.portable_only)}


def _attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _constant(name: str, inits: dict[str, onnx.TensorProto], producers: dict[str, onnx.NodeProto]) -> np.ndarray | None:
    if name in inits:
        return numpy_helper.to_array(inits[name])
    node = producers.get(name)
    if node is not None and node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
        value = _attr(node, "value")
        return numpy_helper.to_array(value) if value is not None else None
    return None


def _onehot_layout(table: np.ndarray) -> tuple[int, int, int] | None:
    """(head_dim, grid_h, grid_w) if ``table`` (N, A) is exactly zeros | one-hot(row) | one-hot(column)."""
    if table.ndim != 2:
        return None
    n, width = table.shape
    nonzero = np.flatnonzero(np.abs(table).sum(axis=0))
    if nonzero.size == 0:
        return None
    head_dim = int(nonzero[0])
    for grid_h in range(1, width - head_dim):
        grid_w = width - head_dim - grid_h
        if grid_h * grid_w == n and np.array_equal(table, onehot_key_table(head_dim, grid_h, grid_w)):
            return head_dim, grid_h, grid_w
    return None


def _key_layout(key: str, inits, producers) -> tuple[tuple[int, int, int] | None, str]:
    """Follow Reshape <- Add(Pad(k), Unsqueeze(one-hot table)) back from an MHA key input."""
    reshape = producers.get(key)
    if reshape is None or reshape.op_type != "Reshape":
        return None, "key is not a Reshape of the folded keys"
    add = producers.get(reshape.input[0])
    if add is None or add.op_type != "Add":
        return None, "folded keys are not Pad(k) + one-hot table"
    pad = table = None
    for name in add.input:
        node = producers.get(name)
        if node is not None and node.op_type == "Pad":
            pad = node
        else:
            value = _constant(name, inits, producers)
            if value is None and node is not None and node.op_type == "Unsqueeze":
                value = _constant(node.input[0], inits, producers)
            table = value
    if pad is None or table is None:
        return None, "folded keys are not Pad(k) + one-hot table"
    layout = _onehot_layout(table.reshape(-1, table.shape[-1]) if table.ndim else table)
    if layout is None:
        return None, "the key table is not the one-hot rel-pos layout"
    head_dim, grid_h, grid_w = layout
    mode = _attr(pad, "mode", b"constant")
    pads = _constant(pad.input[1], inits, producers) if len(pad.input) > 1 else None
    fill = _constant(pad.input[2], inits, producers) if len(pad.input) > 2 and pad.input[2] else None
    if (mode not in (b"constant", "constant") or pads is None or (fill is not None and np.any(fill != 0))
            or int(pads[-1]) != grid_h + grid_w or np.count_nonzero(pads) != 1):
        return None, "the key padding is not zeros after k"
    return layout, ""


def fuse_relpos_attention(model: onnx.ModelProto, library: Path | None = None,
                          requested: str | None = None) -> tuple[onnx.ModelProto, FusionReport]:
    """Swap verified folded ``MultiHeadAttention`` nodes for ``ai.vitdeploy::RelPosAttention``, in place.

    ``model`` may be loaded without its external data (only small constants are read). ``requested``
    caps the kernel path (default :func:`requested_path`, this CPU's).
    """
    library = library or require_library()
    requested = requested or requested_path()
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    producers = {o: n for n in graph.node for o in n.output}
    report = FusionReport()
    for index, node in enumerate(graph.node):
        if node.op_type != "MultiHeadAttention" or node.domain != "com.microsoft":
            continue
        label = node.name or f"node{index}"
        inputs = list(node.input)
        if len(inputs) < 3 or any(inputs[3:]) or float(_attr(node, "scale", 0.0)) != 1.0:
            report.kept[label] = "has a bias/mask input or its own scale (not the folded form)"
            continue
        layout, why = _key_layout(inputs[1], inits, producers)
        if layout is None:
            report.kept[label] = why
            continue
        head_dim, grid_h, grid_w = layout
        path = kernel_path(grid_h * grid_w, head_dim, library, requested)
        if path == "portable":
            report.kept[label] = (f"{grid_h * grid_w} tokens x head size {head_dim}: only the kernel's portable path "
                                  f"(vector paths need tokens % 32 == 0 and AVX2/AVX-512; asked for {requested}); "
                                  "ONNX Runtime's kernel is faster there")
            report.portable_only.append(label)
            continue
        fused = helper.make_node(OP_TYPE, inputs[:3], list(node.output)[:1], name=label, domain=DOMAIN,
                                 num_heads=int(_attr(node, "num_heads")), grid_h=grid_h, grid_w=grid_w,
                                 isa=PATHS.index(path))
        graph.node[index].CopyFrom(fused)
        report.swapped.append(label)
        report.paths[label] = path
    if report.swapped and not any(o.domain == DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(DOMAIN, 1))
    return model, report


def fused_session_source(path: Path, library: Path | None = None) -> tuple[bytes | None, FusionReport]:
    """The model at ``path`` with the swap applied, serialized (external weights stay in their file).

    None instead of bytes when the graph's folded attention is there but no node can take a vector path
    on this CPU: the caller runs the file as it is (and says so). InputError when the graph has no
    attention the kernel could take at all (another export target).
    """
    from vitdeploy.fileio import load_onnx_graph

    model, report = fuse_relpos_attention(load_onnx_graph(path), library)
    if not report.swapped:
        if report.portable_only:
            return None, report
        reasons = sorted(set(report.kept.values())) or ["the graph has no MultiHeadAttention node"]
        raise InputError(f"'{path.name}' has no attention the fused kernel can take ({'; '.join(reasons)}): "
                         "export with --target onnxruntime-cpu, or run without fused attention")
    return model.SerializeToString(), report


__all__ = ["DOMAIN", "OP_TYPE", "LIBRARY_ENV", "PATHS", "FusionReport", "fuse_relpos_attention", "fused_session_source",
           "kernel_path", "requested_path",
           "library_path", "require_library"]
