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

from typing import Any

from vitdeploy.errors import InputError
from vitdeploy.runtime.apps.sam2.image_predictor import IMAGE_FEATURES, Sam2ImagePredictor
from vitdeploy.runtime.apps.sam3.files import check_same_model, check_sam3_part

#: The vision encoder's outputs a click reads (``vitdeploy.rewrites.sam3_vision.INTERACTIVE_OUTPUTS``): SAM 2's.
INTERACTIVE_FEATURES = IMAGE_FEATURES


def check_sam3_interactive_pair(vision: dict[str, Any], decoder: dict[str, Any]) -> None:
    """Raise InputError unless the files are SAM 3's vision encoder (with the click predictor's features) and
    interactive decoder of one model."""
    check_sam3_part(vision, "vision_encoder", order="vision encoder, interactive decoder")
    check_sam3_part(decoder, "interactive_decoder", order="vision encoder, interactive decoder")
    if not set(INTERACTIVE_FEATURES) <= set(vision.get("output_names") or ()):
        raise InputError("the vision encoder has no features for clicks (image_embed, high_res_feats_0/1): it was "
                         "exported without the interactive neck or by an older vitdeploy; export it again with "
                         "'vitdeploy export -r sam3'")
    check_same_model(vision, decoder, "interactive decoder", "both")


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
    check_pair = staticmethod(check_sam3_interactive_pair)


__all__ = ["Sam3InteractivePredictor", "check_sam3_interactive_pair"]
