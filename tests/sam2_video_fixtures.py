"""SAM 2's video path for the tests: the shipped tiny SAM 2.1 recipes (256 px), its four exported graphs, a synthetic 20-frame clip of
moving shapes, and the official ``SAM2VideoPredictor`` with the same weights (``pytest_plugins``).

The weights are the seeded random ones of :func:`vitdeploy.models.sam2.load_sam2` with one change: the object-score
head's output bias is raised by 1.5. Seeded random weights score every object about -0.55 (absent), so every mask
would be the no-object fill (-1024) on both sides and a comparison of masks would prove nothing; with the bias the
objects are present (scores about +1) and the masks are real. The weights travel as an official-format checkpoint
(``{"model": state_dict}``), the path a user's ``sam2.1_hiera_*.pt`` takes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

SEED = 3
FRAMES = 20  # more than the 16 object pointers the memory attention takes (its cap is exercised) and the 7 memories
CLIP_SIZE = (120, 160)  # H, W
#: The four graphs of the video predictor: file stem -> the shipped tiny recipe (256 px, a 16 x 16 memory grid).
VIDEO_RECIPES = {"encoder": "sam2_tiny", "decoder": "sam2_tiny_decoder", "memory_encoder": "sam2_tiny_memory_encoder",
                 "memory_attention": "sam2_tiny_memory_attention"}


def clip_arch():
    from vitdeploy.models.recipes import load_recipe
    from vitdeploy.models.sam2 import Sam2Arch

    return Sam2Arch.from_dict(load_recipe("sam2_tiny").architecture)


def write_checkpoint(path: Path) -> Path:
    """The seeded tiny SAM 2.1 with its objects present (module docstring), saved as an official checkpoint."""
    import torch

    from vitdeploy.models.sam2 import load_sam2

    model = load_sam2(clip_arch(), random_seed=SEED)
    with torch.no_grad():
        model.sam_mask_decoder.pred_obj_score_head.layers[-1].bias += 1.5
    torch.save({"model": model.state_dict()}, path)
    return path


def write_clip(folder: Path, frames: int = FRAMES, size: tuple[int, int] = CLIP_SIZE) -> Path:
    """``frames`` JPEG frames (00000.jpg, ...) of a red disc moving right and a blue square moving down over a noisy
    background, as a frame folder the official loader reads."""

    def shapes(draw, t: int) -> None:
        x, y = 10 + 3 * t, 5 + 2 * t
        draw.ellipse([x, 30, x + 30, 60], fill=(220, 40, 40))
        draw.rectangle([100, y, 130, y + 25], fill=(40, 40, 220))

    background = np.random.default_rng(0).integers(60, 120, (*size, 3)).astype(np.uint8)
    return write_frames(folder, background, frames, shapes, quality=95)


def write_frames(folder: Path, background: np.ndarray, frames: int, shapes: Any, quality: int) -> Path:
    """``frames`` JPEG frames (00000.jpg, ...) of ``shapes(draw, t)`` (a ``PIL.ImageDraw`` of frame ``t``) drawn over
    the (H, W, 3) uint8 ``background``."""
    from PIL import Image, ImageDraw

    folder.mkdir(parents=True, exist_ok=True)
    for t in range(frames):
        image = Image.fromarray(background.copy())
        shapes(ImageDraw.Draw(image), t)
        image.save(folder / f"{t:05d}.jpg", quality=quality)
    return folder


def official_video_predictor(checkpoint: Path, arch: Any = None):
    """The official ``SAM2VideoPredictor`` (``build_sam2_video_predictor``, CPU) with the checkpoint's weights, of the
    tests' tiny model or of ``arch`` (a :class:`vitdeploy.models.sam2.Sam2Arch`).

    One shim, in the reference only: on the CPU in float32 the official predictor stops when an object's memory has no
    object pointer (an object prompted on a later frame than the one tracked): its memories are stored in bfloat16 and
    reach a float32 layer ("mat1 and mat2 must have the same dtype"). Whenever a pointer is there, ``torch.cat``
    promotes them to float32; the shim does the same when none is."""
    import torch
    from sam2.build_sam import build_sam2_video_predictor

    arch = arch or clip_arch()
    predictor = build_sam2_video_predictor(arch.config, device="cpu", hydra_overrides_extra=list(arch.overrides))
    predictor.load_state_dict(torch.load(checkpoint, weights_only=True)["model"], strict=True)
    attention = predictor.memory_attention.forward

    def float32_memory(curr, memory, curr_pos=None, memory_pos=None, num_obj_ptr_tokens=0):
        return attention(curr=curr, memory=memory.float(), curr_pos=curr_pos, memory_pos=memory_pos,
                         num_obj_ptr_tokens=num_obj_ptr_tokens)

    predictor.memory_attention.forward = float32_memory
    return predictor.eval()


@pytest.fixture(scope="session")
def sam2_video(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """{"checkpoint", "clip", and the four exported files by stem (VIDEO_RECIPES)}, made once per test run."""
    pytest.importorskip("sam2", reason="the official sam2 package is not installed (scripts/test.sh installs it)")
    from tests.once_per_run import once_per_run
    from vitdeploy.pipeline import export_from_recipe

    def make(root: Path) -> dict[str, Path]:
        checkpoint = write_checkpoint(root / "tiny_sam2.pt")
        files = {"checkpoint": checkpoint, "clip": write_clip(root / "clip")}
        for stem, recipe in VIDEO_RECIPES.items():
            files[stem] = export_from_recipe(recipe, root / f"{stem}.onnx", checkpoint=str(checkpoint)).path
        return files

    return once_per_run(tmp_path_factory, "sam2_video", make)


__all__ = ["CLIP_SIZE", "FRAMES", "SEED", "VIDEO_RECIPES", "clip_arch", "official_video_predictor", "sam2_video",
           "write_checkpoint", "write_clip"]
