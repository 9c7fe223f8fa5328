"""vitdeploy: export Vision Transformers to ONNX / TensorRT with measured parity and latency.

The package in layers, ground first. A module imports only from layers below its own (the data
flows from a recipe up to an artifact; nothing below knows what uses it); ``tests/test_architecture.py``
reads every import, lazy ones included, and holds the code to this list. A name is a module or package
directly under ``vitdeploy``, or a wing of one (``runtime.backends``): a module belongs to the longest name
that contains it.
"""

__version__ = "0.1.0"

#: Layers, ground first; names are modules or packages directly under ``vitdeploy``.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("runtime_facts",),  # the data file the Python package and the C++ library both read
    ("errors", "_lazy", "echo", "onnx_graph", "relpos_layout", "cpu_features", "tested_versions"),  # shared facts; talking to people
    ("precisions", "parity", "targets", "fileio", "optional_packages", "cuda", "sizes"),  # precisions, their parity
    # budgets and export targets as types; files, optional packages, the CUDA runtime, input-size checks
    ("metadata",),  # what every artifact carries, and the one reader of it
    ("models",),  # the official eager models, built from recipes and checkpoints
    ("rewrites",),  # their export-friendly forms: same weights, same numbers
    ("onnx_export",),  # rewritten module -> checked ONNX graph
    ("engine",),  # ONNX -> TensorRT engine + sidecar
    ("runtime.processing", "runtime.forms"),  # images and pre/post-processing; load-time CPU graph forms (torch-free)
    ("families",),  # which model is which: every per-model fact, and the one place that dispatches on the family
    ("runtime.backends",),  # one runner per runtime behind one contract, the runtime registry
    ("runtime.deploy",),  # how each file runs here: the deployment, auto (profile, probe, rows), the loader, the plan
    ("runtime.apps", "runtime"),  # applications on the runners (SAM predictor, mask generator, predict); the public names
    ("validation",),  # parity and latency against the eager official model
    ("precision", "benchmark", "artifact_info", "doctor"),  # FP16/INT8 passes; timing; inspect; doctor
    ("pipeline", "cpu_optimize", "tune"),  # one call per artifact-building verb; tune writes the deployment profile
    ("cli",),  # parsing and printing only
    ("__main__",),
)
