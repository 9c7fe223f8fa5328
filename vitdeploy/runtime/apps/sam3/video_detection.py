"""What SAM 3's detector gives on video, from the image detector's file: the video model's scores.

``sam3.model_builder.build_sam3_video_model`` builds its detector (``Sam3ImageOnVideoMultiGPU``, a ``Sam3Image``)
from the same parts and the same ``DotProductScoring`` as the image model's (``_create_dot_product_scoring``'s
arguments, written out again in the builder), so the weights and the graph are the image detector's. What differs
is one argument: ``supervise_joint_box_scores=has_presence_token`` (True), with which ``_update_scores_and_boxes``
returns as ``pred_logits`` the joint score in logit form, ``inverse_sigmoid(sigmoid(logits) * sigmoid(presence))``
clamped to [-10, 10], where the image model returns the logits and presence apart (``Sam3Processor`` multiplies the
two probabilities). The video model then thresholds ``sigmoid(pred_logits)`` (``score_threshold_detection``) and
runs NMS on it. :func:`video_detection_logits` is that step in NumPy, on the image detector's two outputs.
(``use_instance_query``, which the video builder leaves at its default, is stored by ``Sam3Image`` and read nowhere.)
"""

from __future__ import annotations

import numpy as np

#: ``sam3.model.model_misc.inverse_sigmoid``'s default ``eps`` and ``_update_scores_and_boxes``' clamp.
INVERSE_SIGMOID_EPS = 1e-3
JOINT_LOGIT_CLAMP = 10.0


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-x.astype(np.float32)))).astype(np.float32)


def inverse_sigmoid(x: np.ndarray, eps: float = INVERSE_SIGMOID_EPS) -> np.ndarray:
    """``sam3.model.model_misc.inverse_sigmoid``: ``log(clamp(x, eps) / clamp(1 - x, eps))`` of ``x`` clamped to [0, 1]."""
    x = np.clip(x, 0.0, 1.0)
    return np.log(np.maximum(x, eps) / np.maximum(1.0 - x, eps)).astype(np.float32)


def video_detection_logits(pred_logits: np.ndarray, presence_logit: np.ndarray) -> np.ndarray:
    """The video detector's ``pred_logits`` (B, Q) from the image detector's ``pred_logits`` (B, Q) and
    ``presence_logit`` (B, 1): the joint score in logit form, clamped as the official clamps it."""
    joint = _sigmoid(pred_logits) * _sigmoid(presence_logit)
    return np.clip(inverse_sigmoid(joint), -JOINT_LOGIT_CLAMP, JOINT_LOGIT_CLAMP)


def video_detection_scores(pred_logits: np.ndarray, presence_logit: np.ndarray) -> np.ndarray:
    """What the video model thresholds and suppresses by: ``sigmoid`` of :func:`video_detection_logits`."""
    return _sigmoid(video_detection_logits(pred_logits, presence_logit))


__all__ = ["INVERSE_SIGMOID_EPS", "JOINT_LOGIT_CLAMP", "inverse_sigmoid", "video_detection_logits",
           "video_detection_scores"]
