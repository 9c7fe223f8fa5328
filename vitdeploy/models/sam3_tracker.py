"""The eager reference for SAM 3's video tracker: the official ``sam3`` package's ``Sam3TrackerBase`` without its
backbone (the memory encoder, the memory attention, the SAM heads and the object pointers that follow an object
from frame to frame).

``sam3.model_builder.build_tracker`` builds it at one size and on a CPU stops in a constructor (the memory's
``PositionEmbeddingSine`` precomputes its cache on ``device="cuda"``). :func:`build_sam3_tracker` builds the same
official classes (``SimpleMaskEncoder`` with ``SimpleMaskDownSampler``, ``SimpleFuser`` and ``CXBlock``;
``TransformerEncoderCrossAttention`` of ``TransformerDecoderLayerv2`` with ``RoPEAttention``; ``Sam3TrackerBase``)
with ``build_tracker``'s own arguments, of which a recipe may change the sizes (:class:`Sam3TrackerArch`: the tests'
tiny model). The one shim, on the reference side, is :func:`~vitdeploy.models.sam3_common.build_position_encoding`'s.
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

from vitdeploy.models.sam3_common import build_position_encoding, load_official_weights, missing_sam3, select_under
from vitdeploy.models.sam3_interactive_decoder import MASK_DECODER_EXTRA_ARGS, Sam3InteractiveArch

#: Where ``sam3.pt`` keeps the tracker (its backbone is the detector's, under ``detector.backbone.``).
CHECKPOINT_PREFIXES = ("tracker.",)


@dataclass(frozen=True)
class Sam3TrackerArch(Sam3InteractiveArch):
    """The sizes of SAM 3's tracker: its SAM heads' (:class:`Sam3InteractiveArch`: ``img_size``, ``patch_size``,
    ``d_model``, the memory attention's width too) and the memory's, named as ``build_tracker`` and its helpers name
    them; the defaults are theirs. ``mem_dim`` is the memory encoder's ``out_dim``; the mask is resized to
    ``16 * grid`` pixels a side before the downsampler's four stride-2 convolutions (``interpol_size``: 1152 at
    1008 px). The bank's sizes are the builder's constants (:data:`BANK`)."""

    mem_dim: int = 64
    attention_layers: int = 4
    dim_feedforward: int = 2048

    WHAT: ClassVar[str] = "SAM 3's tracker"
    MULTIPLES = Sam3InteractiveArch.MULTIPLES + (
        ("mem_dim", 2, "the memory's sine encoding has two halves"),
        ("d_model", "mem_dim", "an object pointer is split into d_model / mem_dim memory tokens"))

    @property
    def mask_size(self) -> int:
        """The side the memory encoder resizes a mask to (``SimpleMaskDownSampler``'s ``interpol_size``)."""
        return 16 * self.grid


#: ``build_tracker``'s constants of the bank and the memory attention: memories, prompted frames in attention,
#: object pointers, the attention's heads and the memory fuser's ConvNeXt blocks.
BANK = {"num_maskmem": 7, "max_cond_frames_in_attn": 4, "max_obj_ptrs_in_encoder": 16}
ATTENTION_HEADS, FUSER_LAYERS = 1, 2


def build_sam3_tracker(arch: Sam3TrackerArch, predictor: bool = False,
                       apply_temporal_disambiguation: bool = False) -> nn.Module:
    """The official ``Sam3TrackerBase`` without a backbone, built as ``build_tracker(apply_temporal_disambiguation=
    False)`` builds it (``_create_tracker_maskmem_backbone``, ``_create_tracker_transformer``), eval mode.
    ``predictor``: the class ``build_tracker`` returns, ``Sam3TrackerPredictor``, with its predictor arguments and
    ``use_memory_selection=apply_temporal_disambiguation`` (``build_sam3_video_model`` passes True): the eager
    reference of :class:`vitdeploy.runtime.apps.sam3.tracker_predictor.Sam3TrackerPredictor` (the same parameters;
    memory selection has none)."""
    try:
        from sam3.model.decoder import TransformerDecoderLayerv2, TransformerEncoderCrossAttention
        from sam3.model.memory import CXBlock, SimpleFuser, SimpleMaskDownSampler, SimpleMaskEncoder
        from sam3.model.model_misc import TransformerWrapper
        from sam3.model.sam3_tracker_base import Sam3TrackerBase
        from sam3.model.sam3_tracking_predictor import Sam3TrackerPredictor
        from sam3.sam.transformer import RoPEAttention
    except ImportError as exc:
        raise missing_sam3(exc) from exc
    arch.check()
    d, grid = arch.d_model, arch.grid
    downsampler = SimpleMaskDownSampler(embed_dim=d, kernel_size=3, stride=2, padding=1,
                                        interpol_size=[arch.mask_size, arch.mask_size])
    block = CXBlock(dim=d, kernel_size=7, padding=3, layer_scale_init_value=1.0e-06, use_dwconv=True)
    memory_encoder = SimpleMaskEncoder(out_dim=arch.mem_dim, position_encoding=build_position_encoding(arch.mem_dim),
                                       mask_downsampler=downsampler, in_dim=d,
                                       fuser=SimpleFuser(layer=block, num_layers=FUSER_LAYERS))
    attention = dict(embedding_dim=d, num_heads=ATTENTION_HEADS, downsample_rate=1, dropout=0.1,
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
    # build_tracker's class (the predictor, with its own arguments) or the base class the graphs are made from
    Sam3Tracker = Sam3TrackerPredictor if predictor else Sam3TrackerBase  # noqa: N806
    extra = dict(always_start_from_first_ann_frame=False, non_overlap_masks_for_output=False,
                 offload_output_to_cpu_for_eval=False, clear_non_cond_mem_around_input=True,
                 fill_hole_area=0) if predictor else {}
    return Sam3Tracker(
        backbone=None, transformer=TransformerWrapper(encoder=encoder, decoder=None, d_model=d),
        maskmem_backbone=memory_encoder, image_size=arch.img_size, backbone_stride=arch.patch_size, **BANK,
        multimask_output_in_sam=True, forward_backbone_per_frame_for_eval=True, trim_past_non_cond_mem_for_eval=False,
        multimask_output_for_tracking=True, multimask_min_pt_num=0, multimask_max_pt_num=1,
        non_overlap_masks_for_mem_enc=False,
        sam_mask_decoder_extra_args=dict(MASK_DECODER_EXTRA_ARGS), use_memory_selection=apply_temporal_disambiguation,
        **extra,
    ).eval()


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


__all__ = ["ATTENTION_HEADS", "BANK", "CHECKPOINT_PREFIXES", "FUSER_LAYERS", "Sam3TrackerArch", "build_sam3_tracker",
           "load_sam3_tracker"]
