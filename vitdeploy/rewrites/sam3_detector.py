"""SAM 3's detector (the official ``Sam3Image.forward_grounding`` from the backbone's outputs) for export, same
weights, same numbers.

``forward(backbone_fpn_0, backbone_fpn_1, backbone_fpn_2, text_memory, text_padding, boxes, box_labels,
box_padding) -> (pred_logits, pred_boxes, pred_masks, presence_logit)``:

- ``backbone_fpn_*`` (B, d, 4g/2g/g, ...): the vision encoder's outputs (``SAM3VLBackbone.forward_image``'s
  ``backbone_fpn``); ``text_memory`` (B, L, d) and ``text_padding`` (B, L), True where the token is padding: the text
  encoder's output and ``tokens == 0`` (``language_features``/``language_mask``, batch first);
- ``boxes`` (B, N, 4), exemplar boxes as ``Sam3Processor.add_geometric_prompt`` takes them (cx, cy, w, h normalized
  to [0, 1]); ``box_labels`` (B, N) int64, 1 positive and 0 negative; ``box_padding`` (B, N), True for the slots past
  the prompt's boxes (a text-only prompt pads every slot). N is the recipe's ``max_boxes`` (the form
  traces with N symbolic as well);
- ``pred_logits`` (B, Q) and ``presence_logit`` (B, 1): ``Sam3Processor`` scores a query
  ``sigmoid(pred_logits) * sigmoid(presence_logit)``; ``pred_boxes`` (B, Q, 4) cx, cy, w, h in [0, 1];
  ``pred_masks`` (B, Q, 4g, 4g) mask logits: ``forward_grounding``'s ``pred_logits``, ``pred_boxes``,
  ``pred_masks`` and ``presence_logit_dec``.

What differs from the official modules, each for a stated reason, with the same arithmetic:

- the geometry encoder lays the prompt out statically: the boxes' slots, then the CLS token (the official
  ``concat_padded_sequences`` scatters the CLS token to just after the last valid box, an index that depends on the
  data). Every token after the geometry encoder is read through attention or a masked mean with the padding as
  the key mask, which no order of the keys changes, so the valid tokens are the same;
- the box pooling (``torchvision.ops.roi_align``, 7x7 bins, adaptive sampling, ``aligned=False``) is written as two
  matrix products of separable bilinear weights (:func:`roi_align_by_sampling`), every bin's samples up to the most
  a box inside the grid can need, the ones past a box's own count weighted 0: TensorRT-RTX has no ``RoiAlign``
  (TensorRT has it as a plugin only), and the count of samples per bin, which depends on the box, becomes a mask;
- the image's sine position table is computed once by the official ``PositionEmbeddingSine`` and kept as a constant;
- the decoder's loop is written out for one feature level of a known size: the box-relative position bias is
  computed over that grid (the official reads the size from a tensor and caches it by value), the multiplication of
  the reference boxes by valid ratios of one is dropped (exact), and only the last layer's outputs are scored (each
  layer's are independent of the others'); the presence logits are not clamped, as in the official (its
  ``clamp`` is not in place);
- the segmentation head's per-image indexing is dropped (one prompt per image) and its einsum is a matmul.

- ``nn.MultiheadAttention`` (whose export decomposition fails on the decoder's sequence-first views) is written as
  its arithmetic with the same ``in_proj``/``out_proj`` weights, in the encoder and decoder layers rewritten around
  it (:class:`PromptAttentionLayer`, :class:`QueryDecoderLayer`: the official ``forward_pre`` and ``forward``, eval).

The MLPs, ``DotProductScoring`` and ``PixelDecoder`` are the official modules, called as ``forward_grounding``
calls them.
"""

from __future__ import annotations

import copy
import math

import torch
from torch import nn

INPUT_NAMES = ("backbone_fpn_0", "backbone_fpn_1", "backbone_fpn_2", "text_memory", "text_padding", "boxes",
               "box_labels", "box_padding")
OUTPUT_NAMES = ("pred_logits", "pred_boxes", "pred_masks", "presence_logit")
#: The score of a padded key: the most negative finite FP16 value. Against any real score its softmax weight is 0 in
#: FP32 and FP16, as -inf's is (the official masks with -inf); finite, it keeps every activation finite, which
#: calibration checks and FP16 needs (every prompt has an unpadded key: the text's start token and the CLS token).
MASKED = -65504.0


def _pin_memory_shim():
    """The reference side's CPU shim: ``SequenceGeometryEncoder._encode_boxes`` pins a 4-value scale tensor before
    moving it to the boxes' device, which needs CUDA; on a machine without it, pinning returns the tensor itself
    (pinning changes where memory lives, never a value)."""
    import contextlib

    if torch.cuda.is_available():
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def unpinned():
        original = torch.Tensor.pin_memory
        torch.Tensor.pin_memory = lambda self, *args, **kwargs: self
        try:
            yield
        finally:
            torch.Tensor.pin_memory = original

    return unpinned()


def attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              key_padding_mask: torch.Tensor | None = None, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
    """``nn.MultiheadAttention(query, key, value, key_padding_mask, attn_mask)[0]`` in eval, as its arithmetic with
    its weights: tensors (L, B, E) sequence first, or (B, L, E) for a ``batch_first`` module; ``key_padding_mask``
    (B, S) True where a key is padding; ``attn_mask`` (B*heads, L, S) added to the scores."""
    if module.batch_first:
        query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
    batch, width, heads = query.shape[1], query.shape[2], int(module.num_heads)
    size = width // heads  # lengths stay -1 in reshapes: a dynamic count of prompt tokens needs no Shape op
    weight, bias = module.in_proj_weight, module.in_proj_bias
    q = nn.functional.linear(query, weight[:width], bias[:width])
    k = nn.functional.linear(key, weight[width:2 * width], bias[width:2 * width])
    v = nn.functional.linear(value, weight[2 * width:], bias[2 * width:])
    q = q.reshape(-1, batch * heads, size).transpose(0, 1)  # B*h, L, hd
    k = k.reshape(-1, batch * heads, size).transpose(0, 1)
    v = v.reshape(-1, batch * heads, size).transpose(0, 1)
    scores = torch.matmul(q * size ** -0.5, k.transpose(1, 2))  # B*h, L, S
    if attn_mask is not None:
        scores = scores + attn_mask
    if key_padding_mask is not None:
        padding = key_padding_mask.reshape(batch, 1, 1, -1).expand(batch, heads, 1, -1).reshape(batch * heads, 1, -1)
        scores = scores.masked_fill(padding, MASKED)
    out = torch.matmul(scores.softmax(dim=-1), v).transpose(0, 1).reshape(-1, batch, width)
    out = module.out_proj(out)
    return out.transpose(0, 1) if module.batch_first else out


def roi_align_by_sampling(features: torch.Tensor, boxes: torch.Tensor, size: int) -> torch.Tensor:
    """``torchvision.ops.roi_align(features, rows, size)`` (``spatial_scale=1``, ``sampling_ratio=-1``,
    ``aligned=False``) for (B, N, 4) boxes x0, y0, x1, y1 in feature pixels -> (B*N, C, size, size), image-major, as
    two matrix products.

    torchvision's kernel averages, per bin, ``ceil(roi / size)`` x ``ceil(roi / size)`` bilinear samples at
    ``start + bin * b + (i + 0.5) * b / count`` (``b = max(roi, 1) / size``); a sample outside [-1, H] x [-1, W] is 0,
    one inside is taken clamped to the map. Bilinear sampling is separable, so the average over a bin's samples is
    ``Wy @ F @ Wx^T`` with ``Wy`` (size, H) each bin's rows' weights summed over its samples (the hat function
    ``max(0, 1 - |y - r|)`` of the clamped position) and divided by their count, ``Wx`` the same for columns. Every
    bin takes the most samples a box inside the map needs (``ceil(H / size)``); those past the box's own count
    weigh 0."""
    batch, channels, height, width = features.shape
    most = max(math.ceil(height / size), math.ceil(width / size), 1)
    x0, y0, x1, y1 = boxes.unbind(-1)  # B, N

    def weights(start: torch.Tensor, extent: torch.Tensor, length: int) -> torch.Tensor:
        """(B, N, size, length): each bin's average of its samples' bilinear weights along one axis."""
        step = extent / size
        count = torch.ceil(extent / size)[..., None, None]
        bins = torch.arange(size, dtype=features.dtype).reshape(1, 1, size, 1)
        index = torch.arange(most, dtype=features.dtype).reshape(1, 1, 1, most)
        position = start[..., None, None] + bins * step[..., None, None] + (index + 0.5) * step[..., None, None] / count
        used = (index < count) & (position >= -1.0) & (position <= length)  # B, N, size, most
        cells = torch.arange(length, dtype=features.dtype)
        hat = torch.relu(1.0 - torch.abs(torch.clamp(position, 0.0, length - 1.0)[..., None] - cells))
        hat = torch.where(used[..., None], hat, 0.0)  # a select, not a cast: FP16 conversion keeps it typed
        return hat.sum(dim=3) / count

    rows = weights(y0, torch.clamp(y1 - y0, min=1.0), height)  # B, N, size, H
    cols = weights(x0, torch.clamp(x1 - x0, min=1.0), width)  # B, N, size, W
    pooled = torch.matmul(rows[:, :, None], torch.matmul(features[:, None], cols.transpose(-1, -2)[:, :, None]))
    return pooled.reshape(-1, channels, size, size)  # B*N, C, size, size

class PromptAttentionLayer(nn.Module):
    """The official ``TransformerEncoderLayer.forward_pre`` (eval, no DAC): self-attention, cross-attention to a
    memory, feed-forward, each pre-normed; the fusion encoder's and the geometry encoder's layers."""

    def __init__(self, official: nn.Module):
        super().__init__()
        if not official.pre_norm or official.pos_enc_at_cross_attn_queries:
            raise ValueError("SAM 3's encoder layers are pre-norm with no position on the cross-attention queries")
        self.pos_at_attention = bool(official.pos_enc_at_attn)
        self.pos_at_keys = bool(official.pos_enc_at_cross_attn_keys)
        for name in ("self_attn", "cross_attn_image", "linear1", "linear2", "norm1", "norm2", "norm3"):
            setattr(self, name, copy.deepcopy(getattr(official, name)))
        self.activation = official.activation

    def forward(self, tgt, memory, tgt_key_padding_mask=None, memory_key_padding_mask=None, pos=None, query_pos=None):
        tgt2 = self.norm1(tgt)
        q = tgt2 + query_pos if self.pos_at_attention else tgt2
        tgt = tgt + attention(self.self_attn, q, q, tgt2, key_padding_mask=tgt_key_padding_mask)
        tgt2 = self.norm2(tgt)
        key = memory + pos if self.pos_at_keys else memory
        tgt = tgt + attention(self.cross_attn_image, tgt2, key, memory, key_padding_mask=memory_key_padding_mask)
        return tgt + self.linear2(self.activation(self.linear1(self.norm3(tgt))))


class QueryDecoderLayer(nn.Module):
    """The official ``TransformerDecoderLayer.forward`` (eval, no DAC, with the presence token): self-attention of
    the queries, cross-attention to the prompt, then to the image with the box bias, feed-forward, each post-normed."""

    def __init__(self, official: nn.Module):
        super().__init__()
        if not official.use_text_cross_attention:
            raise ValueError("SAM 3's decoder layers attend to the prompt")
        for name in ("self_attn", "norm2", "ca_text", "catext_norm", "cross_attn", "norm1", "linear1", "linear2",
                     "norm3"):
            setattr(self, name, copy.deepcopy(getattr(official, name)))
        self.activation = official.activation

    def forward(self, tgt, query_pos, presence, memory_text, text_padding, memory, memory_pos, box_bias):
        tgt = torch.cat([presence, tgt], dim=0)
        query_pos = torch.cat([torch.zeros_like(presence), query_pos], dim=0)
        q = tgt + query_pos
        tgt = self.norm2(tgt + attention(self.self_attn, q, q, tgt))
        tgt = self.catext_norm(tgt + attention(self.ca_text, tgt + query_pos, memory_text, memory_text,
                                               key_padding_mask=text_padding))
        box_bias = torch.cat([torch.zeros_like(box_bias[:, :1, :]), box_bias], dim=1)
        tgt = self.norm1(tgt + attention(self.cross_attn, tgt + query_pos, memory + memory_pos, memory,
                                         attn_mask=box_bias))
        tgt = self.norm3(tgt + self.linear2(self.activation(self.linear1(tgt))))
        return tgt[1:], tgt[:1]


class Sam3Detector(nn.Module):
    """The official ``Sam3Image.forward_grounding`` on the graph's inputs (the reference side), one prompt per image,
    as ``Sam3Processor`` calls it (``backbone_out`` with the vision and text features, a ``Prompt`` of boxes)."""

    def __init__(self, detector: nn.Module, position_encoding: nn.Module):
        super().__init__()
        self.detector = detector
        self.position_encoding = position_encoding

    def forward(self, fpn0, fpn1, fpn2, text_memory, text_padding, boxes, box_labels, box_padding):
        from sam3.model.data_misc import FindStage
        from sam3.model.geometry_encoders import Prompt

        fpn = [fpn0, fpn1, fpn2]
        batch = fpn0.shape[0]
        ids = torch.arange(batch)
        backbone_out = {"backbone_fpn": fpn, "vision_pos_enc": [self.position_encoding(x) for x in fpn],
                        "language_features": text_memory.transpose(0, 1), "language_mask": text_padding}
        find = FindStage(img_ids=ids, text_ids=ids, input_boxes=None, input_boxes_mask=None, input_boxes_label=None,
                         input_points=None, input_points_mask=None)
        prompt = Prompt(box_embeddings=boxes.transpose(0, 1), box_mask=box_padding,
                        box_labels=box_labels.transpose(0, 1))
        with _pin_memory_shim():
            out = self.detector.forward_grounding(backbone_out=backbone_out, find_input=find, geometric_prompt=prompt,
                                                  find_target=None)
        return out["pred_logits"].squeeze(-1), out["pred_boxes"], out["pred_masks"], out["presence_logit_dec"]


class StaticGeometryEncoder(nn.Module):
    """``SequenceGeometryEncoder`` for boxes only (``Sam3Image`` ignores points), laid out as [boxes, CLS]."""

    def __init__(self, official: nn.Module, grid: int):
        super().__init__()
        if official.encode_boxes_as_points or official.mask_encoder is not None or official.cls_embed is None:
            raise ValueError("SAM 3's geometry encoder projects, pools and position-encodes boxes, with a CLS token")
        self.grid = int(grid)
        self.d_model = int(official.d_model)
        self.roi_size = int(official.roi_size)
        encoding = official.pos_enc  # PositionEmbeddingSine._encode_xy's table, computed once
        self.position_scale = float(encoding.scale)
        steps = torch.arange(encoding.num_pos_feats, dtype=torch.float32)
        self.register_buffer("position_dims", encoding.temperature ** (2 * (steps // 2) / encoding.num_pos_feats),
                             persistent=False)
        for name in ("label_embed", "cls_embed", "boxes_direct_project", "boxes_pool_project", "boxes_pos_enc_project",
                     "final_proj", "norm", "img_pre_norm", "encode_norm"):
            setattr(self, name, copy.deepcopy(getattr(official, name)))
        self.encode = nn.ModuleList(PromptAttentionLayer(layer) for layer in official.encode)

    def encode_boxes(self, boxes: torch.Tensor) -> torch.Tensor:
        """``PositionEmbeddingSine.encode_boxes`` on (N, B, 4) boxes, without its flattening (its ``len`` checks fix
        the number of boxes when traced): sine/cosine of the centre, then the height and width."""
        cx, cy, w, h = boxes.unbind(-1)

        def sines(value: torch.Tensor) -> torch.Tensor:
            angles = (value * self.position_scale)[..., None] / self.position_dims
            return torch.stack((angles[..., 0::2].sin(), angles[..., 1::2].cos()), dim=-1).flatten(-2)

        return torch.cat((sines(cy), sines(cx), h[..., None], w[..., None]), dim=-1)

    def forward(self, img, img_pos, boxes, box_labels, box_padding):
        """img, img_pos: (g*g, B, d) sequence first; boxes (B, N, 4) -> tokens (N+1, B, d) and their padding (B, N+1)."""
        from sam3.model.box_ops import box_cxcywh_to_xyxy
        batch, g, d = boxes.shape[0], self.grid, self.d_model  # the number of boxes stays symbolic (-1)
        boxes = boxes.transpose(0, 1)  # N, B, 4 (sequence first, as the official)
        embed = self.boxes_direct_project(boxes)
        feats = self.img_pre_norm(img).permute(1, 2, 0).reshape(batch, d, g, g)
        corners = box_cxcywh_to_xyxy(boxes) * float(g)  # the grid is square: W == H
        pooled = roi_align_by_sampling(feats, corners.transpose(0, 1), self.roi_size)  # B*N, d, r, r
        pooled = self.boxes_pool_project(pooled)
        embed = embed + pooled.reshape(batch, -1, d).transpose(0, 1)
        embed = embed + self.boxes_pos_enc_project(self.encode_boxes(boxes))
        tokens = self.label_embed(box_labels.transpose(0, 1).long()) + embed
        cls = self.cls_embed.weight.reshape(1, 1, d).expand(1, batch, d)
        tokens = torch.cat([tokens, cls], dim=0)
        padding = torch.cat([box_padding, torch.zeros_like(box_padding[:, :1])], dim=1)
        tokens = self.norm(self.final_proj(tokens))
        for layer in self.encode:
            tokens = layer(tgt=tokens, memory=img, tgt_key_padding_mask=padding, pos=img_pos)
        return self.encode_norm(tokens), padding


class ExportableSam3Detector(nn.Module):
    """The export-friendly form of ``Sam3Image.forward_grounding`` for a ``grid`` x ``grid`` image; see the module
    docstring."""

    def __init__(self, official: nn.Module, position_encoding: nn.Module, grid: int):
        super().__init__()
        official = official.eval()
        decoder = official.transformer.decoder
        if official.num_feature_levels != 1 or decoder.boxRPB != "log" or decoder.presence_token is None:
            raise ValueError("SAM 3's detector reads one feature level, with the log box bias and a presence token")
        if official.supervise_joint_box_scores or not official.use_dot_prod_scoring:
            raise ValueError("SAM 3's detector scores queries by dot product with the prompt")
        self.grid = g = int(grid)
        self.d_model = d = int(official.hidden_dim)
        with torch.no_grad():
            table = position_encoding(torch.zeros(1, d, g, g))  # 1, d, g, g
        self.register_buffer("image_positions", table.flatten(2).permute(2, 0, 1).clone(), persistent=False)
        coords = torch.arange(0, g, dtype=torch.float32) / g  # TransformerDecoder._get_coords, H == W
        self.register_buffer("coords", coords, persistent=False)
        self.geometry = StaticGeometryEncoder(official.geometry_encoder, g)
        self.fusion_layers = nn.ModuleList(PromptAttentionLayer(layer) for layer in official.transformer.encoder.layers)
        self.decoder_layers = nn.ModuleList(QueryDecoderLayer(layer) for layer in decoder.layers)
        for name in ("norm", "bbox_embed", "query_embed", "reference_points", "presence_token", "presence_token_head",
                     "presence_token_out_norm", "ref_point_head", "boxRPB_embed_x", "boxRPB_embed_y"):
            setattr(self, name, copy.deepcopy(getattr(decoder, name)))
        self.num_heads = int(decoder.layers[0].cross_attn.num_heads)
        self.num_queries = int(decoder.num_queries)
        self.scoring = copy.deepcopy(official.dot_prod_scoring)
        head = official.segmentation_head
        self.cross_attn_norm = copy.deepcopy(head.cross_attn_norm)
        self.cross_attend_prompt = copy.deepcopy(head.cross_attend_prompt)
        self.pixel_decoder = copy.deepcopy(head.pixel_decoder)
        self.instance_seg_head = copy.deepcopy(head.instance_seg_head)
        self.mask_embed = copy.deepcopy(head.mask_predictor.mask_embed)

    def box_bias(self, reference: torch.Tensor) -> torch.Tensor:
        """``TransformerDecoder._get_rpb_matrix`` ("log") for the grid: (Q, B, 4) boxes -> (B*heads, Q, g*g)."""
        import math

        from sam3.model.box_ops import box_cxcywh_to_xyxy

        g = self.grid
        corners = box_cxcywh_to_xyxy(reference).transpose(0, 1)  # B, Q, 4
        batch, queries = corners.shape[0], corners.shape[1]
        flat = corners.reshape(-1, 1, 4)
        deltas_y = (self.coords.view(1, -1, 1) - flat[:, :, 1:4:2]).view(batch, queries, -1, 2)
        deltas_x = (self.coords.view(1, -1, 1) - flat[:, :, 0:3:2]).view(batch, queries, -1, 2)
        deltas_x = deltas_x * 8
        deltas_x = torch.sign(deltas_x) * torch.log2(torch.abs(deltas_x) + 1.0) / math.log2(8)
        deltas_y = deltas_y * 8
        deltas_y = torch.sign(deltas_y) * torch.log2(torch.abs(deltas_y) + 1.0) / math.log2(8)
        bias = self.boxRPB_embed_y(deltas_y).unsqueeze(3) + self.boxRPB_embed_x(deltas_x).unsqueeze(2)
        return bias.flatten(2, 3).permute(0, 3, 1, 2).reshape(batch * self.num_heads, queries, g * g)

    def forward(self, fpn0, fpn1, fpn2, text_memory, text_padding, boxes, box_labels, box_padding):
        from sam3.model.model_misc import gen_sineembed_for_position, inverse_sigmoid

        batch, d, g = fpn2.shape[0], self.d_model, self.grid
        img = fpn2.flatten(2).permute(2, 0, 1)  # g*g, B, d
        img_pos = self.image_positions.expand(g * g, batch, d)
        geometry, geometry_padding = self.geometry(img, img_pos, boxes, box_labels, box_padding)
        prompt = torch.cat([text_memory.transpose(0, 1), geometry], dim=0)  # P, B, d
        prompt_padding = torch.cat([text_padding, geometry_padding], dim=1)

        # The fusion encoder (TransformerEncoderFusion): image tokens batch first, the prompt as memory.
        memory, memory_batch = img.transpose(0, 1), prompt.transpose(0, 1)
        pos_batch = img_pos.transpose(0, 1)
        for layer in self.fusion_layers:
            memory = layer(tgt=memory, memory=memory_batch, memory_key_padding_mask=prompt_padding, query_pos=pos_batch)
        memory = memory.transpose(0, 1)  # g*g, B, d

        # The decoder (TransformerDecoder.forward, one level, eval: no o2m queries).
        output = self.query_embed.weight.unsqueeze(1).repeat(1, batch, 1)
        reference = self.reference_points.weight.unsqueeze(1).repeat(1, batch, 1).sigmoid()
        presence = self.presence_token.weight[None].expand(1, batch, -1)
        last = len(self.decoder_layers) - 1
        for index, layer in enumerate(self.decoder_layers):
            sine = gen_sineembed_for_position(reference, d)
            output, presence = layer(output, self.ref_point_head(sine), presence, prompt, prompt_padding, memory, img_pos,
                                     self.box_bias(reference))
            normed = self.norm(output)
            refined = (self.bbox_embed(normed) + inverse_sigmoid(reference)).sigmoid()
            if index != last:
                reference = refined
        queries = normed.transpose(0, 1)  # B, Q, d
        presence_logit = self.presence_token_head(self.presence_token_out_norm(presence)).squeeze(-1).transpose(0, 1)
        pred_logits = self.scoring(queries[None], prompt, prompt_padding)[0].squeeze(-1)
        pred_boxes = refined.transpose(0, 1)

        # The segmentation head (UniversalSegmentationHead, encoder inputs, prompt cross-attention).
        attended = attention(self.cross_attend_prompt, self.cross_attn_norm(memory), prompt, prompt,
                             key_padding_mask=prompt_padding)
        memory = attended + memory
        encoded = memory.permute(1, 2, 0).reshape(batch, d, g, g)
        pixels = self.instance_seg_head(self.pixel_decoder([fpn0, fpn1, encoded]))  # B, d, 4g, 4g
        height, width = pixels.shape[-2], pixels.shape[-1]
        masks = torch.matmul(self.mask_embed(queries), pixels.flatten(2)).reshape(batch, -1, height, width)
        return pred_logits, pred_boxes, masks, presence_logit


def rewrite_sam3_detector(official: nn.Module, position_encoding: nn.Module, grid: int) -> ExportableSam3Detector:
    """The export-friendly copy (the original is left unchanged)."""
    return ExportableSam3Detector(official, position_encoding, grid).eval()


__all__ = ["ExportableSam3Detector", "INPUT_NAMES", "OUTPUT_NAMES", "PromptAttentionLayer", "QueryDecoderLayer",
           "Sam3Detector", "StaticGeometryEncoder", "attention", "rewrite_sam3_detector", "roi_align_by_sampling"]
