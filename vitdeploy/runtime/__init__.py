"""Stage 6: runners with one interface (ONNX Runtime, TensorRT) and NumPy pre/post-processing.

Nothing in this package imports torch: applications can run deployed models without PyTorch.
"""

from vitdeploy.runtime.images import read_image_rgb
from vitdeploy.runtime.preprocess import SamPreprocessor, preprocess_shape
from vitdeploy.runtime.runners import OnnxRuntimeRunner, Runner
from vitdeploy.runtime.sam_predictor import SamPredictor

__all__ = ["OnnxRuntimeRunner", "Runner", "SamPredictor", "SamPreprocessor", "preprocess_shape", "read_image_rgb"]
