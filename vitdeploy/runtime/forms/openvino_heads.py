"""An OpenVINO load-time form: each heads transpose whose token and head axes may be equal written in 5-D, because
OpenVINO's CPU plugin computes a wrong attention from the 4-D one.

An exported attention splits its heads as ``Reshape(B, L, H, d)`` then ``Transpose(0, 2, 1, 3)`` into
``(B, H, L, d)`` before ``MatMul(q, k^T) -> Softmax -> MatMul(., v)``. OpenVINO 2026.4.1's CPU plugin fuses that chain,
with the transposes before it, into one attention node. Where ``L == H`` the transpose's input and output have the same
shape, and the fused node's output was wrong:

* SAM 2.1 hiera-t at 1024: the first block of the third stage pools its queries to 2x2 = 4 tokens per window with 4
  heads. In BF16 that one block took the image embedding from relative L2 0.008 to 0.177 of OpenVINO's own f32. The
  tiny test model does the same at its third stage (0.006 to 0.166), while its high-resolution levels, which come
  from the first two stages, stayed at 0.006. With the transpose written in 5-D: 0.0099, as close as the official's own
  BF16 autocast (0.0091).
* A hand-built chain with ``q`` given as ``(B, L, H, d)``: wrong in f32 (relative L2 0.84-0.98 against NumPy, on
  the Xeon with AMX) where ``L == H`` (4 and 4, 16 and 16), right where they differ (4 and 2, 16 and 4) and right in
  5-D (tests/runtime/backends/test_openvino_heads.py holds the runner's result to NumPy on that chain).

So what breaks is the plugin's pattern work, not arithmetic: the same graph broke in f32 or in BF16 depending on what
surrounded the chain. The 5-D form is ``Reshape(0, 0, 0, 0, 1) -> Transpose(0, 2, 1, 3, 4) -> Reshape(0, 0, 0, 0)``.
A zero in an OpenVINO Reshape copies that axis (``special_zero``), so dynamic shapes work too. It moves the same
values as the 4-D transpose, and no other op changes. It is applied, in the ``openvino.Model`` after
``Core.read_model`` (the file is not changed), to every ``Transpose(0, 2, 1, 3)`` whose axes 1 and 2 are not known to
differ (equal, or either not static). A model with none is left as it is. The C++ library's OpenVINO backend applies
the same form (cpp/src/openvino_backend.cpp, ``write_heads_in_5d``).
"""

from __future__ import annotations

from typing import Any

#: What the runner's ``provider`` line says when the form applied (after the count).
DESCRIPTION = "square heads transpose(s) written in 5-D (OpenVINO's fused attention misreads them)"

#: The permutation that splits heads: (B, L, H, d) -> (B, H, L, d).
HEADS_PERM = (0, 2, 1, 3)


def _may_be_square(shape: Any) -> bool:
    """Whether axes 1 and 2 of a rank-4 partial shape may be equal (equal, or either not static)."""
    return not (shape[1].is_static and shape[2].is_static) or shape[1].get_length() == shape[2].get_length()


def heads_in_5d(model: Any) -> int:
    """Rewrite ``model`` (an ``openvino.Model``) in place as the module docstring says; returns how many transposes
    it rewrote."""
    import numpy as np
    from openvino import opset13

    changed = 0
    for node in model.get_ordered_ops():
        if node.get_type_name() != "Transpose":
            continue
        order = node.input_value(1).get_node()
        if order.get_type_name() != "Constant" or tuple(int(v) for v in order.get_data().ravel()) != HEADS_PERM:
            continue
        source = node.input_value(0)
        shape = source.get_partial_shape()
        if shape.rank.is_dynamic or shape.rank.get_length() != 4 or not _may_be_square(shape):
            continue
        five = opset13.reshape(source, opset13.constant(np.array([0, 0, 0, 0, 1], np.int64)), special_zero=True)
        moved = opset13.transpose(five, opset13.constant(np.array([0, 2, 1, 3, 4], np.int64)))
        four = opset13.reshape(moved, opset13.constant(np.array([0, 0, 0, 0], np.int64)), special_zero=True)
        for target in node.output(0).get_target_inputs():
            target.replace_source_output(four.output(0))
        names = node.output(0).get_names()
        node.output(0).set_names(set())
        four.output(0).add_names(names)  # a model output keeps its name
        changed += 1
    if changed:
        model.validate_nodes_and_infer_types()
    return changed


__all__ = ["DESCRIPTION", "HEADS_PERM", "heads_in_5d"]
