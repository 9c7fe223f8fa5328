"""vitdeploy: export Vision Transformers to ONNX / TensorRT with measured parity and latency.

Pipeline stages, each importable without the later ones:
models -> rewrites -> onnx_export -> precision -> engine -> runtime -> validation -> cli
"""

__version__ = "0.1.0"
