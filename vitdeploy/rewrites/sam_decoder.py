"""Export-friendly SAM prompt encoder + mask decoder (one graph), same weights as the official modules.

The graph's contract (the official ``segment_anything/utils/onnx.py`` one, minus its post-processing):

* ``image_embeddings`` (1, C, h, w) float32: the encoder's output.
* ``point_coords`` (1, N, 2) float32, N dynamic: (x, y) in the encoder's input frame (after
  ``ResizeLongestSide``). Points first, then either one padding point (label -1) or a box's two
  corners (labels 2 and 3): the layout ``SamPredictor`` builds.
* ``point_labels`` (1, N) float32: -1 padding, 0 background, 1 foreground, 2/3 box corners.
* ``mask_input`` (1, 1, 4h, 4w) float32 and ``has_mask_input`` (1,) float32 (1: use the mask).
* Outputs ``low_res_masks`` (1, K, 4h, 4w) and ``iou_predictions`` (1, K); with the default
  ``mask_output="all"`` K is every mask token: index 0 is the single-mask output, 1.. the multimask ones.

What differs from the official modules, and why:

* Point labels select their embeddings arithmetically (a one-hot MatMul against a 5-row table) instead
  of boolean-mask assignment (``embedding[labels == -1] = 0``), which exports to data-dependent
  ScatterND/NonZero. Box corners arrive as labelled points, as in the official ONNX model.
* The mask prompt is blended with ``has_mask_input`` (official: a Python ``if masks is None``).
* The dense positional encoding is computed from a coordinate grid fixed at construction (official:
  ``ones().cumsum()`` at run time, which exports to ConstantOfShape/CumSum chains).
* Attention (including the ``downsample_rate`` cross-attentions) reshapes with static head sizes and
  ``-1`` for the token axis (official: ``b, n, c = x.shape``), so a dynamic point count exports
  without Shape/Gather nodes; ``repeat_interleave`` over a batch of one is dropped.
* LayerNorm2d in the mask downscaling and the output upscaling: MatMul statistics or the native op.
* Mask selection is a static slice fixed at construction (official: a Python bool per call; the
  official ONNX model's "best mask" uses ArgMax + data-dependent Gather).
* No crop/resize to the original image size in the graph: its output size would depend on input
  values (a shape tensor). TensorRT then needs an int32 shape input with its own optimisation-profile
  values and cannot size the output buffer ahead of time; the runtime does it in NumPy instead.
"""

from __future__ import annotations

import copy
import math
from typing import Literal

import torch
from torch import nn

from vitdeploy.errors import ExportError, InputError
from vitdeploy.rewrites.layernorm2d import LayerNorm2dMode, rewrite_layernorm2d

MaskOutput = Literal["all", "multimask", "single"]
MASK_OUTPUTS = ("all", "multimask", "single")

#: Point label values, in the row order of :meth:`ExportablePromptEncoder.label_table`.
POINT_LABELS = (-1.0, 0.0, 1.0, 2.0, 3.0)


class ExportablePromptEncoder(nn.Module):
    """Official ``PromptEncoder`` for labelled points (boxes as corner points) and a gated mask prompt.

    Parameter and buffer names are the official ones.
    """

    def __init__(self, official: nn.Module, layernorm2d: LayerNorm2dMode = "matmul"):
        super().__init__()
        self.embed_dim = int(official.embed_dim)
        self.pe_layer = copy.deepcopy(official.pe_layer)
        self.point_embeddings = copy.deepcopy(official.point_embeddings)
        self.not_a_point_embed = copy.deepcopy(official.not_a_point_embed)
        self.no_mask_embed = copy.deepcopy(official.no_mask_embed)
        eh, ew = (int(s) for s in official.image_embedding_size)
        ih, iw = (int(s) for s in official.input_image_size)
        self.image_embedding_size = (eh, ew)
        self.input_image_size = (ih, iw)
        conv1, ln1, act1, conv2, ln2, act2, conv3 = official.mask_downscaling
        mid_h, mid_w = 2 * eh, 2 * ew  # 4h x 4w mask -> stride-2 conv -> 2h x 2w -> stride-2 conv -> h x w
        self.mask_downscaling = nn.Sequential(
            copy.deepcopy(conv1),
            rewrite_layernorm2d(ln1, conv1.out_channels, (mid_h, mid_w), layernorm2d),
            copy.deepcopy(act1),
            copy.deepcopy(conv2),
            rewrite_layernorm2d(ln2, conv2.out_channels, (eh, ew), layernorm2d),
            copy.deepcopy(act2),
            copy.deepcopy(conv3),
        )
        self.register_buffer("coord_scale", torch.tensor([float(iw), float(ih)]), persistent=False)  # x / W, y / H
        self.register_buffer("label_values", torch.tensor(POINT_LABELS), persistent=False)
        # Dense grid of cell centres normalised to [0, 1], as PositionEmbeddingRandom.forward builds it.
        ys = (torch.arange(eh, dtype=torch.float32) + 0.5) / eh
        xs = (torch.arange(ew, dtype=torch.float32) + 0.5) / ew
        grid = torch.stack([xs.expand(eh, ew), ys[:, None].expand(eh, ew)], dim=-1)  # h, w, 2 (x, y)
        self.register_buffer("dense_grid", grid.contiguous(), persistent=False)

    def label_table(self) -> torch.Tensor:
        """(5, C) embeddings added for labels -1, 0, 1, 2, 3."""
        rows = [self.not_a_point_embed.weight] + [emb.weight for emb in self.point_embeddings]
        return torch.cat(rows, dim=0)

    def embed_points(self, coords: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """(1, N, 2) pixel coordinates and (1, N) labels -> (1, N, C) sparse embeddings."""
        pe = self.pe_layer._pe_encoding((coords + 0.5) / self.coord_scale)  # 1, N, C
        labels = labels.unsqueeze(-1)  # 1, N, 1
        onehot = (labels == self.label_values).to(pe.dtype)  # 1, N, 5
        is_point = (labels != -1.0).to(pe.dtype)  # padding points carry no positional encoding
        return pe * is_point + torch.matmul(onehot, self.label_table())

    def embed_mask(self, mask_input: torch.Tensor, has_mask_input: torch.Tensor) -> torch.Tensor:
        """(1, 1, 4h, 4w) mask and (1,) flag -> (1, C, h, w) dense embeddings."""
        gate = has_mask_input.reshape(-1, 1, 1, 1)
        no_mask = self.no_mask_embed.weight.reshape(1, -1, 1, 1)
        return gate * self.mask_downscaling(mask_input) + (1.0 - gate) * no_mask

    def dense_pe(self) -> torch.Tensor:
        """(1, C, h, w) positional encoding of the embedding grid (``get_dense_pe``)."""
        return self.pe_layer._pe_encoding(self.dense_grid).permute(2, 0, 1).unsqueeze(0)


class ExportableAttention(nn.Module):
    """Official two-way-transformer ``Attention`` (with ``downsample_rate``), batch of one, static head sizes."""

    def __init__(self, official: nn.Module):
        super().__init__()
        self.q_proj = copy.deepcopy(official.q_proj)
        self.k_proj = copy.deepcopy(official.k_proj)
        self.v_proj = copy.deepcopy(official.v_proj)
        self.out_proj = copy.deepcopy(official.out_proj)
        self.num_heads = int(official.num_heads)
        self.internal_dim = int(official.internal_dim)
        self.head_dim = self.internal_dim // self.num_heads
        self.sqrt_head_dim = math.sqrt(self.head_dim)  # the official code divides by sqrt(c_per_head)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:  # 1, N, C_int -> 1, heads, N, hd
        return x.reshape(1, -1, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        q, k, v = self._heads(self.q_proj(q)), self._heads(self.k_proj(k)), self._heads(self.v_proj(v))
        attn = torch.matmul(q, k.transpose(-2, -1)) / self.sqrt_head_dim  # 1, heads, Nq, Nk
        out = torch.matmul(attn.softmax(dim=-1), v)  # 1, heads, Nq, hd
        return self.out_proj(out.transpose(1, 2).reshape(1, -1, self.internal_dim))


class ExportableTwoWayBlock(nn.Module):
    """Official ``TwoWayAttentionBlock``; parameter names unchanged."""

    def __init__(self, official: nn.Module):
        super().__init__()
        self.self_attn = ExportableAttention(official.self_attn)
        self.cross_attn_token_to_image = ExportableAttention(official.cross_attn_token_to_image)
        self.cross_attn_image_to_token = ExportableAttention(official.cross_attn_image_to_token)
        for name in ("norm1", "norm2", "norm3", "norm4", "mlp"):
            setattr(self, name, copy.deepcopy(getattr(official, name)))
        self.skip_first_layer_pe = bool(official.skip_first_layer_pe)

    def forward(self, queries: torch.Tensor, keys: torch.Tensor, query_pe: torch.Tensor, key_pe: torch.Tensor):
        if self.skip_first_layer_pe:
            queries = self.self_attn(queries, queries, queries)
        else:
            q = queries + query_pe
            queries = queries + self.self_attn(q, q, queries)
        queries = self.norm1(queries)
        q, k = queries + query_pe, keys + key_pe
        queries = self.norm2(queries + self.cross_attn_token_to_image(q, k, keys))
        queries = self.norm3(queries + self.mlp(queries))
        q, k = queries + query_pe, keys + key_pe
        keys = self.norm4(keys + self.cross_attn_image_to_token(k, q, queries))
        return queries, keys


class ExportableTwoWayTransformer(nn.Module):
    """Official ``TwoWayTransformer`` for a static embedding grid; parameter names unchanged."""

    def __init__(self, official: nn.Module, grid_hw: tuple[int, int]):
        super().__init__()
        self.layers = nn.ModuleList(ExportableTwoWayBlock(layer) for layer in official.layers)
        self.final_attn_token_to_image = ExportableAttention(official.final_attn_token_to_image)
        self.norm_final_attn = copy.deepcopy(official.norm_final_attn)
        self.embedding_dim = int(official.embedding_dim)
        self.grid_hw = grid_hw

    def forward(self, image_embedding: torch.Tensor, image_pe: torch.Tensor, point_embedding: torch.Tensor):
        c, (h, w) = self.embedding_dim, self.grid_hw
        keys = image_embedding.reshape(1, c, h * w).permute(0, 2, 1)  # 1, hw, C
        key_pe = image_pe.reshape(1, c, h * w).permute(0, 2, 1)  # 1, hw, C
        queries = point_embedding
        for layer in self.layers:
            queries, keys = layer(queries, keys, point_embedding, key_pe)
        q, k = queries + point_embedding, keys + key_pe
        queries = self.norm_final_attn(queries + self.final_attn_token_to_image(q, k, keys))
        return queries, keys


class ExportableMaskDecoder(nn.Module):
    """Official ``MaskDecoder.predict_masks`` for one prompt set; every mask token's output."""

    def __init__(self, official: nn.Module, grid_hw: tuple[int, int], layernorm2d: LayerNorm2dMode = "matmul"):
        super().__init__()
        self.transformer_dim = int(official.transformer_dim)
        self.num_mask_tokens = int(official.num_mask_tokens)
        self.grid_hw = grid_hw
        self.transformer = ExportableTwoWayTransformer(official.transformer, grid_hw)
        self.iou_token = copy.deepcopy(official.iou_token)
        self.mask_tokens = copy.deepcopy(official.mask_tokens)
        up1, ln, act1, up2, act2 = official.output_upscaling
        h, w = grid_hw
        self.output_upscaling = nn.Sequential(
            copy.deepcopy(up1),
            rewrite_layernorm2d(ln, up1.out_channels, (2 * h, 2 * w), layernorm2d),
            copy.deepcopy(act1),
            copy.deepcopy(up2),
            copy.deepcopy(act2),
        )
        self.upscaled_channels = int(up2.out_channels)
        self.output_hypernetworks_mlps = copy.deepcopy(official.output_hypernetworks_mlps)
        self.iou_prediction_head = copy.deepcopy(official.iou_prediction_head)

    def forward(self, image_embeddings: torch.Tensor, image_pe: torch.Tensor, sparse: torch.Tensor, dense: torch.Tensor):
        c, (h, w), k = self.transformer_dim, self.grid_hw, self.num_mask_tokens
        output_tokens = torch.cat([self.iou_token.weight, self.mask_tokens.weight], dim=0).unsqueeze(0)  # 1, 1+K, C
        tokens = torch.cat([output_tokens, sparse], dim=1)  # 1, 1+K+N, C
        hs, src = self.transformer(image_embeddings + dense, image_pe, tokens)
        iou_token_out = hs[:, 0, :]  # 1, C
        mask_tokens_out = hs[:, 1 : 1 + k, :]  # 1, K, C
        src = src.transpose(1, 2).reshape(1, c, h, w)
        upscaled = self.output_upscaling(src)  # 1, C/8, 4h, 4w
        hyper_in = torch.stack([mlp(mask_tokens_out[:, i, :]) for i, mlp in enumerate(self.output_hypernetworks_mlps)], dim=1)
        uc = self.upscaled_channels
        masks = torch.matmul(hyper_in, upscaled.reshape(1, uc, 16 * h * w)).reshape(1, k, 4 * h, 4 * w)
        return masks, self.iou_prediction_head(iou_token_out)


class ExportableSamDecoder(nn.Module):
    """Prompt encoder + mask decoder as one export-friendly module; see the module docstring.

    Parameter names are those of ``Sam`` (``prompt_encoder.*``, ``mask_decoder.*``), so a full SAM
    checkpoint's decoder keys load into it unchanged.
    """

    def __init__(self, prompt_encoder: nn.Module, mask_decoder: nn.Module, *,
                 layernorm2d: LayerNorm2dMode = "matmul", mask_output: MaskOutput = "all"):
        super().__init__()
        _check_official(prompt_encoder, mask_decoder)
        if mask_output not in MASK_OUTPUTS:
            raise InputError(f"unknown mask output '{mask_output}': use one of {', '.join(MASK_OUTPUTS)}")
        if layernorm2d not in ("matmul", "native"):
            raise InputError(f"unknown LayerNorm2d mode '{layernorm2d}': use 'matmul' or 'native'")
        self.prompt_encoder = ExportablePromptEncoder(prompt_encoder, layernorm2d)
        grid = self.prompt_encoder.image_embedding_size
        self.mask_decoder = ExportableMaskDecoder(mask_decoder, grid, layernorm2d)
        k = self.mask_decoder.num_mask_tokens
        # Decided here, not per call: which mask tokens the graph returns (official forward's slices).
        self.mask_output = mask_output
        self.mask_slice = {"all": (0, k), "multimask": (1, k), "single": (0, 1)}[mask_output]
        expected = {**{f"prompt_encoder.{n}": t for n, t in prompt_encoder.state_dict().items()},
                    **{f"mask_decoder.{n}": t for n, t in mask_decoder.state_dict().items()}}
        self.load_state_dict(expected, strict=True)  # proof: the official weights, under the official names
        self.eval()

    @property
    def num_outputs(self) -> int:
        return self.mask_slice[1] - self.mask_slice[0]

    def forward(self, image_embeddings: torch.Tensor, point_coords: torch.Tensor, point_labels: torch.Tensor,
                mask_input: torch.Tensor, has_mask_input: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        sparse = self.prompt_encoder.embed_points(point_coords, point_labels)
        dense = self.prompt_encoder.embed_mask(mask_input, has_mask_input)
        masks, iou = self.mask_decoder(image_embeddings, self.prompt_encoder.dense_pe(), sparse, dense)
        start, stop = self.mask_slice
        return masks[:, start:stop], iou[:, start:stop]


def _check_official(prompt_encoder: nn.Module, mask_decoder: nn.Module) -> None:
    """Refuse modules this rewrite was not written for, rather than rewrite them wrongly."""
    from segment_anything.modeling import MaskDecoder, PromptEncoder, TwoWayTransformer
    from segment_anything.modeling.transformer import Attention, TwoWayAttentionBlock

    if type(prompt_encoder) is not PromptEncoder:
        raise ExportError(f"expected segment_anything PromptEncoder, got {type(prompt_encoder).__name__}")
    if type(mask_decoder) is not MaskDecoder:
        raise ExportError(f"expected segment_anything MaskDecoder, got {type(mask_decoder).__name__}")
    transformer = mask_decoder.transformer
    if type(transformer) is not TwoWayTransformer:
        raise ExportError(f"expected TwoWayTransformer in the mask decoder, got {type(transformer).__name__}")
    for i, layer in enumerate(transformer.layers):
        attns = (layer.self_attn, layer.cross_attn_token_to_image, layer.cross_attn_image_to_token)
        if type(layer) is not TwoWayAttentionBlock or any(type(a) is not Attention for a in attns):
            raise ExportError(f"transformer.layers.{i} is not the official TwoWayAttentionBlock/Attention")
    if len(prompt_encoder.mask_downscaling) != 7 or len(mask_decoder.output_upscaling) != 5:
        raise ExportError("unexpected mask_downscaling/output_upscaling layout: this rewrite supports the official one")
    if tuple(prompt_encoder.image_embedding_size)[0] * 4 != tuple(prompt_encoder.mask_input_size)[0]:
        raise ExportError("unexpected mask_input_size: expected 4x the image embedding size")


def rewrite_sam_decoder(
    prompt_encoder: nn.Module,
    mask_decoder: nn.Module,
    layernorm2d: LayerNorm2dMode = "matmul",
    mask_output: MaskOutput = "all",
) -> ExportableSamDecoder:
    """Return an export-friendly copy of the official prompt encoder + mask decoder (arguments untouched).

    Args:
        prompt_encoder: ``segment_anything.modeling.PromptEncoder`` (official or fine-tuned).
        mask_decoder: ``segment_anything.modeling.MaskDecoder``.
        layernorm2d: LayerNorm2d form, as for the encoder.
        mask_output: ``"all"`` mask tokens (index 0 single-mask, 1.. multimask), ``"multimask"`` or ``"single"``.
    """
    return ExportableSamDecoder(prompt_encoder, mask_decoder, layernorm2d=layernorm2d, mask_output=mask_output)
