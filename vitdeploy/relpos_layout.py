"""The folded rel-pos key layout: the one constant shared by the export rewrite and the fused CPU kernel.

``--target tensorrt|onnxruntime-cpu`` fold SAM's decomposed rel-pos term into the query/key products
(:mod:`vitdeploy.rewrites.fused_attention`): every key is extended by a one-hot of its row and a
one-hot of its column in the token grid. vitdeploy's fused kernel (:mod:`vitdeploy.runtime.forms.relpos_kernel`)
reads that layout instead of multiplying by it, so it swaps a graph's attention only when the graph's
table is exactly this one. NumPy only (the runtime package imports no torch).
"""

from __future__ import annotations

import numpy as np


def onehot_key_table(head_dim: int, h: int, w: int) -> np.ndarray:
    """(h*w, head_dim + h + w) float32: zeros, then one-hot of the key's row, then one-hot of its column."""
    n = h * w
    rows, cols = np.divmod(np.arange(n), w)
    table = np.zeros((n, head_dim + h + w), dtype=np.float32)
    table[np.arange(n), head_dim + rows] = 1.0
    table[np.arange(n), head_dim + h + cols] = 1.0
    return table


__all__ = ["onehot_key_table"]
