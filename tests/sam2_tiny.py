"""A tiny SAM 2.1 recipe for the tests: the official Hiera-T config shrunk by Hydra overrides (seconds to export)."""

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
