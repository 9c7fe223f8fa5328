"""``SamPredictor`` on exported artifacts: the official predictor's interface, NumPy only, any Runner.

Differences from ``segment_anything.SamPredictor`` and why:

* It runs an exported encoder and decoder through any :class:`~vitdeploy.runtime.backends.base.Runner`
  (ONNX Runtime on CPU/CUDA/TensorRT providers, a TensorRT engine runner) and needs neither torch nor
  torchvision. Everything it needs (input size, pixel mean/std, variant, embedding size) is read
  from the artifacts' metadata, and an encoder and decoder that were not made for each other are
  refused when the predictor is built, not with garbage masks later.
* Bad input raises :class:`~vitdeploy.errors.InputError` with a message naming the fix (the official
  code asserts, or raises ``RuntimeError`` for ``predict`` before ``set_image``): an image that is
  not HxWx3 uint8, points or boxes outside the image, labels other than 0/1, a mask prompt of the
  wrong size, a prompt with neither points nor a box (the exported graph needs at least one point).
* The official attributes keep their meanings: ``input_size`` is the resized image's (h, w) (the
  encoder's square side is ``encoder_size``), ``original_size`` the image's (H, W), ``transform`` a
  ``ResizeLongestSide`` with the official methods, ``model`` a facade with what official code reads
  off a ``Sam`` (``image_format``, ``mask_threshold``, ``image_encoder.img_size``, ``device``).
* ``predict`` returns NumPy arrays (the official one does too); ``get_image_embedding`` returns a
  NumPy array instead of a torch tensor. ``predict_torch`` takes and returns torch tensors when given
  tensors (NumPy arrays otherwise), and runs the decoder once per prompt set of the batch: the exported
  decoder has a batch of one. ``device`` is ``"cpu"``: outputs live in host memory whatever runtime
  computed them, so tensors made on ``predictor.device`` go straight in.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from vitdeploy.errors import InputError
from vitdeploy.runtime.apps.common.files import FileSet, OpenModel
from vitdeploy.runtime.apps.common.prompts import as_float_array, check_box_order, check_inside
from vitdeploy.runtime.apps.sam.files import PAIR, PAIR_ANY_WEIGHTS
from vitdeploy.runtime.backends.base import Runner
from vitdeploy.runtime.deploy.loader import OpenOptions
from vitdeploy.runtime.deploy.plan import ModelPlan
from vitdeploy.runtime.processing.postprocess import MaskUpscaler
from vitdeploy.runtime.processing.recorded_inputs import RecordsInputs
from vitdeploy.runtime.processing.preprocess import (ResizeLongestSide, SamPreprocessor, as_numpy, box_corners, check_rgb_uint8,
                                                     preprocess_shape, resize_coords)

#: Decoder graph inputs/outputs (see vitdeploy.rewrites.sam_decoder).
DECODER_INPUTS = ("image_embeddings", "point_coords", "point_labels", "mask_input", "has_mask_input")
DECODER_OUTPUTS = ("low_res_masks", "iou_predictions")
#: One image's features by name (``set_image_features``, a server's cache): the encoder's embedding.
IMAGE_FEATURES = ("image_embeddings",)
MASK_THRESHOLD = 0.0  # Sam.mask_threshold


class ImageEncoderInfo:
    """What official code reads off ``Sam.image_encoder``: the square side it takes, under the official name."""

    def __init__(self, encoder_size: int) -> None:
        self.img_size = int(encoder_size)


class SamModelInfo:
    """What official code reads off ``SamPredictor.model`` (a ``segment_anything.Sam``), for exported files."""

    image_format = "RGB"
    mask_threshold = MASK_THRESHOLD

    def __init__(self, encoder_size: int, pixel_mean: Any, pixel_std: Any) -> None:
        self.image_encoder = ImageEncoderInfo(encoder_size)
        self.pixel_mean = tuple(float(v) for v in pixel_mean)
        self.pixel_std = tuple(float(v) for v in pixel_std)

    @property
    def device(self) -> str:
        return "cpu"


def decoder_max_points(decoder_metadata: dict[str, Any]) -> int | None:
    """``point_coords``'s largest point count in a decoder's recorded shape profile (None where there is none)."""
    profile = decoder_metadata.get("shape_profile")
    coords = profile.get("point_coords") if isinstance(profile, dict) else None
    top = coords.get("max") if isinstance(coords, dict) else None
    if isinstance(top, list) and len(top) == 3 and isinstance(top[1], int) and not isinstance(top[1], bool) and top[1] > 0:
        return int(top[1])
    return None


class SamPredictor(RecordsInputs):
    """Masks from an image and prompts, with ``segment_anything.SamPredictor``'s interface.

    Args:
        encoder: the exported image encoder (``.onnx`` path, engine path, or a Runner).
        decoder: the exported prompt encoder + mask decoder (same forms).
        device: ONNX Runtime device for paths: ``cpu``, ``cuda`` or ``tensorrt`` (GPU providers only where the
            files were verified, see :mod:`vitdeploy.runtime.backends.providers`; ``allow_unverified`` overrides).
        threads: intra-op threads for paths (default: the deployment profile's, else every core this process may use).
        runtime: ``auto`` (default: the deployment profile ``vitdeploy tune`` wrote beside each file, else this CPU's
            measured default, see :mod:`vitdeploy.runtime.deploy.auto`; on a CPU with AMX and OpenVINO
            installed the encoder runs in BF16), ``onnxruntime`` (each file as written: exact FP32 for FP32 files) or
            ``openvino`` (CPU, the optional ``openvino`` extra) for ``.onnx`` paths.
        tf32: on CUDA, let FP32 GEMMs use TF32 (default: exact FP32; masks then match the CPU's).
        inference_precision: the encoder's precision policy for paths (``file``, or ``bf16`` on a runtime that runs it:
            OpenVINO on CPUs with AMX or AVX512-BF16; None: ``file``, or ``auto``'s choice). The decoder runs its file's
            precision: in BF16 its mask logits miss the ``bf16`` budget (cosine 0.99955 measured), and it is a small
            part of the time.
        check_weights: refuse an encoder and decoder whose weights come from different checkpoints or
            seeds (turn off for a decoder fine-tuned apart from its encoder).
        options: every opening option in one :class:`~vitdeploy.runtime.deploy.loader.OpenOptions` (its ``policy``
            is ``inference_precision``), instead of the keywords above.

    ``record_inputs("mask_decoder")`` keeps the decoder's real inputs (to calibrate it: ``vitdeploy calibrate --feeds``).
    """

    RECORDABLE = ("mask_decoder",)
    RUNS = "SAM's predictor"
    #: The image's features by name, as the encoder gives them and the decoder takes them.
    FEATURES = IMAGE_FEATURES

    def __init__(self, encoder: Runner | str | os.PathLike, decoder: Runner | str | os.PathLike, *,
                 options: OpenOptions | None = None, check_weights: bool = True, device: str = "cpu",
                 threads: int | None = None, tf32: bool = False, allow_unverified: bool = False, runtime: str = "auto",
                 inference_precision: str | None = None):
        o = OpenOptions.of(options, device=device, threads=threads, tf32=tf32, allow_unverified=allow_unverified,
                           runtime=runtime, inference_precision=inference_precision)
        self._open(_files(check_weights).open({"encoder": encoder, "decoder": decoder}, o))

    @classmethod
    def from_plan(cls, plan: ModelPlan) -> SamPredictor:
        """The predictor of a plan made from checked files (a dataset worker's, a replica's): each file opened as
        planned, nothing checked or decided again."""
        return cls.of_open(PAIR.open(plan=plan))

    @classmethod
    def of_open(cls, model: OpenModel) -> SamPredictor:
        """The predictor on runners already opened from checked files (a server's: its encoder side shares the
        encoder's runner)."""
        predictor = cls.__new__(cls)
        predictor._open(model)
        return predictor

    def _open(self, model: OpenModel) -> None:
        #: How each file runs (what a route passes on: a worker, a replica).
        self.plan = model.plan
        self.encoder, self.decoder = model["encoder"], model["decoder"]
        self._setup(self.encoder.metadata)

    @classmethod
    def decoder_only(cls, decoder: Runner | str | os.PathLike | None, encoder_metadata: dict[str, Any], *,
                     options: OpenOptions | None = None, device: str = "cpu", threads: int | None = None,
                     check_weights: bool = True, runtime: str = "auto", plan: ModelPlan | None = None) -> SamPredictor:
        """A predictor without an encoder: it answers prompts on embeddings given to :meth:`set_image_embedding`
        (a server's decoder replicas, which never encode). ``encoder_metadata``: the encoder file's metadata
        (:func:`vitdeploy.metadata.read_onnx_metadata`), checked against the decoder's as the constructor checks the
        files; ``plan``: the decoder opened as a plan made from checked files says (nothing checked again)."""
        predictor = cls.__new__(cls)
        predictor.encoder = None
        o = OpenOptions.of(options, device=device, threads=threads, runtime=runtime)
        model = _files(check_weights).open_beside("decoder", decoder, {"encoder": encoder_metadata}, o, plan)
        predictor.plan, predictor.decoder = model.plan, model["decoder"]
        predictor._setup(encoder_metadata)
        return predictor

    def encoder_array(self, image: np.ndarray) -> np.ndarray:
        """The (1, 3, S, S) float32 array the encoder runs on for an HxWx3 uint8 RGB ``image`` (``set_image``'s)."""
        return self.preprocessor(image)

    def page_facts(self) -> dict[str, Any]:
        """What a page needs to compute this predictor's answers itself (``browser_encoder.js`` and
        ``browser_decoder.js``, the static site of :mod:`vitdeploy.runtime.apps.serving.site`)."""
        return {"encoder": {"input_size": self.encoder_size, "input_name": self.encoder_input,
                            "output_name": self.encoder_output, "pixel_mean": list(self.preprocessor.pixel_mean),
                            "pixel_std": list(self.preprocessor.pixel_std)},
                "decoder": {"input_size": self.encoder_size, "mask_input_size": list(self.mask_input_size),
                            "mask_output_indices": list(self.mask_output_indices), "max_points": self.max_prompt_points}}

    def _setup(self, enc: dict[str, Any]) -> None:
        """The predictor's facts from the checked files' metadata."""
        dec = self.decoder.metadata
        #: The encoder file's metadata (a decoder-only predictor has no encoder, but its facts).
        self.encoder_metadata = enc
        missing = [n for n in DECODER_INPUTS if n not in self.decoder.input_names]
        if missing:
            raise InputError(f"the decoder artifact lacks inputs {missing}: re-export it with 'vitdeploy export'")
        self.encoder_size = int(enc["input_size"][0])
        self.preprocessor = SamPreprocessor(self.encoder_size, enc["pixel_mean"], enc["pixel_std"])
        self.transform = ResizeLongestSide(self.encoder_size)
        self.model = SamModelInfo(self.encoder_size, enc["pixel_mean"], enc["pixel_std"])
        self.encoder_input = enc.get("input_name") or (self.encoder.input_names[0] if self.encoder else None)
        self.encoder_output = enc.get("output_name") or (self.encoder.output_names[0] if self.encoder else None)
        self.mask_input_size = tuple(int(d) for d in dec["mask_input_size"])
        #: The most points one decoder call takes (the decoder file's shape profile; None where it records none).
        self.max_prompt_points = decoder_max_points(dec)
        self.mask_output_indices = [int(i) for i in dec.get("mask_output_indices", [0, 1, 2, 3])]
        self.variant = str(enc.get("variant"))
        self._embedding_channels = int(dec["embed_dim"])
        self.embedding_size = (self.mask_input_size[0] // 4, self.mask_input_size[1] // 4)
        self.reset_image()

    @property
    def device(self) -> str:
        """Where the outputs live: host memory (``"cpu"``), as the official ``predictor.device`` is used for."""
        return self.model.device

    @property
    def resized_size(self) -> tuple[int, int] | None:
        """The resized image's (h, w): the official ``input_size`` (kept under this name too)."""
        return self.input_size

    # --- image -------------------------------------------------------------------------------------

    def set_image(self, image: np.ndarray, image_format: str = "RGB") -> None:
        """Compute the embedding of an HxWx3 uint8 image (``RGB`` or ``BGR``) for later ``predict`` calls."""
        if image_format not in ("RGB", "BGR"):
            raise InputError(f"image_format must be 'RGB' or 'BGR', got {image_format!r}")
        check_rgb_uint8(image)
        if image_format != self.model.image_format:
            image = np.ascontiguousarray(image[..., ::-1])
        resized = self.preprocessor.resize(image)
        self._encode(resized, (int(image.shape[0]), int(image.shape[1])))

    def set_torch_image(self, transformed_image: Any, original_image_size: tuple[int, ...]) -> None:
        """``set_image`` for an image already resized by ``transform.apply_image``: (1, 3, h, w), 0..255.

        Takes a torch tensor (as the official one) or a NumPy array.
        """
        x = as_numpy(transformed_image)
        if x.ndim != 4 or x.shape[:2] != (1, 3) or max(x.shape[2:]) != self.encoder_size:
            raise InputError(f"set_torch_image takes a (1, 3, h, w) image whose longest side is {self.encoder_size} "
                             f"(transform.apply_image), got shape {tuple(x.shape)}")
        height, width = (int(v) for v in original_image_size[:2])
        if (x.shape[2], x.shape[3]) != preprocess_shape(height, width, self.encoder_size):
            raise InputError(f"the transformed image is {x.shape[2]}x{x.shape[3]}, but an original of {height}x{width} "
                             f"resizes to {preprocess_shape(height, width, self.encoder_size)}: pass the original size")
        self._encode(x[0].transpose(1, 2, 0), (height, width))

    def _encode(self, resized: np.ndarray, original_size: tuple[int, int]) -> None:
        self.reset_image()
        x = self.preprocessor.normalize_and_pad(resized)
        if self.encoder is None:
            raise InputError("this predictor was made with decoder_only: give embeddings with set_image_embedding")
        features = self.encoder.run({self.encoder_input: x})[self.encoder_output]
        self.features = np.asarray(features, dtype=np.float32)
        self.original_size = original_size
        self.input_size = (int(resized.shape[0]), int(resized.shape[1]))
        self._upscaler = MaskUpscaler.for_image(self.mask_input_size, self.encoder_size, self.original_size)
        self.is_image_set = True

    def set_image_embedding(self, embedding: np.ndarray, original_size: tuple[int, int]) -> None:
        """Use an embedding computed elsewhere (e.g. cached, or by a server) for an image of ``original_size`` (H, W).

        Not in the official predictor (its ``set_torch_image`` takes a transformed image instead).
        """
        expected = (1, self._embedding_channels, *self.embedding_size)
        emb = np.asarray(embedding, dtype=np.float32)
        if emb.shape != expected:
            raise InputError(f"embedding has shape {emb.shape}, this encoder/decoder pair uses {expected}")
        height, width = (int(v) for v in original_size)
        if height <= 0 or width <= 0:
            raise InputError(f"original_size must be a positive (H, W), got {original_size}")
        self.reset_image()
        self.features = emb
        self.original_size = (height, width)
        self.input_size = preprocess_shape(height, width, self.encoder_size)
        self._upscaler = MaskUpscaler.for_image(self.mask_input_size, self.encoder_size, self.original_size)
        self.is_image_set = True

    def get_image_embedding(self) -> np.ndarray:
        """The (1, C, h, w) embedding of the current image."""
        self._require_image("get an image embedding")
        return self.features

    def set_image_features(self, features: dict[str, np.ndarray], original_size: tuple[int, int]) -> None:
        """:meth:`set_image_embedding` with the features by name (:data:`IMAGE_FEATURES`): the one call every model's
        predictor takes for features computed elsewhere (SAM 2's are three arrays)."""
        if IMAGE_FEATURES[0] not in features:
            raise InputError(f"the image features lack {IMAGE_FEATURES[0]}: give the encoder's embedding")
        self.set_image_embedding(features[IMAGE_FEATURES[0]], original_size)

    def max_clicks(self, box: bool = False) -> int | None:
        """The most clicks one prompt may have (with a ``box`` or not), as this decoder's shape profile allows: a box
        takes 2 of its points, a prompt without one a padding point (the official ``SamPredictor``'s); None: no limit
        recorded."""
        return None if self.max_prompt_points is None else max(0, self.max_prompt_points - (2 if box else 1))

    def reset_image(self) -> None:
        """Forget the current image."""
        self.is_image_set = False
        self.features: np.ndarray | None = None
        self.original_size: tuple[int, int] | None = None
        self.input_size: tuple[int, int] | None = None
        self._upscaler: MaskUpscaler | None = None

    # --- prompts -> masks --------------------------------------------------------------------------

    def predict(
        self,
        point_coords: np.ndarray | None = None,
        point_labels: np.ndarray | None = None,
        box: np.ndarray | None = None,
        mask_input: np.ndarray | None = None,
        multimask_output: bool = True,
        return_logits: bool = False,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Masks for the current image, as ``segment_anything.SamPredictor.predict``.

        Args:
            point_coords: (N, 2) pixel (x, y) in the original image.
            point_labels: (N,) 1 foreground, 0 background.
            box: (4,) x0, y0, x1, y1 in pixels.
            mask_input: (1, 4h, 4w) low-resolution logits, e.g. from a previous call.
            multimask_output: three masks (best for a single ambiguous click) or one.
            return_logits: logits instead of boolean masks.

        Returns:
            masks (C, H, W) in the original size (bool, or float32 logits), scores (C,), low-res logits (C, 4h, 4w).
        """
        self._require_image("predict masks")
        coords, labels = self._prompt_points(point_coords, point_labels, box)
        mask, has_mask = self._mask_prompt(mask_input)
        return self._decode(coords, labels, mask, has_mask, multimask_output, return_logits)

    def predict_torch(
        self,
        point_coords: Any,
        point_labels: Any,
        boxes: Any = None,
        mask_input: Any = None,
        multimask_output: bool = True,
        return_logits: bool = False,
    ) -> tuple[Any, Any, Any]:
        """A batch of prompt sets, already in the resized frame (``transform.apply_coords_torch``/``apply_boxes_torch``).

        Args:
            point_coords: (B, N, 2) or None; point_labels: (B, N) or None.
            boxes: (B, 4) or None; mask_input: (B, 1, 4h, 4w) or None.

        Returns:
            masks (B, C, H, W), scores (B, C), low-res logits (B, C, 4h, 4w): torch tensors when a prompt was
            given as one, NumPy arrays otherwise.
        """
        self._require_image("predict masks")
        template = next((v for v in (point_coords, boxes, mask_input) if v is not None and hasattr(v, "detach")), None)
        if (point_coords is None) != (point_labels is None):
            raise InputError("point_coords and point_labels go together: pass both or neither")
        pts = None if point_coords is None else as_float_array(as_numpy(point_coords), "point_coords")
        lab = None if point_labels is None else as_float_array(as_numpy(point_labels), "point_labels")
        bxs = None if boxes is None else as_float_array(as_numpy(boxes), "boxes")
        msk = None if mask_input is None else as_float_array(as_numpy(mask_input), "mask_input")
        if pts is not None and (pts.ndim != 3 or pts.shape[2] != 2 or lab is None or lab.shape != pts.shape[:2]):
            raise InputError(f"point_coords must be (B, N, 2) with point_labels (B, N), got {pts.shape} and "
                             f"{None if lab is None else lab.shape}")
        if bxs is not None and (bxs.ndim != 2 or bxs.shape[1] != 4):
            raise InputError(f"boxes must be (B, 4), got shape {bxs.shape}")
        h, w = self.mask_input_size
        if msk is not None and (msk.ndim != 4 or msk.shape[1:] != (1, h, w)):
            raise InputError(f"mask_input must be (B, 1, {h}, {w}), got shape {msk.shape}")
        sizes = {name: a.shape[0] for name, a in (("point_coords", pts), ("boxes", bxs), ("mask_input", msk)) if a is not None}
        if not {k: v for k, v in sizes.items() if k != "mask_input"}:
            raise InputError("no prompt: give point_coords/point_labels, boxes, or both")
        if len(set(sizes.values())) != 1:
            raise InputError(f"the prompts disagree on the batch size: {sizes}")
        outputs = []
        for b in range(next(iter(sizes.values()))):
            corners = None
            if bxs is not None:
                check_box_order(bxs[b])
                corners = bxs[b].reshape(2, 2)
            coords, labels = _prompt_layout(pts[b] if pts is not None else np.zeros((0, 2)),
                                            lab[b] if lab is not None else np.zeros((0,)), corners)
            mask, has_mask = self._mask_prompt(msk[b] if msk is not None else None)
            outputs.append(self._decode(coords, labels, mask, has_mask, multimask_output, return_logits))
        stacked = tuple(np.stack([o[k] for o in outputs]) for k in range(3))
        if template is None:
            return stacked
        import torch

        return tuple(torch.from_numpy(np.ascontiguousarray(a)).to(template.device) for a in stacked)  # type: ignore[return-value]

    def _decode(self, coords: np.ndarray, labels: np.ndarray, mask: np.ndarray, has_mask: np.ndarray,
                multimask_output: bool, return_logits: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One decoder call for one prompt set in the encoder frame -> (masks, scores, low-res logits)."""
        wanted = list(range(1, 4)) if multimask_output else [0]
        if not set(wanted) <= set(self.mask_output_indices):
            kind = "multimask" if multimask_output else "single-mask"
            raise InputError(f"the decoder was exported without the {kind} outputs (it holds mask tokens "
                             f"{self.mask_output_indices}): pass multimask_output={not multimask_output} or re-export it")
        if self.max_prompt_points is not None and coords.shape[1] > self.max_prompt_points:
            # the decoder's token attention grows with the square of the points: 12,000 clicks took a server to 2 GB
            raise InputError(f"the prompt makes {coords.shape[1]} decoder points (clicks, plus a box's 2 corners or 1 "
                             f"padding point) and this decoder takes at most {self.max_prompt_points} (its shape "
                             "profile): give fewer clicks")
        feeds = {"image_embeddings": self.features, "point_coords": coords, "point_labels": labels,
                 "mask_input": mask, "has_mask_input": has_mask}
        out = self.decoder.run(self._recorded(self.RECORDABLE[0], feeds))
        positions = [self.mask_output_indices.index(i) for i in wanted]
        low_res = np.asarray(out["low_res_masks"], dtype=np.float32)[0, positions]
        scores = np.asarray(out["iou_predictions"], dtype=np.float32)[0, positions]
        masks = self._upscaler(low_res)
        if not return_logits:
            masks = masks > MASK_THRESHOLD
        return masks, scores, low_res

    def _require_image(self, action: str) -> None:
        if not self.is_image_set:
            raise InputError(f"no image set: call set_image(image) before trying to {action}")

    def _prompt_points(self, point_coords: Any, point_labels: Any, box: Any) -> tuple[np.ndarray, np.ndarray]:
        """(1, N, 2) coordinates and (1, N) labels in the encoder frame: points, then padding or box corners."""
        height, width = self.original_size
        coords = np.zeros((0, 2), dtype=np.float64)
        labels = np.zeros((0,), dtype=np.float64)
        if (point_coords is None) != (point_labels is None):
            given = "point_coords" if point_coords is not None else "point_labels"
            raise InputError(f"{given} given without {'point_labels' if given == 'point_coords' else 'point_coords'}: pass both")
        if point_coords is not None:
            pts = as_float_array(point_coords, "point_coords")
            if pts.ndim != 2 or pts.shape[1] != 2 or pts.shape[0] == 0:
                raise InputError(f"point_coords must be an (N, 2) array of (x, y) pixels with N >= 1, got shape {pts.shape}")
            lab = as_float_array(point_labels, "point_labels").reshape(-1)
            if lab.shape[0] != pts.shape[0]:
                raise InputError(f"point_labels has {lab.shape[0]} labels for {pts.shape[0]} points: give one label per point")
            bad = sorted({float(v) for v in lab if v not in (0.0, 1.0)})
            if bad:
                raise InputError(f"point labels must be 1 (foreground) or 0 (background), got {bad}")
            check_inside(pts, width, height, "point")
            coords, labels = resize_coords(pts, self.original_size, self.encoder_size), lab
        if box is None and point_coords is None:
            raise InputError("no prompt: give point_coords/point_labels, a box, or both")
        corners = None
        if box is not None:
            b = as_float_array(box, "box").reshape(-1)
            if b.shape[0] != 4:
                raise InputError(f"box must hold 4 numbers x0, y0, x1, y1 (one box), got {b.shape[0]}")
            check_box_order(b)
            check_inside(b.reshape(2, 2), width, height, "box corner")
            corners = box_corners(b, self.original_size, self.encoder_size)
        return _prompt_layout(coords, labels, corners)

    def _mask_prompt(self, mask_input: Any) -> tuple[np.ndarray, np.ndarray]:
        h, w = self.mask_input_size
        if mask_input is None:
            return np.zeros((1, 1, h, w), dtype=np.float32), np.zeros((1,), dtype=np.float32)
        mask = as_float_array(mask_input, "mask_input")
        if mask.shape != (1, h, w):
            raise InputError(f"mask_input must have shape (1, {h}, {w}) (low_res logits of a previous predict), got {mask.shape}")
        return mask[None].astype(np.float32), np.ones((1,), dtype=np.float32)


def _prompt_layout(coords: np.ndarray, labels: np.ndarray, corners: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The decoder's (1, N, 2) coordinates and (1, N) labels as SamPredictor lays a prompt out: the points, then a
    box's two corners (labels 2 and 3), or without a box the padding point (0, 0) labelled -1."""
    if corners is not None:
        coords, labels = np.concatenate([coords, corners]), np.concatenate([labels, [2.0, 3.0]])
    else:
        coords, labels = np.concatenate([coords, np.zeros((1, 2))]), np.concatenate([labels, [-1.0]])
    return coords[None].astype(np.float32), labels[None].astype(np.float32)


def _files(check_weights: bool) -> FileSet:
    """The files :class:`SamPredictor` takes: SAM's pair, its weights' provenance compared unless ``check_weights``
    is off."""
    return PAIR if check_weights else PAIR_ANY_WEIGHTS
