"""vitdeploy: export Vision Transformers to ONNX / TensorRT with measured parity and latency.

The package in layers, ground first. A module imports only from layers below its own (the data
flows from a recipe up to an artifact; nothing below knows what uses it); ``tests/test_architecture.py``
reads every import, lazy ones included, and holds the code to this list.
"""

__version__ = "0.1.0"

#: Layers, ground first; names are modules or packages directly under ``vitdeploy``.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "_lazy", "metadata", "onnx_graph", "relpos_layout", "cpu_features", "tested_versions"),  # shared facts
    ("fileio", "optional_packages", "cuda", "sizes"),  # files, optional packages, the CUDA runtime, input-size checks
    ("models",),  # the official eager models, built from recipes and checkpoints
    ("rewrites",),  # their export-friendly forms: same weights, same numbers
    ("onnx_export",),  # rewritten module -> checked ONNX graph
    ("engine",),  # ONNX -> TensorRT engine + sidecar
    ("runtime",),  # runners, pre/post-processing, input sets (torch-free)
    ("families",),  # which model is which: the one place that dispatches on the model family
    ("validation",),  # parity and latency against the eager official model
    ("precision", "benchmark", "artifact_info", "doctor"),  # FP16/INT8 passes; timing; inspect; doctor
    ("pipeline", "cpu_optimize"),  # one call per artifact-building verb
    ("cli",),  # parsing and printing only
    ("__main__",),
)
