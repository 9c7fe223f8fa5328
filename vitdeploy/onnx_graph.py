"""Small facts about ONNX nodes that every stage reads (no torch, no onnxruntime)."""

from __future__ import annotations

from typing import Any


def cast_to(node: Any) -> int | None:
    """The ``TensorProto`` element type a ``Cast`` node converts to; None for any other node."""
    if node.op_type != "Cast":
        return None
    return next((a.i for a in node.attribute if a.name == "to"), None)


__all__ = ["cast_to"]
