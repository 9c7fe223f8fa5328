"""The eager reference for SAM 3's detector: the official ``sam3`` package's ``Sam3Image`` without its backbone.

The detector is what finds every instance of a concept once the image and the prompt are encoded: the geometry
encoder (exemplar boxes -> prompt tokens), the fusion encoder (image tokens attend to the prompt), the decoder
(object queries and the presence token, box refinement with the box-relative position bias), the dot-product
scoring and the segmentation head (pixel decoder over the backbone levels, one mask per query).
``Sam3Image.forward_grounding`` runs it from the backbone's outputs; this module builds the same official classes
with ``sam3.model_builder``'s arguments (``_create_transformer_encoder``, ``_create_transformer_decoder``,
``_create_dot_product_scoring``, ``_create_segmentation_head``, ``_create_geometry_encoder``), of which a recipe may
change the sizes (:class:`Sam3DetectorArch`: the tests' tiny model).

The reference-side shims, named and changing no arithmetic: the decoder is built with ``resolution=None,
stride=None`` (the builder's values precompute its coordinate table on ``device="cuda"``; without them the same
function computes it on the first call, on this device) and the position encodings with
``precompute_resolution=None`` (as for the vision encoder).

Weights come from ``--checkpoint`` (the official ``sam3.pt``: its ``detector.transformer.*``,
``detector.geometry_encoder.*``, ``detector.dot_prod_scoring.*`` and ``detector.segmentation_head.*`` keys) or are
seeded random (every parameter perturbed).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from torch import nn

from vitdeploy.errors import RecipeError
from vitdeploy.models.sam3_common import GridArchTable, build_position_encoding, load_official_weights, missing_sam3

#: The detector's parts in ``Sam3Image`` (and under ``detector.`` in ``sam3.pt``).
DETECTOR_PARTS = ("transformer.", "geometry_encoder.", "dot_prod_scoring.", "segmentation_head.")


@dataclass(frozen=True)
class Sam3DetectorArch(GridArchTable):
    """The sizes of SAM 3's detector; defaults are ``sam3.model_builder``'s.

    ``img_size``/``patch_size`` give the grid of the image tokens the detector reads (72 at 1008 px; the decoder's
    box-relative position bias is computed over it); ``d_model`` must equal the vision and text encoders' output
    width.
    """

    img_size: int = 1008
    patch_size: int = 14
    d_model: int = 256
    num_heads: int = 8
    dim_feedforward: int = 2048
    encoder_layers: int = 6
    decoder_layers: int = 6
    num_queries: int = 200
    geometry_layers: int = 3
    roi_size: int = 7
    scoring_hidden: int = 2048

    WHAT: ClassVar[str] = "a SAM 3 detector"

    MULTIPLES = GridArchTable.MULTIPLES + (("d_model", "num_heads", ""),
                                           ("d_model", 8, "the pixel decoder's GroupNorm has 8 groups"))

    def check(self) -> None:
        super().check()
        if self.grid < self.roi_size:
            raise RecipeError(f"a {self.grid}x{self.grid} grid is smaller than roi_size {self.roi_size}")
        if min(self.encoder_layers, self.decoder_layers, self.num_queries, self.geometry_layers) < 1:
            raise RecipeError("encoder_layers, decoder_layers, num_queries and geometry_layers must be at least 1")


def _official():
    try:
        from sam3.model import decoder, encoder, geometry_encoders, maskformer_segmentation, model_misc, sam3_image
    except ImportError as exc:
        raise missing_sam3(exc) from exc
    return decoder, encoder, geometry_encoders, maskformer_segmentation, model_misc, sam3_image


def build_sam3_detector(arch: Sam3DetectorArch) -> nn.Module:
    """The official ``Sam3Image`` as ``sam3.model_builder._create_sam3_model`` builds it for images, without the
    backbone (``forward_grounding`` reads the backbone's outputs) and without the interactive predictor, eval mode."""
    decoder, encoder, geometry, segmentation, misc, sam3_image = _official()
    arch.check()
    d, heads, ffn = arch.d_model, arch.num_heads, arch.dim_feedforward

    def attention(batch_first: bool, dropout: float = 0.1) -> nn.Module:
        return misc.MultiheadAttentionWrapper(num_heads=heads, dropout=dropout, embed_dim=d, batch_first=batch_first)

    fusion_layer = encoder.TransformerEncoderLayer(
        activation="relu", d_model=d, dim_feedforward=ffn, dropout=0.1, pos_enc_at_attn=True,
        pos_enc_at_cross_attn_keys=False, pos_enc_at_cross_attn_queries=False, pre_norm=True,
        self_attention=attention(True), cross_attention=attention(True))
    fusion = encoder.TransformerEncoderFusion(
        layer=fusion_layer, num_layers=arch.encoder_layers, d_model=d, num_feature_levels=1, frozen=False,
        use_act_checkpoint=True, add_pooled_text_to_img_feat=False, pool_text_with_mask=True)
    decoder_layer = decoder.TransformerDecoderLayer(
        activation="relu", d_model=d, dim_feedforward=ffn, dropout=0.1, cross_attention=attention(False),
        n_heads=heads, use_text_cross_attention=True)
    # The shim: the builder's resolution=1008, stride=14 precompute the coordinate table on "cuda".
    detr_decoder = decoder.TransformerDecoder(
        layer=decoder_layer, num_layers=arch.decoder_layers, num_queries=arch.num_queries, return_intermediate=True,
        box_refine=True, num_o2m_queries=0, dac=True, boxRPB="log", d_model=d, frozen=False, interaction_layer=None,
        dac_use_selfatt_ln=True, resolution=None, stride=None, use_act_checkpoint=True, presence_token=True)
    transformer = misc.TransformerWrapper(encoder=fusion, decoder=detr_decoder, d_model=d)
    scoring = misc.DotProductScoring(d_model=d, d_proj=d, prompt_mlp=misc.MLP(
        input_dim=d, hidden_dim=arch.scoring_hidden, output_dim=d, num_layers=2, dropout=0.1, residual=True,
        out_norm=nn.LayerNorm(d)))
    pixel_decoder = segmentation.PixelDecoder(num_upsampling_stages=3, interpolation_mode="nearest", hidden_dim=d)
    segmentation_head = segmentation.UniversalSegmentationHead(
        hidden_dim=d, upsampling_stages=3, aux_masks=False, presence_head=False, dot_product_scorer=None,
        act_ckpt=True, cross_attend_prompt=attention(False, dropout=0), pixel_decoder=pixel_decoder)
    geometry_layer = encoder.TransformerEncoderLayer(
        activation="relu", d_model=d, dim_feedforward=ffn, dropout=0.1, pos_enc_at_attn=False, pre_norm=True,
        self_attention=attention(False), pos_enc_at_cross_attn_queries=False, pos_enc_at_cross_attn_keys=True,
        cross_attention=attention(False))
    geometry_encoder = geometry.SequenceGeometryEncoder(
        pos_enc=build_position_encoding(d),
        encode_boxes_as_points=False, points_direct_project=True, points_pool=True, points_pos_enc=True,
        boxes_direct_project=True, boxes_pool=True, boxes_pos_enc=True, d_model=d, num_layers=arch.geometry_layers,
        layer=geometry_layer, use_act_ckpt=True, add_cls=True, add_post_encode_proj=True, roi_size=arch.roi_size)
    return sam3_image.Sam3Image(
        backbone=None, transformer=transformer, input_geometry_encoder=geometry_encoder,
        segmentation_head=segmentation_head, num_feature_levels=1, o2m_mask_predict=True, dot_prod_scoring=scoring,
        use_instance_query=False, multimask_output=True, inst_interactive_predictor=None, matcher=None).eval()


def load_sam3_detector(arch: Sam3DetectorArch, checkpoint: str | Path | None = None, *,
                       random_seed: int | None = None, what: str | None = None) -> nn.Module:
    """Build the official detector and fill it from a checkpoint (its ``detector.*`` keys outside the backbone) or
    with seeded random weights."""
    model = build_sam3_detector(arch)
    return load_official_weights(
        model, checkpoint, random_seed=random_seed, what=what or "SAM 3's detector",
        hint=": use the official sam3.pt or a state dict of its detector",
        select=_detector_keys)


def _detector_keys(state: dict[str, Any]) -> dict[str, Any]:
    prefix = "detector." if any(k.startswith("detector.") for k in state) else ""
    return {k[len(prefix):]: v for k, v in state.items()
            if k.startswith(prefix) and k[len(prefix):].startswith(DETECTOR_PARTS)}


__all__ = ["Sam3DetectorArch", "build_position_encoding", "build_sam3_detector", "load_sam3_detector"]
