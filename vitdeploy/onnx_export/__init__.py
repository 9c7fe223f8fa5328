"""Stage 3: trace export-friendly modules to ONNX, check the graph, stamp metadata, write atomically.

The names below load on first use: ``vitdeploy.onnx_export.hygiene`` (graph checks, needed by the
precision passes and the runtime side) must not pull in torch through the exporter.
"""

from __future__ import annotations

from vitdeploy._lazy import lazy_attributes

__getattr__ = lazy_attributes(__name__, {"ExportResult": "exporter", "export_onnx": "exporter",
                                         "HygieneReport": "hygiene", "check_graph_hygiene": "hygiene"})

__all__ = ["ExportResult", "HygieneReport", "check_graph_hygiene", "export_onnx"]
