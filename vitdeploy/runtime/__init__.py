"""Stage 6: running deployed models, torch-free, in three wings and the processing they share.

    processing  images in, arrays out: reading images, the models' own pre/post-processing, input sets
    forms       load-time rewrites of a graph for ONNX Runtime's CPU provider (unfolded, fused kernel, MHA)
    backends    one runner per runtime behind one contract (``Runner``, ``RunnerOptions``), the runtime
                registry and the loader that opens any file vitdeploy writes
    apps        applications on those runners: SAM's, SAM 2's and SAM 3's predictors, automatic mask generator, batch
                predict, embeddings, overlays, dataset jobs, the server

Each wing imports only from the ones listed above it (``vitdeploy.LAYERS``). Nothing in this package
imports torch: applications run deployed models without PyTorch. The public names below load their
module on first use, so importing one wing does not import the others.
"""

from vitdeploy._lazy import lazy_attributes

_WHERE = {
    "OnnxRuntimeRunner": "backends.onnxruntime_runner",
    "OpenVinoRunner": "backends.openvino_runner",
    "TensorRTRunner": "backends.tensorrt_runner",
    "Runner": "backends.base",
    "RunnerOptions": "backends.base",
    "RUNTIMES": "backends.registry",
    "open_runner": "deploy.loader",
    "OpenOptions": "deploy.loader",
    "SamPredictor": "apps.sam.predictor",
    "SamAutomaticMaskGenerator": "apps.sam.mask_generator",
    "Sam2ImagePredictor": "apps.sam2.image_predictor",
    "Sam2VideoPredictor": "apps.sam2.video_predictor",
    "Sam3ImageModel": "apps.sam3.processor",
    "Sam3InteractivePredictor": "apps.sam3.interactive",
    "Sam3Processor": "apps.sam3.processor",
    "Sam3TrackerPredictor": "apps.sam3.tracker_predictor",
    "SamPreprocessor": "processing.preprocess",
    "preprocess_shape": "processing.preprocess",
    "read_image_rgb": "processing.images",
}
__getattr__ = lazy_attributes(__name__, _WHERE)
__all__ = sorted(_WHERE)
