"""Stage 3: trace export-friendly modules to ONNX, check the graph, stamp metadata, write atomically.

The names below load on first use: ``vitdeploy.onnx_export.hygiene`` (graph checks, needed by the
precision passes and the runtime side) must not pull in torch through the exporter.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {"ExportResult": "exporter", "export_onnx": "exporter", "HygieneReport": "hygiene",
          "check_graph_hygiene": "hygiene"}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"vitdeploy.onnx_export.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'vitdeploy.onnx_export' has no attribute '{name}'")


__all__ = ["ExportResult", "HygieneReport", "check_graph_hygiene", "export_onnx"]
