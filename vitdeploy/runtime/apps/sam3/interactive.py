"""SAM 3's clicks and boxes on exported files, torch-free: ``SAM3InteractiveImagePredictor``'s calls and
``Sam3Image.predict_inst``'s.

Two official ways in, both answered with the official meanings and NumPy returns (masks (C, H, W), scores (C,),
low-resolution logits (C, 4h, 4w) clamped to +-32):

- The SAM 2-style predictor (``sam3.model.sam1_task_predictor.SAM3InteractiveImagePredictor``):
  ``Sam3InteractivePredictor("sam3.onnx", "sam3_interactive.onnx")`` with ``set_image``, ``set_image_batch``,
  ``predict`` (points, labels, box, mask_input, multimask_output, return_logits, normalize_coords),
  ``predict_batch``, ``get_image_embedding``, ``reset_predictor``; the image is prepared as that predictor prepares
  it (``SAM2Transforms``: float resize with antialiasing, mean and std 0.5).
- The image model's (the official example ``sam3_for_sam1_task_example``): ``state = processor.set_image(image)``
  then ``model.predict_inst(state, point_coords=..., point_labels=..., multimask_output=True)`` and
  ``predict_inst_batch`` on :class:`~vitdeploy.runtime.apps.sam3.processor.Sam3ImageModel` opened with
  ``interactive="sam3_interactive.onnx"``; the image is prepared as ``Sam3Processor`` prepares it.

Both run the vision encoder once per image (its ``image_embed`` and ``high_res_feats_*`` carry ``conv_s0``/
``conv_s1`` and ``no_mem_embed``) and the interactive decoder once per prompt set: SAM 2's decoder graph contract,
so the prompt handling is :class:`~vitdeploy.runtime.apps.sam2.image_predictor.Sam2ImagePredictor`'s. As the
official, the low-resolution masks are cleaned before upsampling (``max_hole_area=256``: background regions of at
most 256 pixels become foreground; SciPy does the connected components where the official uses its CUDA kernel or
scikit-image, and skips the step with a warning without them).
"""

from __future__ import annotations

from vitdeploy.runtime.apps.common.files import FileSet
from vitdeploy.runtime.apps.sam2.image_predictor import Sam2ImagePredictor
from vitdeploy.runtime.apps.sam3.files import CLICKS, INTERACTIVE_FEATURES, check_sam3_interactive_pair


class Sam3InteractivePredictor(Sam2ImagePredictor):
    """``SAM3InteractiveImagePredictor`` on exported files (see the module docstring).

    Args:
        vision, decoder: the vision encoder's and the interactive decoder's files (``.onnx``) or Runners.
        options, device, threads, runtime, inference_precision: how to open them, as for every predictor.
        mask_threshold, max_hole_area, max_sprinkle_area: the official predictor's (defaults 0.0, 256.0, 0.0).
    """

    MAX_HOLE_AREA = 256.0
    RECORDABLE = ("interactive_decoder",)
    RUNS = "SAM 3's interactive predictor"
    FILES: FileSet = CLICKS


__all__ = ["INTERACTIVE_FEATURES", "Sam3InteractivePredictor", "check_sam3_interactive_pair"]
