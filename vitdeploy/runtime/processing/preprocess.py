"""SAM preprocessing in NumPy: resize the longest side, normalize, pad bottom/right to a square.

Numerically the official pipeline: ``ResizeLongestSide.apply_image`` (PIL bilinear resize through
torchvision's ``to_pil_image``/``resize``) followed by ``Sam.preprocess`` (normalize, then zero-pad).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vitdeploy.errors import InputError


def preprocess_shape(old_h: int, old_w: int, long_side: int) -> tuple[int, int]:
    """Output (h, w) for a longest side of ``long_side`` (``ResizeLongestSide.get_preprocess_shape``), each side at
    least 1 pixel: the official rounds a 1x100000 image's short side to 0 and fails; every other shape is its own."""
    scale = long_side * 1.0 / max(old_h, old_w)
    return max(1, int(old_h * scale + 0.5)), max(1, int(old_w * scale + 0.5))


@dataclass(frozen=True)
class SamPreprocessor:
    """Image -> normalized, padded (1, 3, S, S) float32 model input."""

    input_size: int
    pixel_mean: Sequence[float]
    pixel_std: Sequence[float]

    def resize(self, image: np.ndarray) -> np.ndarray:
        """HxWx3 uint8 -> resized hxwx3 uint8 with the longest side equal to ``input_size``."""
        from PIL import Image

        check_rgb_uint8(image)
        h, w = preprocess_shape(image.shape[0], image.shape[1], self.input_size)
        # torchvision's resize on a PIL image is PIL's bilinear resize with (w, h) order.
        return np.asarray(Image.fromarray(image).resize((w, h), Image.BILINEAR))

    def normalize_and_pad(self, resized: np.ndarray) -> np.ndarray:
        """hxwx3 uint8 -> (1, 3, S, S) float32: normalized, zero-padded bottom/right."""
        mean = np.asarray(self.pixel_mean, dtype=np.float32)
        std = np.asarray(self.pixel_std, dtype=np.float32)
        x = (resized.astype(np.float32) - mean) / std  # h, w, 3
        h, w = x.shape[:2]
        out = np.zeros((1, 3, self.input_size, self.input_size), dtype=np.float32)
        out[0, :, :h, :w] = x.transpose(2, 0, 1)
        return out

    def __call__(self, image: np.ndarray) -> np.ndarray:
        return self.normalize_and_pad(self.resize(image))


def resize_coords(coords: np.ndarray, original_size: tuple[int, int], input_size: int) -> np.ndarray:
    """(..., 2) pixel (x, y) in the original image -> the encoder's input frame (``apply_coords``)."""
    old_h, old_w = original_size
    new_h, new_w = preprocess_shape(old_h, old_w, input_size)
    out = np.array(coords, dtype=np.float64, copy=True)
    out[..., 0] = out[..., 0] * (new_w / old_w)
    out[..., 1] = out[..., 1] * (new_h / old_h)
    return out


def box_corners(box: np.ndarray, original_size: tuple[int, int], input_size: int) -> np.ndarray:
    """(4,) x0, y0, x1, y1 box -> (2, 2) corner points in the encoder's input frame (``apply_boxes``)."""
    return resize_coords(np.asarray(box, dtype=np.float64).reshape(2, 2), original_size, input_size)


class ResizeLongestSide:
    """``segment_anything.utils.transforms.ResizeLongestSide`` in NumPy: the same methods and numbers.

    ``apply_image`` resizes an HxWx3 uint8 image as the official one does (PIL bilinear);
    ``apply_coords``/``apply_boxes`` map pixel coordinates of the original image into the resized one
    (float64, as the official ``astype(float)``). The ``*_torch`` variants take and return torch
    tensors (float32) when given tensors, as the official ones do, and NumPy arrays otherwise, so the
    official example code runs with or without torch installed.
    """

    def __init__(self, target_length: int) -> None:
        self.target_length = int(target_length)

    @staticmethod
    def get_preprocess_shape(oldh: int, oldw: int, long_side_length: int) -> tuple[int, int]:
        return preprocess_shape(oldh, oldw, long_side_length)

    def apply_image(self, image: np.ndarray) -> np.ndarray:
        check_rgb_uint8(image)
        return SamPreprocessor(self.target_length, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)).resize(image)

    def apply_coords(self, coords: np.ndarray, original_size: tuple[int, ...]) -> np.ndarray:
        return resize_coords(coords, (int(original_size[0]), int(original_size[1])), self.target_length)

    def apply_boxes(self, boxes: np.ndarray, original_size: tuple[int, ...]) -> np.ndarray:
        boxes = np.asarray(boxes)
        return self.apply_coords(boxes.reshape(-1, 2, 2), original_size).reshape(-1, 4)

    def apply_coords_torch(self, coords: object, original_size: tuple[int, ...]) -> object:
        return like_tensor(coords, self.apply_coords(as_numpy(coords), original_size))

    def apply_boxes_torch(self, boxes: object, original_size: tuple[int, ...]) -> object:
        return like_tensor(boxes, self.apply_boxes(as_numpy(boxes), original_size))


def as_numpy(value: object) -> np.ndarray:
    """A NumPy copy of an array or a torch tensor (any device)."""
    if hasattr(value, "detach"):
        return value.detach().cpu().numpy()  # type: ignore[attr-defined]
    return np.asarray(value)


def like_tensor(template: object, array: np.ndarray) -> object:
    """``array`` as a float32 torch tensor on ``template``'s device when ``template`` is one, else as it is."""
    if hasattr(template, "detach"):
        import torch

        return torch.as_tensor(array, dtype=torch.float32, device=template.device)  # type: ignore[attr-defined]
    return array


def check_rgb_uint8(image: object) -> None:
    """Raise InputError unless ``image`` is an HxWx3 uint8 array."""
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        desc = f"{image.dtype} array of shape {image.shape}" if isinstance(image, np.ndarray) else type(image).__name__
        raise InputError(f"expected an HxWx3 uint8 RGB image, got a {desc}: convert it with np.asarray(img.convert('RGB'))")
    if image.shape[0] == 0 or image.shape[1] == 0:
        raise InputError(f"image has an empty side ({image.shape[0]}x{image.shape[1]})")


_PIL_FILTERS = {"bilinear": 2, "bicubic": 3, "nearest": 0, "lanczos": 1, "box": 4, "hamming": 5}


@dataclass(frozen=True)
class TimmPreprocessor:
    """timm's evaluation transform in NumPy: resize the shorter side, center crop, scale, normalize.

    Numerically ``timm.data.create_transform(**data_config)`` for ``crop_mode='center'``: torchvision's
    ``Resize(floor(size / crop_pct))`` on a PIL image (PIL resize with the configured filter, longer
    side ``int(short_new * long / short)``), ``CenterCrop(size)``, ``ToTensor`` and ``Normalize``.
    """

    data_config: dict

    @property
    def input_size(self) -> int:
        """The square side of the model input (after the crop)."""
        _, out_h, out_w = (int(v) for v in self.data_config["input_size"])
        if out_h != out_w:
            # timm switches to its ResizeKeepRatio transform for non-square sizes; not mirrored here.
            raise InputError(f"timm input size {out_h}x{out_w} is not square: this runtime mirrors timm's square eval transform only")
        return out_h

    def resize(self, image: np.ndarray) -> np.ndarray:
        """HxWx3 uint8 -> the center crop, SxSx3 uint8 (resize the shorter side to ``floor(S / crop_pct)``, crop)."""
        import math

        from PIL import Image

        check_rgb_uint8(image)
        cfg = self.data_config
        if cfg.get("crop_mode", "center") != "center":
            raise InputError(f"timm crop_mode '{cfg.get('crop_mode')}' is not supported by this runtime: use 'center'")
        out = self.input_size
        crop_pct = float(cfg.get("crop_pct") or 1.0)
        scale = math.floor(out / crop_pct)
        h, w = image.shape[:2]
        short, long = (h, w) if h <= w else (w, h)
        new_short, new_long = scale, int(scale * long / short)
        new_h, new_w = (new_short, new_long) if h <= w else (new_long, new_short)
        resample = _PIL_FILTERS.get(str(cfg.get("interpolation", "bicubic")), 3)
        resized = np.asarray(Image.fromarray(image).resize((new_w, new_h), resample))
        top = int(round((new_h - out) / 2.0))
        left = int(round((new_w - out) / 2.0))
        if top < 0 or left < 0:
            raise InputError(f"image {w}x{h} resized to {new_w}x{new_h} is smaller than the crop {out}x{out}")
        return resized[top:top + out, left:left + out]

    def normalize_and_pad(self, crop: np.ndarray) -> np.ndarray:
        """SxSx3 uint8 crop -> (1, 3, S, S) float32: scaled to [0, 1] and normalized (a crop needs no padding)."""
        cfg = self.data_config
        mean = np.asarray(cfg.get("mean", (0.485, 0.456, 0.406)), dtype=np.float32)
        std = np.asarray(cfg.get("std", (0.229, 0.224, 0.225)), dtype=np.float32)
        x = crop.astype(np.float32) / 255.0
        return ((x - mean) / std).transpose(2, 0, 1)[None].astype(np.float32)

    def __call__(self, image: np.ndarray) -> np.ndarray:
        """HxWx3 uint8 -> (1, 3, S, S) float32."""
        return self.normalize_and_pad(self.resize(image))
