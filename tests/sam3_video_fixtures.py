"""SAM 3's tracker for the tests: the shipped tiny recipes' four files (vision encoder, interactive decoder, memory
encoder, memory attention) from one official-format checkpoint, a clip in which shapes enter, cross, leave and come
back, and the official ``Sam3TrackerPredictor`` with the same weights on the CPU.

The weights are the seeded random ones of the tiny recipes with one change: the object-score head's output bias is
lowered by 0.23 (:data:`OBJECT_SCORE_BIAS`). Seeded random weights score every object present (about +0.2 to +0.3,
and a memory score of about 0.02 on every frame), so the absent-object branches and memory selection's exclusion
(``eff_iou_score`` at most ``mf_threshold`` 0.01) would never run; with the bias the objects' scores straddle 0
(-0.24 to +0.06; 4 % absent) and the frames' memory scores straddle the official threshold (0.003 to 0.011), with
margins far above the two sides' float32 differences (the test asserts them). They travel as a ``sam3.pt``-format
checkpoint (``{"model": ...}`` with ``detector.backbone.*`` and ``tracker.*`` keys), the path a user's ``sam3.pt``
takes.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

SEED = 6
FRAMES = 32  # beyond the 16 object pointers and 7 memories the bank takes
CLIP_SIZE = (90, 120)  # H, W
#: Added to the object-score head's output bias (module docstring).
OBJECT_SCORE_BIAS = -0.23
#: The four files: role -> the shipped tiny recipe (112 px, an 8 x 8 grid).
TRACKER_RECIPES = {"vision": "sam3_tiny", "interactive": "sam3_tiny_interactive",
                   "memory_encoder": "sam3_tiny_memory_encoder", "memory_attention": "sam3_tiny_memory_attention"}


def _arch(recipe: str, cls: Any) -> Any:
    from vitdeploy.models.recipes import load_recipe

    return cls.from_dict(load_recipe(recipe).architecture)


def write_checkpoint(path: Path, recipes: dict[str, str] = TRACKER_RECIPES, bias: float = OBJECT_SCORE_BIAS,
                     seed: int = SEED) -> Path:
    """The seeded SAM 3 of ``recipes`` (vision backbone and tracker; the tiny one by default) with the object score
    moved by ``bias`` (module docstring), as ``sam3.pt`` keeps them."""
    import torch

    from vitdeploy.models.sam3_tracker import Sam3TrackerArch, load_sam3_tracker
    from vitdeploy.models.sam3_vision_encoder import Sam3VisionArch, load_sam3_vision

    vision = load_sam3_vision(_arch(recipes["vision"], Sam3VisionArch), random_seed=seed)
    tracker = load_sam3_tracker(_arch(recipes["memory_attention"], Sam3TrackerArch), random_seed=seed)
    with torch.no_grad():
        tracker.sam_mask_decoder.pred_obj_score_head.layers[-1].bias += bias
    state = {f"detector.backbone.{k}": v for k, v in vision.state_dict().items()}
    state.update({f"tracker.{k}": v for k, v in tracker.state_dict().items()})
    torch.save({"model": state}, path)
    return path


def write_clip(folder: Path, frames: int = FRAMES, size: tuple[int, int] = CLIP_SIZE) -> Path:
    """JPEG frames of three shapes: a red disc entering from the left and leaving on the right, a blue square
    crossing it the other way, a green bar that leaves at the bottom and comes back."""
    from tests.sam2_video_fixtures import write_frames

    def shapes(draw: Any, t: int) -> None:
        x = -25 + 6 * t
        draw.ellipse([x, 20, x + 28, 48], fill=(220, 40, 40))
        u = 110 - 4 * t
        draw.rectangle([u, 30, u + 24, 54], fill=(40, 40, 220))
        v = 60 + (5 * t if t < 12 else 5 * (24 - t))
        draw.rectangle([70, v, 100, v + 14], fill=(40, 200, 60))

    background = np.random.default_rng(1).integers(60, 120, (*size, 3)).astype(np.uint8)
    return write_frames(folder, background, frames, shapes, quality=95)


def official_tracker(checkpoint: Path, use_memory_selection: bool = True, recipes: dict[str, str] = TRACKER_RECIPES):
    """The official ``Sam3TrackerPredictor`` as ``build_tracker(apply_temporal_disambiguation=...)`` builds it, at the
    sizes of ``recipes`` (the tiny ones by default), with the checkpoint's tracker weights and, as the official example gives it
    (``predictor.backbone = sam3_model.detector.backbone``), the official vision backbone with the checkpoint's."""
    import torch

    from vitdeploy.models.sam3_tracker import Sam3TrackerArch, build_sam3_tracker
    from vitdeploy.models.sam3_vision_encoder import Sam3VisionArch, load_sam3_vision

    predictor = build_sam3_tracker(_arch(recipes["memory_attention"], Sam3TrackerArch), predictor=True,
                                   apply_temporal_disambiguation=use_memory_selection)
    state = torch.load(checkpoint, weights_only=True)["model"]
    predictor.load_state_dict({k[len("tracker."):]: v for k, v in state.items() if k.startswith("tracker.")},
                              strict=True)
    predictor.backbone = load_sam3_vision(_arch(recipes["vision"], Sam3VisionArch), checkpoint).eval()
    return predictor.eval()


@contextmanager
def official_tracker_on_the_cpu(predictor: Any):
    """The reference side's CPU shim, changing no arithmetic: the official tracker moves tensors to CUDA
    (``.cuda()`` on frames, memories and masks, ``pin_memory()`` before a pointer's position, the state's storage
    device ``cuda`` unless ``offload_state_to_cpu``); inside this block ``Tensor.cuda`` and ``Tensor.pin_memory``
    return the tensor itself and ``init_state`` keeps its state on the CPU. And, as for SAM 2's official predictor
    (:func:`tests.sam2_video_fixtures.official_video_predictor`): outside CUDA's BF16 autocast, a bank with no object
    pointer (the last frame tracked in reverse, where memory selection gives none) is the stored BF16 memories alone
    and stops at a float32 layer; whenever a pointer is there ``torch.cat`` promotes the bank to float32, and the shim
    does the same when none is."""
    import torch

    saved = torch.Tensor.cuda, torch.Tensor.pin_memory
    init_state = predictor.init_state
    encoder = predictor.transformer.encoder
    encode = encoder.forward

    def on_cpu(*args: Any, **kwargs: Any):
        return init_state(*args, **{**kwargs, "offload_state_to_cpu": True})

    def float32_bank(*args: Any, prompt: Any = None, **kwargs: Any):
        return encode(*args, prompt=prompt.float(), **kwargs)

    torch.Tensor.cuda = lambda self, *a, **k: self
    torch.Tensor.pin_memory = lambda self, *a, **k: self
    predictor.init_state = on_cpu
    encoder.forward = float32_bank
    try:
        yield predictor
    finally:
        torch.Tensor.cuda, torch.Tensor.pin_memory = saved
        predictor.init_state = init_state
        encoder.forward = encode


def _tracker_files(tmp_path_factory: pytest.TempPathFactory, bias: float) -> dict[str, Path]:
    """{"checkpoint", "clip", and the four exported files by role (TRACKER_RECIPES)} of the tiny checkpoint with the
    object score moved by ``bias``, made once per test run."""
    pytest.importorskip("sam3", reason="the official sam3 package is not installed (scripts/test.sh installs it)")
    from tests.once_per_run import once_per_run
    from vitdeploy.pipeline import export_from_recipe

    def make(root: Path) -> dict[str, Path]:
        checkpoint = write_checkpoint(root / "tiny_sam3.pt", bias=bias)
        files = {"checkpoint": checkpoint, "clip": write_clip(root / "clip")}
        for role, recipe in TRACKER_RECIPES.items():
            files[role] = export_from_recipe(recipe, root / f"{recipe}.onnx", checkpoint=str(checkpoint)).path
        return files

    return once_per_run(tmp_path_factory, "sam3_tracker" if bias == OBJECT_SCORE_BIAS else f"sam3_tracker_{bias:g}",
                        make)


@pytest.fixture(scope="session")
def sam3_tracker_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tracker's files with the object scores straddling 0 (:data:`OBJECT_SCORE_BIAS`): both branches of every
    decision run, each far from float32's noise."""
    return _tracker_files(tmp_path_factory, OBJECT_SCORE_BIAS)


@pytest.fixture(scope="session")
def sam3_tracker_files_present(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tracker's files from the seeded weights as they are: every object firmly present (scores +0.15 to +0.29 on the clip), so
    a reduced precision's clip is judged by its masks, not by which side of 0 BF16 rounds a score straddling it."""
    return _tracker_files(tmp_path_factory, 0.0)


__all__ = ["CLIP_SIZE", "FRAMES", "OBJECT_SCORE_BIAS", "SEED", "TRACKER_RECIPES", "official_tracker",
           "official_tracker_on_the_cpu", "sam3_tracker_files", "sam3_tracker_files_present",
           "write_checkpoint", "write_clip"]
