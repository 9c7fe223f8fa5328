"""Stage 3: trace export-friendly modules to ONNX, check the graph, stamp metadata, write atomically."""

from vitdeploy.onnx_export.exporter import ExportResult, export_onnx
from vitdeploy.onnx_export.hygiene import HygieneReport, check_graph_hygiene

__all__ = ["ExportResult", "HygieneReport", "check_graph_hygiene", "export_onnx"]
