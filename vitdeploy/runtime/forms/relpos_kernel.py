"""vitdeploy's fused rel-pos attention kernel for ONNX Runtime on the CPU (an optional custom-op library).

``--target onnxruntime-cpu`` exports SAM's attention as ONNX Runtime's contrib ``MultiHeadAttention``
over the folded queries/keys (:mod:`vitdeploy.rewrites.fused_attention`): the rel-pos term rides in
``grid_h + grid_w`` extra query/key columns, so the kernel's Q.K product is 192 wide instead of 64
for ViT-B's global blocks. ``ai.vitdeploy::RelPosAttention`` (``cpp/ort_ops/relpos_attention.cpp``,
built by ``bash cpp/build.sh`` as ``libvitdeploy_ort_ops.so``) takes the same three inputs, knows the
one-hot key columns, and adds the rel-pos term per tile of queries itself: same numbers, about half
the attention arithmetic.

The library has an AVX-512 path, an AVX2/FMA path, a NEON path (arm64) and a portable one (:data:`PATHS`). Which one a
node takes is asked of the library itself (:func:`kernel_path`): the widest the CPU has, no wider than
vitdeploy requests from :func:`vitdeploy.cpu_features.cpu_features` (so ``VITDEPLOY_CPU_MASK`` forces
the narrower paths on any CPU); the request is written into the node's ``isa`` attribute.

:func:`fuse_relpos_attention` swaps a ``MultiHeadAttention`` node for it only after checking, in the
graph, that its key input is ``Pad(k) + one-hot table`` with exactly the table the kernel assumes
(:func:`vitdeploy.runtime.forms.folded_attention.find_folded_attention`);
and only where a vector path applies (on the portable path ONNX Runtime's kernel is faster). When no
node can take one on this CPU, the runner keeps ONNX Runtime's attention and says so. The file on
disk is not changed: :class:`vitdeploy.runtime.backends.onnxruntime_runner.OnnxRuntimeRunner` does the swap in memory
with ``fused_attention=True``.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import ClassVar

import onnx
from onnx import helper

from vitdeploy.cpu_features import CpuFeatures, cpu_features
from vitdeploy.errors import InputError, MissingDependencyError
from vitdeploy.runtime.forms.folded_attention import RewriteReport, find_folded_attention

DOMAIN = "ai.vitdeploy"
OP_TYPE = "RelPosAttention"
LIBRARY_ENV = "VITDEPLOY_ORT_OPS"
LIBRARY_NAME = "libvitdeploy_ort_ops.so"
#: Where ``bash cpp/build.sh`` puts the library in a source checkout.
DEFAULT_LIBRARY = Path(__file__).resolve().parents[3] / "cpp" / "build" / LIBRARY_NAME


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


def usable_library() -> tuple[Path | None, str | None]:
    """The library the runner's default takes when it is there: ``(path, None)`` when it is found and loads,
    ``(None, None)`` when it is not built (nothing to say: the default then unfolds), ``(None, why)`` when a
    library is there but cannot be used (a stale or broken build: the user should hear of it)."""
    path = library_path()
    if path is None:
        return None, None
    try:
        _path_probe(str(path))
    except InputError as exc:
        return None, str(exc)
    except OSError as exc:  # not a loadable shared library (ctypes)
        return None, f"{path} cannot be loaded ({exc}): rebuild it with 'bash cpp/build.sh'"
    return path, None


#: Kernel paths, by the library's index (the node attribute ``isa``, the probe's answer). On arm64 any vector request
#: takes ``neon``; on x86-64 a ``neon`` cap (a file written on an arm64 machine) takes the widest x86 path.
PATHS = ("portable", "avx2", "avx512", "neon")


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


#: (tokens, head size) of a problem every vector path takes (tokens % 32 == 0, head size a multiple of 16 up to 80).
VECTOR_SHAPE = (64, 64)


def capped_path(cap: str, library: Path | None = None) -> str:
    """The path a swapped node whose ``isa`` attribute caps it at ``cap`` takes on this CPU. Nodes are swapped only
    where their shape takes a vector path, so it is the library's answer for any such shape: the widest path this
    CPU has, no wider than ``cap`` (a file written on an AVX-512 machine runs the AVX2 path on an AVX2 one)."""
    return kernel_path(*VECTOR_SHAPE, library, requested=cap)


@dataclass
class FusionReport(RewriteReport):
    """Which MultiHeadAttention nodes were swapped for the kernel (the path each takes), and why the others were not."""

    paths: dict[str, str] = field(default_factory=dict)
    #: Nodes in the folded form that only the portable path would take (shape or CPU): left to ONNX Runtime.
    portable_only: list[str] = field(default_factory=list)

    KEPT: ClassVar[str] = "left to ONNX Runtime"

    @property
    def taken(self) -> list[str]:
        """The kernel paths the swapped nodes take, each once."""
        return sorted(set(self.paths.values()))

    def summary(self) -> str:
        taken = f" ({', '.join(self.taken)} path)" if self.taken else ""
        return f"{len(self.changed)} attention node(s) on vitdeploy's kernel{taken}, {len(self.kept)} {self.KEPT}"


def fuse_relpos_attention(model: onnx.ModelProto, library: Path | None = None, requested: str | None = None,
                          base_dir: str | Path = "") -> tuple[onnx.ModelProto, FusionReport]:
    """Swap verified folded ``MultiHeadAttention`` nodes for ``ai.vitdeploy::RelPosAttention``, in place.

    ``model`` may be loaded without its external data, then read from ``base_dir`` (the model's folder) for
    the constants the check needs. ``requested`` caps the kernel path (default :func:`requested_path`, this CPU's).
    """
    library = library or require_library()
    requested = requested or requested_path()
    graph = model.graph
    found, kept = find_folded_attention(graph, base_dir)
    report = FusionReport(kept=dict(kept))
    for item in found:
        label = item.label
        path = kernel_path(item.tokens, item.head_dim, library, requested)
        if path == "portable":
            report.kept[label] = (f"{item.tokens} tokens x head size {item.head_dim}: only the kernel's portable path "
                                  f"(vector paths need tokens % 32 == 0 and AVX2/AVX-512; asked for {requested}); "
                                  "ONNX Runtime's kernel is faster there")
            report.portable_only.append(label)
            continue
        node = graph.node[item.index]
        fused = helper.make_node(OP_TYPE, list(node.input)[:3], list(node.output)[:1], name=label, domain=DOMAIN,
                                 num_heads=item.num_heads, grid_h=item.grid_h, grid_w=item.grid_w, isa=PATHS.index(path))
        graph.node[item.index].CopyFrom(fused)
        report.changed.append(label)
        report.paths[label] = path
    if report.changed and not any(o.domain == DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(DOMAIN, 1))
    return model, report


__all__ = ["DOMAIN", "OP_TYPE", "LIBRARY_ENV", "PATHS", "VECTOR_SHAPE", "FusionReport", "capped_path", "fuse_relpos_attention",
           "kernel_path", "requested_path",
           "library_path", "require_library", "usable_library"]
