"""Tiny seeded SAM (encoder + prompt encoder + mask decoder) recipes, official models and exported artifacts.

The session fixture ``tiny_sam_artifacts`` exports them once through the public pipeline
(``vitdeploy.pipeline.export_from_recipe``); the official ``Sam`` is rebuilt from the same recipe
architecture and seed, as a user's official model would be. Test files load the fixture with
``pytest_plugins = ["tests.sam_tiny_fixtures"]`` (one definition, so one export per session).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import TINY_RECIPE
from vitdeploy.models.sam_decoder import SamDecoderArch, load_sam_prompt_decoder
from vitdeploy.models.sam_encoder import SamEncoderArch, load_sam_image_encoder

SEED = 5

ENCODER_RECIPE = TINY_RECIPE  # the same tiny encoder the encoder tests use

DECODER_RECIPE = """\
[model]
family = "sam_mask_decoder"
variant = "tiny"

[architecture]
embed_dim = 16
image_embedding_size = 8
input_image_size = 64
mask_in_chans = 8
transformer_depth = 2
transformer_mlp_dim = 32
transformer_num_heads = 2
attention_downsample_rate = 2
iou_head_depth = 3
iou_head_hidden_dim = 16

[decoder]
mask_output = "all"
max_points = 8
"""

ENCODER_ARCH = SamEncoderArch(img_size=64, patch_size=8, embed_dim=32, depth=3, num_heads=2, out_chans=16,
                              window_size=3, global_attn_indexes=(1,))
DECODER_ARCH = SamDecoderArch(embed_dim=16, image_embedding_size=8, input_image_size=64, mask_in_chans=8,
                              transformer_mlp_dim=32, transformer_num_heads=2, iou_head_hidden_dim=16)


def tiny_decoder(seed: int = SEED):
    """The official prompt encoder + mask decoder container with seeded non-zero weights."""
    return load_sam_prompt_decoder(DECODER_ARCH, random_seed=seed)


def tiny_official_sam(seed: int = SEED):
    """An official ``segment_anything.modeling.Sam`` with the tiny architecture and seeded weights."""
    from segment_anything.modeling import Sam

    decoder = tiny_decoder(seed)
    encoder = load_sam_image_encoder(ENCODER_ARCH, random_seed=seed)
    return Sam(encoder, decoder.prompt_encoder, decoder.mask_decoder).eval()


def sample_image(height: int, width: int, seed: int = 0) -> np.ndarray:
    """A smooth-ish HxWx3 uint8 picture (gradients plus noise), so masks have structure."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    base = np.stack([255 * xx / max(1, width - 1), 255 * yy / max(1, height - 1), 128 + 0 * xx], axis=-1)
    return np.clip(base + rng.normal(0, 30, (height, width, 3)), 0, 255).astype(np.uint8)


@dataclass
class TinySamArtifacts:
    root: Path
    encoder_recipe: Path
    decoder_recipe: Path
    encoder: Path
    decoder: Path


@pytest.fixture(scope="session")
def tiny_sam_artifacts(tmp_path_factory: pytest.TempPathFactory) -> TinySamArtifacts:
    """Tiny encoder and decoder ONNX files exported by the pipeline from recipes, random weights seed SEED (once per
    test run)."""
    from tests.once_per_run import once_per_run
    from vitdeploy.pipeline import export_from_recipe

    def make(root: Path) -> dict[str, Path]:
        torch.set_num_threads(2)
        enc_recipe, dec_recipe = root / "tiny_encoder.toml", root / "tiny_decoder.toml"
        enc_recipe.write_text(ENCODER_RECIPE)
        dec_recipe.write_text(DECODER_RECIPE)
        enc = export_from_recipe(str(enc_recipe), root / "encoder.onnx", random_weights=True, seed=SEED)
        dec = export_from_recipe(str(dec_recipe), root / "decoder.onnx", random_weights=True, seed=SEED)
        return {"root": root, "encoder_recipe": enc_recipe, "decoder_recipe": dec_recipe, "encoder": enc.path,
                "decoder": dec.path}

    return TinySamArtifacts(**once_per_run(tmp_path_factory, "tiny_sam", make))
