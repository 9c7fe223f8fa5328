"""The eager reference for SAM 3's video tracker: the official ``sam3`` package's ``Sam3TrackerBase`` without its
backbone (the memory encoder, the memory attention, the SAM heads and the object pointers that follow an object
from frame to frame).

``sam3.model_builder.build_tracker`` builds it at one size and on a CPU stops in a constructor (the memory's
``PositionEmbeddingSine`` precomputes its cache on ``device="cuda"``). :func:`build_sam3_tracker` builds the same
official classes (``SimpleMaskEncoder`` with ``SimpleMaskDownSampler``, ``SimpleFuser`` and ``CXBlock``;
``TransformerEncoderCrossAttention`` of ``TransformerDecoderLayerv2`` with ``RoPEAttention``; ``Sam3TrackerBase``)
with ``build_tracker``'s own arguments, of which a recipe may change the sizes (:class:`Sam3TrackerArch`: the tests'
tiny model). The one shim, on the reference side, is named and changes no arithmetic: ``precompute_resolution=None``,
so the position encoding computes its table on the first call, on this device, by the code the precomputation runs.
At the default sizes the module is ``build_tracker(apply_temporal_disambiguation=False)``'s, parameter for
parameter (``tests/families/test_sam3_tracker.py`` compares the two).

Weights come from ``--checkpoint`` (the official ``sam3.pt``: its ``tracker.*`` keys; a state dict of the tracker
itself) or are seeded random (every parameter perturbed, the prompt encoder's random Fourier matrix drawn from the
seed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from torch import nn

from vitdeploy.errors import RecipeError
from vitdeploy.models.sam3_common import GridArchTable, load_official_weights, missing_sam3, select_under
from vitdeploy.models.sam3_interactive_decoder import MASK_DECODER_EXTRA_ARGS

#: Where ``sam3.pt`` keeps the tracker (its backbone is the detector's, under ``detector.backbone.``).
CHECKPOINT_PREFIXES = ("tracker.",)


@dataclass(frozen=True)
class Sam3TrackerArch(GridArchTable):
    """The sizes of SAM 3's tracker, named as ``build_tracker`` and its helpers name them; the defaults are theirs.

    ``d_model`` is the memory attention's and the SAM heads' width (the vision neck's), ``mem_dim`` the memory
    encoder's ``out_dim``; the mask is resized to ``16 * grid`` pixels a side before the downsampler's four stride-2
    convolutions (``interpol_size``: 1152 at 1008 px)."""

    img_size: int = 1008
    patch_size: int = 14
    d_model: int = 256
    mem_dim: int = 64
    num_maskmem: int = 7
    attention_layers: int = 4
    attention_heads: int = 1
    dim_feedforward: int = 2048
    fuser_layers: int = 2
    max_obj_ptrs_in_encoder: int = 16
    max_cond_frames_in_attn: int = 4

    WHAT: ClassVar[str] = "SAM 3's tracker"

    def check(self) -> None:
        super().check()
        if self.d_model % self.attention_heads or (self.d_model // self.attention_heads) % 4:
            raise RecipeError(f"d_model {self.d_model} over attention_heads {self.attention_heads} must be a multiple "
                              "of 4 (the axial rotary embedding splits each head in four)")
        if self.d_model % 8 or self.mem_dim % 2 or self.d_model % self.mem_dim:
            raise RecipeError(f"d_model {self.d_model} must be a multiple of 8 and of mem_dim {self.mem_dim} (an "
                              "object pointer is split into d_model / mem_dim memory tokens), mem_dim even")
        if self.num_maskmem < 2 or self.max_obj_ptrs_in_encoder < 2:
            raise RecipeError("num_maskmem and max_obj_ptrs_in_encoder must be at least 2 (a memory bank)")

    @property
    def mask_size(self) -> int:
        """The side the memory encoder resizes a mask to (``SimpleMaskDownSampler``'s ``interpol_size``)."""
        return 16 * self.grid


def build_sam3_tracker(arch: Sam3TrackerArch) -> nn.Module:
    """The official ``Sam3TrackerBase`` without a backbone, built as ``build_tracker(apply_temporal_disambiguation=
    False)`` builds it (``_create_tracker_maskmem_backbone``, ``_create_tracker_transformer``), eval mode."""
    try:
        from sam3.model.decoder import TransformerDecoderLayerv2, TransformerEncoderCrossAttention
        from sam3.model.memory import CXBlock, SimpleFuser, SimpleMaskDownSampler, SimpleMaskEncoder
        from sam3.model.model_misc import TransformerWrapper
        from sam3.model.position_encoding import PositionEmbeddingSine
        from sam3.model.sam3_tracker_base import Sam3TrackerBase
        from sam3.sam.transformer import RoPEAttention
    except ImportError as exc:
        raise missing_sam3(exc) from exc
    arch.check()
    d, grid = arch.d_model, arch.grid
    # The shim: the builder's precompute_resolution=1008 fills the cache on "cuda"; None computes it on first use.
    positions = PositionEmbeddingSine(num_pos_feats=arch.mem_dim, normalize=True, scale=None, temperature=10000,
                                      precompute_resolution=None)
    downsampler = SimpleMaskDownSampler(embed_dim=d, kernel_size=3, stride=2, padding=1,
                                        interpol_size=[arch.mask_size, arch.mask_size])
    block = CXBlock(dim=d, kernel_size=7, padding=3, layer_scale_init_value=1.0e-06, use_dwconv=True)
    memory_encoder = SimpleMaskEncoder(out_dim=arch.mem_dim, position_encoding=positions, mask_downsampler=downsampler,
                                       fuser=SimpleFuser(layer=block, num_layers=arch.fuser_layers), in_dim=d)
    attention = dict(embedding_dim=d, num_heads=arch.attention_heads, downsample_rate=1, dropout=0.1,
                     rope_theta=10000.0, feat_sizes=[grid, grid], use_fa3=False, use_rope_real=False)
    layer = TransformerDecoderLayerv2(
        cross_attention_first=False, activation="relu", dim_feedforward=arch.dim_feedforward, dropout=0.1,
        pos_enc_at_attn=False, pre_norm=True, self_attention=RoPEAttention(**attention), d_model=d,
        pos_enc_at_cross_attn_keys=True, pos_enc_at_cross_attn_queries=False,
        cross_attention=RoPEAttention(**attention, kv_in_dim=arch.mem_dim, rope_k_repeat=True),
    )
    encoder = TransformerEncoderCrossAttention(remove_cross_attention_layers=[], batch_first=True, d_model=d,
                                               frozen=False, pos_enc_at_input=True, layer=layer,
                                               num_layers=arch.attention_layers, use_act_checkpoint=False)
    return Sam3TrackerBase(
        backbone=None, transformer=TransformerWrapper(encoder=encoder, decoder=None, d_model=d),
        maskmem_backbone=memory_encoder, num_maskmem=arch.num_maskmem, image_size=arch.img_size,
        backbone_stride=arch.patch_size, max_cond_frames_in_attn=arch.max_cond_frames_in_attn,
        multimask_output_in_sam=True, forward_backbone_per_frame_for_eval=True, trim_past_non_cond_mem_for_eval=False,
        multimask_output_for_tracking=True, multimask_min_pt_num=0, multimask_max_pt_num=1,
        non_overlap_masks_for_mem_enc=False, max_obj_ptrs_in_encoder=arch.max_obj_ptrs_in_encoder,
        sam_mask_decoder_extra_args=dict(MASK_DECODER_EXTRA_ARGS), use_memory_selection=False,
    ).eval()


def image_position_encoding(arch: Sam3TrackerArch) -> nn.Module:
    """The vision neck's sine encoding of the grid (``_create_position_encoding``, ``num_pos_feats=d_model``): the
    ``vision_pos_enc`` the tracker's memory attention reads for the current frame."""
    from sam3.model.position_encoding import PositionEmbeddingSine

    return PositionEmbeddingSine(num_pos_feats=arch.d_model, normalize=True, scale=None, temperature=10000,
                                 precompute_resolution=None)


def load_sam3_tracker(arch: Sam3TrackerArch, checkpoint: str | Path | Mapping[str, Any] | None = None, *,
                      random_seed: int | None = None, what: str | None = None) -> nn.Module:
    """Build the official tracker and fill it from a checkpoint (the ``tracker.*`` keys; a path or the state dict
    already read) or with seeded random weights."""
    from vitdeploy.models.sam_decoder import randomize_prompt_decoder

    def select(state: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in select_under(state, CHECKPOINT_PREFIXES).items() if not k.startswith("backbone.")}

    return load_official_weights(build_sam3_tracker(arch), checkpoint, random_seed=random_seed,
                                 what=what or "SAM 3's tracker",
                                 hint=": use the official sam3.pt or a state dict of its tracker", select=select,
                                 randomize=randomize_prompt_decoder)


__all__ = ["CHECKPOINT_PREFIXES", "Sam3TrackerArch", "build_sam3_tracker", "image_position_encoding",
           "load_sam3_tracker"]
