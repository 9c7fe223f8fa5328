"""A tiny SAM 2.1 recipe for the tests: the official Hiera-T config shrunk by Hydra overrides (seconds to export),
and its image encoder and mask decoder exported once per test run (:func:`sam2_tiny_pair`)."""

from __future__ import annotations

from pathlib import Path

import pytest

#: The random seed of :func:`sam2_tiny_pair`'s weights (the official model of the tests is built with it).
PAIR_SEED = 3

#: The official Hiera-T config, shrunk: a 16-wide trunk of 5 blocks (one global), one memory-attention layer.
TINY_SAM2_RECIPE = """\
[model]
family = "sam2_image_encoder"
variant = "sam2.1_tiny_test"

[architecture]
config = "configs/sam2.1/sam2.1_hiera_t.yaml"
overrides = ["++model.image_encoder.trunk.embed_dim=16", "++model.image_encoder.trunk.stages=[1,1,2,1]",
             "++model.image_encoder.trunk.global_att_blocks=[3]",
             "++model.image_encoder.trunk.window_pos_embed_bkg_spatial_size=[4,4]",
             "++model.image_encoder.neck.backbone_channel_list=[128,64,32,16]", "++model.memory_attention.num_layers=1"]

[preprocessing]
pixel_mean = [123.675, 116.28, 103.53]
pixel_std = [58.395, 57.12, 57.375]
"""

#: The same at 512 (a 32x32 grid, so the memory bank stays small): the memory modules' tests.
TINY_SAM2_VIDEO_RECIPE = TINY_SAM2_RECIPE.replace(
    '"++model.memory_attention.num_layers=1"]',
    '"++model.memory_attention.num_layers=1", "++model.image_size=512",\n'
    '             "++model.memory_attention.layer.self_attention.feat_sizes=[32,32]",\n'
    '             "++model.memory_attention.layer.cross_attention.feat_sizes=[32,32]"]')


def sam2_tiny_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(image encoder, mask decoder) of :data:`TINY_SAM2_RECIPE`, random weights seed :data:`PAIR_SEED`, exported by
    the pipeline once for all workers of this run (the SAM 2 predictor, encoder and serving tests share them)."""
    from tests.once_per_run import once_per_run
    from vitdeploy.pipeline import export_from_recipe

    def make(root: Path) -> dict[str, Path]:
        (root / "enc.toml").write_text(TINY_SAM2_RECIPE)
        (root / "dec.toml").write_text(TINY_SAM2_RECIPE.replace("sam2_image_encoder", "sam2_mask_decoder"))
        return {part: export_from_recipe(str(root / f"{part[:3]}.toml"), root / f"{part}.onnx", random_weights=True,
                                         seed=PAIR_SEED).path for part in ("encoder", "decoder")}

    made = once_per_run(tmp_path_factory, "sam2_tiny_pair", make)
    return made["encoder"], made["decoder"]
