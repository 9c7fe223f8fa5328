"""SAM 3's detector scores in NumPy, on the image detector file's ``pred_logits`` and ``presence_logit``: the image
model's (``Sam3Processor``) and the video model's.

``sam3.model_builder.build_sam3_video_model`` builds its detector (``Sam3ImageOnVideoMultiGPU``, a ``Sam3Image``)
from the same parts and the same ``DotProductScoring`` as the image model's (``_create_dot_product_scoring``'s
arguments, written out again in the builder), so the weights and the graph are the image detector's. What differs
is one argument: ``supervise_joint_box_scores=has_presence_token`` (True), with which ``_update_scores_and_boxes``
returns as ``pred_logits`` the joint score in logit form, ``inverse_sigmoid(sigmoid(logits) * sigmoid(presence))``
clamped to [-10, 10], where the image model returns the logits and presence apart (``Sam3Processor`` multiplies the
two probabilities: :func:`instance_scores`). The video model then thresholds ``sigmoid(pred_logits)``
(``score_threshold_detection``) and runs NMS on it: :func:`video_detection_logits`, :func:`video_detection_scores`.
(``use_instance_query``, which the video builder leaves at its default, is stored by ``Sam3Image`` and read nowhere.)
"""

from __future__ import annotations

import numpy as np

#: ``sam3.model.model_misc.inverse_sigmoid``'s default ``eps`` and ``_update_scores_and_boxes``' clamp.
INVERSE_SIGMOID_EPS = 1e-3
JOINT_LOGIT_CLAMP = 10.0


def sigmoid(x: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-x))`` in float32, on a copy."""
    return sigmoid_in_place(np.array(x, np.float32))


def sigmoid_in_place(x: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-x))`` in float32, written over ``x`` (a float32 array): the masks of every kept instance at
    the image's size are the largest arrays of a prompt (1.7 GB for 200 at 1800x1200), so no temporary copies."""
    np.negative(x, out=x)
    with np.errstate(over="ignore"):  # exp(-x) overflows to inf for x < -88: the probability is then 0, as torch's
        np.exp(x, out=x)
    x += np.float32(1.0)
    return np.reciprocal(x, out=x)


def instance_scores(pred_logits: np.ndarray, presence_logit: np.ndarray) -> np.ndarray:
    """The image model's score of each query, ``sigmoid(pred_logits) * sigmoid(presence_logit)`` (``Sam3Processor``)."""
    return sigmoid(pred_logits) * sigmoid(presence_logit)


def inverse_sigmoid(x: np.ndarray, eps: float = INVERSE_SIGMOID_EPS) -> np.ndarray:
    """``sam3.model.model_misc.inverse_sigmoid``: ``log(clamp(x, eps) / clamp(1 - x, eps))`` of ``x`` clamped to
    [0, 1]."""
    x = np.clip(x, 0.0, 1.0)
    return np.log(np.maximum(x, eps) / np.maximum(1.0 - x, eps)).astype(np.float32)


def video_detection_logits(pred_logits: np.ndarray, presence_logit: np.ndarray) -> np.ndarray:
    """The video detector's ``pred_logits`` (B, Q) from the image detector's ``pred_logits`` (B, Q) and
    ``presence_logit`` (B, 1): the joint score in logit form, clamped as the official clamps it."""
    return np.clip(inverse_sigmoid(instance_scores(pred_logits, presence_logit)), -JOINT_LOGIT_CLAMP, JOINT_LOGIT_CLAMP)


def video_detection_scores(pred_logits: np.ndarray, presence_logit: np.ndarray) -> np.ndarray:
    """What the video model thresholds and suppresses by: ``sigmoid`` of :func:`video_detection_logits`."""
    return sigmoid(video_detection_logits(pred_logits, presence_logit))


__all__ = ["INVERSE_SIGMOID_EPS", "JOINT_LOGIT_CLAMP", "instance_scores", "inverse_sigmoid", "sigmoid",
           "sigmoid_in_place", "video_detection_logits", "video_detection_scores"]
