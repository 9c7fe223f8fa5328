"""The fused rel-pos attention op's independent references, with the torch-free runtime only (no torch, no pytest): a one-node model of the op, the
float64 result it must give, the shapes every path is held to, and the rule for which path a shape takes. The x86-64
tests (tests/runtime/forms/test_relpos_kernel.py) and the arm64 check under qemu (scripts/arm_kernel_check.py) both
use them."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from vitdeploy.runtime.forms.relpos_kernel import DOMAIN, PATHS

#: Kernel vs float64 reference: float32 sums over at most 64 keys of O(1) terms.
KERNEL_MAX_ABS = 1e-5

#: (heads, grid_h, grid_w, head_dim) of the problems every path is held to.
SHAPES = [
    (2, 8, 8, 16),    # 64 tokens, head 16: 64-query tiles on AVX-512, 32 on AVX2
    (3, 4, 8, 32),    # 32 tokens: 32-query tiles
    (2, 4, 8, 48),    # head 48: the AVX2/NEON P.V product's 16-column tail
    (1, 8, 4, 80),    # head 80 (the widest the vector paths take), grid_w 4 (rel-pos added lane by lane on AVX)
    (2, 3, 3, 8),     # 9 tokens, head 8: always the portable path
    (1, 5, 7, 16),    # non-square grid, 35 tokens: portable
]


def expected_path(tokens: int, head_dim: int, requested: str, cpu_simd: str) -> str:
    """The rule the library must follow, stated independently: portable for shapes other than tokens % 32 == 0 and
    head_dim a multiple of 16 up to 80, or when portable is asked; on arm64 (``cpu_simd`` ``neon``) NEON for any
    vector request; on x86-64 the widest path the CPU has, no wider than requested (a ``neon`` request, written on an
    arm64 machine, caps nothing)."""
    if tokens % 32 or head_dim % 16 or head_dim > 80 or requested == "portable":
        return "portable"
    if cpu_simd == "neon":
        return "neon"
    best = PATHS.index(cpu_simd) if cpu_simd in ("avx2", "avx512") else 0
    cap = PATHS.index("avx512") if requested == "neon" else PATHS.index(requested)
    return PATHS[min(best, cap)]


def op_model(heads: int, grid_h: int, grid_w: int, head_dim: int, isa: int) -> onnx.ModelProto:
    """One ``ai.vitdeploy::RelPosAttention`` node with its ``isa`` attribute."""
    aug = heads * (head_dim + grid_h + grid_w)
    vi = lambda name, width: helper.make_tensor_value_info(name, TensorProto.FLOAT, ["b", grid_h * grid_w, width])  # noqa: E731
    node = helper.make_node("RelPosAttention", ["q_aug", "k_aug", "v"], ["out"], domain=DOMAIN,
                            num_heads=heads, grid_h=grid_h, grid_w=grid_w, isa=isa)
    graph = helper.make_graph([node], "op", [vi("q_aug", aug), vi("k_aug", aug), vi("v", heads * head_dim)],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid(DOMAIN, 1)],
                             ir_version=10)


def reference(q_aug: np.ndarray, k_aug: np.ndarray, v: np.ndarray, heads: int, grid_h: int, grid_w: int) -> np.ndarray:
    """softmax(q . k + rel_h[key row] + rel_w[key column]) v per head, in float64."""
    b, n, _ = q_aug.shape
    d = v.shape[-1] // heads
    q4 = q_aug.reshape(b, n, heads, -1).astype(np.float64)
    k4 = k_aug.reshape(b, n, heads, -1).astype(np.float64)
    v4 = v.reshape(b, n, heads, d).astype(np.float64)
    scores = np.einsum("bqhc,bkhc->bhqk", q4[..., :d], k4[..., :d])
    rows, cols = np.divmod(np.arange(n), grid_w)
    rel_h = q4[..., d:d + grid_h].transpose(0, 2, 1, 3)  # b, h, q, grid_h
    rel_w = q4[..., d + grid_h:].transpose(0, 2, 1, 3)
    scores += rel_h[..., rows] + rel_w[..., cols]
    scores -= scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("bhqk,bkhc->bqhc", p, v4).reshape(b, n, heads * d)


def inputs(heads: int, grid_h: int, grid_w: int, head_dim: int) -> dict[str, np.ndarray]:
    """Seeded inputs of one problem (batch 2)."""
    rng = np.random.default_rng(grid_h * 100 + head_dim)
    n, aug = grid_h * grid_w, head_dim + grid_h + grid_w
    return {"q_aug": rng.standard_normal((2, n, heads * aug)).astype(np.float32),
            "k_aug": rng.standard_normal((2, n, heads * aug)).astype(np.float32),  # the kernel reads k's first head_dim
            "v": rng.standard_normal((2, n, heads * head_dim)).astype(np.float32)}
