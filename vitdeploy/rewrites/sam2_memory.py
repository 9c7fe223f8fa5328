"""SAM 2's video memory as two export-friendly graphs, same weights as the official ``sam2`` modules.

**Memory attention** (``MemoryAttention`` with its ``RoPEAttention`` layers) conditions the current frame's features
on the memory bank. Official form and what changes:

* The rotary embedding is complex arithmetic (``torch.polar``, ``view_as_complex``), which neither ONNX exporter
  takes ("ScalarType ComplexFloat is an unexpected tensor scalar type"). Here it is real: for each pair (x0, x1)
  of a head's channels and its angle's (cos, sin), (x0 cos - x1 sin, x0 sin + x1 cos), the product
  ``view_as_complex(x) * polar(1, angle)`` computes; the cos/sin tables are the official ``compute_axial_cis``
  values (its real and imaginary parts), fixed at construction.
* The memory bank is a fixed-size input with a mask instead of a concatenation whose length changes per frame:
  ``memory``/``memory_pos`` (1, F*HW + P*T, mem_dim) hold F spatial-memory slots of HW tokens each, then P object
  pointers of T = C / mem_dim tokens each; ``memory_mask`` (1, F*HW + P*T) is 1 for the tokens in use. Masked
  tokens get an additive -1e9 before the softmax (exp underflows to exactly 0), so the result is the official
  one over the tokens in use. The rotary embedding of spatial-memory tokens depends only on their position in
  their frame (the official ``rope_k_repeat``), so a frame may sit in any slot; pointer tokens get none (the
  official ``num_k_exclude_rope``).
* The current frame comes in as the image encoder's ``image_embed`` (which carries ``no_mem_embed``: subtracted
  here to give the frame's own features), and its positional encoding (the neck's sine encoding of the grid) is a
  constant of the graph.

**Memory encoder** (``SAM2Base._encode_new_memory``): the frame's features and its predicted high-resolution mask
logits -> the memory features and their positional encoding. The per-call choices are inputs: ``binarize`` (1: the
mask came from clicks and the model binarizes those, ``binarize_mask_from_pts_for_mem_enc``; 0: sigmoid), and the
object score (no object: the ``no_obj_embed_spatial`` embedding is added), as the official code does.
"""

from __future__ import annotations

import copy
import math

import torch
from torch import nn

from vitdeploy.errors import ExportError

#: An additive attention bias that makes a masked token's softmax weight exactly 0 in float32.
MASKED = -1e9


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``view_as_real(view_as_complex(x.reshape(..., -1, 2)) * polar(1, angle)).flatten(-2)`` in real arithmetic."""
    pairs = x.reshape(*x.shape[:-1], -1, 2)
    x0, x1 = pairs[..., 0], pairs[..., 1]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)


class RealRoPEAttention(nn.Module):
    """Official ``RoPEAttention`` (batch of one), rotary embedding in real arithmetic, an optional additive key bias.

    ``rope_frames``: the keys are that many frames of ``len(cos)`` tokens each, rotated with the same angles per frame
    (``rope_k_repeat``), then tokens that are not rotated (object pointers, ``num_k_exclude_rope``); None: the keys
    are one frame, as the queries.
    """

    def __init__(self, official: nn.Module, rope_frames: int | None = None):
        super().__init__()
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            setattr(self, name, copy.deepcopy(getattr(official, name)))
        self.num_heads = int(official.num_heads)
        self.internal_dim = int(official.internal_dim)
        self.head_dim = self.internal_dim // self.num_heads
        self.rope_frames = rope_frames

    def _heads(self, x: torch.Tensor) -> torch.Tensor:  # 1, N, C_int -> 1, heads, N, hd
        return x.reshape(1, -1, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                bias: torch.Tensor | None = None) -> torch.Tensor:
        q, k, v = self._heads(self.q_proj(q)), self._heads(self.k_proj(k)), self._heads(self.v_proj(v))
        q = rotate(q, cos, sin)
        if self.rope_frames is None:
            k = rotate(k, cos, sin)
        else:  # frames x tokens, each frame with the same angles (broadcast, no repeated table), then the rest as is
            tokens = cos.shape[0]
            rotated = self.rope_frames * tokens
            framed = k[:, :, :rotated].reshape(1, self.num_heads, self.rope_frames, tokens, self.head_dim)
            k = torch.cat([rotate(framed, cos, sin).reshape(1, self.num_heads, rotated, self.head_dim), k[:, :, rotated:]],
                          dim=2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        if bias is not None:
            scores = scores + bias
        out = torch.matmul(scores.softmax(dim=-1), v)
        return self.out_proj(out.transpose(1, 2).reshape(1, -1, self.internal_dim))


class ExportableMemoryAttention(nn.Module):
    """``SAM2Base``'s memory attention for one frame, the bank as fixed slots with a mask (module docstring)."""

    def __init__(self, sam2: nn.Module, grid_hw: tuple[int, int], frame_slots: int, pointer_slots: int):
        super().__init__()
        from sam2.modeling.position_encoding import compute_axial_cis

        official = sam2.memory_attention
        layer0 = official.layers[0]
        self.grid_hw = grid_hw
        h, w = grid_hw
        self.hidden_dim = int(sam2.hidden_dim)
        self.mem_dim = int(sam2.mem_dim)
        self.tokens_per_pointer = self.hidden_dim // self.mem_dim if self.mem_dim < self.hidden_dim else 1
        self.frame_slots, self.pointer_slots = frame_slots, pointer_slots
        self.memory_tokens = frame_slots * h * w + pointer_slots * self.tokens_per_pointer
        self.pos_enc_at_input = bool(official.pos_enc_at_input)
        self.pos_enc_at_attn = bool(layer0.pos_enc_at_attn)
        self.pos_enc_at_cross_attn_queries = bool(layer0.pos_enc_at_cross_attn_queries)
        self.pos_enc_at_cross_attn_keys = bool(layer0.pos_enc_at_cross_attn_keys)
        self.no_mem_embed = copy.deepcopy(sam2.no_mem_embed)  # 1, 1, C
        with torch.no_grad():
            pos = sam2.image_encoder.neck.position_encoding(torch.zeros(1, self.hidden_dim, h, w))
        self.register_buffer("curr_pos", pos.flatten(2).transpose(1, 2).contiguous(), persistent=False)  # 1, HW, C

        self.layers = nn.ModuleList()
        angles = set()
        for official_layer in official.layers:
            layer = nn.Module()
            for name in ("norm1", "norm2", "norm3", "linear1", "linear2", "activation"):
                setattr(layer, name, copy.deepcopy(getattr(official_layer, name)))
            layer.self_attn = RealRoPEAttention(official_layer.self_attn)
            layer.cross_attn_image = RealRoPEAttention(official_layer.cross_attn_image, rope_frames=frame_slots)
            for attn in (official_layer.self_attn, official_layer.cross_attn_image):
                angles.add((attn.internal_dim // attn.num_heads, float(attn.compute_cis.keywords["theta"])))
            self.layers.append(layer)
        if len(angles) != 1:
            raise ExportError(f"the memory attention's rotary embeddings differ between attentions ({sorted(angles)}): "
                              "this rewrite shares one table")
        dim, theta = angles.pop()
        cis = compute_axial_cis(dim=dim, end_x=w, end_y=h, theta=theta)  # the official table: cos + i sin of each angle
        self.register_buffer("rope_cos", cis.real.float().contiguous(), persistent=False)
        self.register_buffer("rope_sin", cis.imag.float().contiguous(), persistent=False)
        self.norm = copy.deepcopy(official.norm)

    def forward(self, image_embed: torch.Tensor, memory: torch.Tensor, memory_pos: torch.Tensor,
                memory_mask: torch.Tensor) -> torch.Tensor:
        (h, w), c = self.grid_hw, self.hidden_dim
        curr = image_embed.reshape(1, c, h * w).transpose(1, 2) - self.no_mem_embed.reshape(1, 1, c)  # the frame's own
        pos = self.curr_pos
        bias = ((1.0 - memory_mask) * MASKED).reshape(1, 1, 1, -1)
        output = curr + 0.1 * pos if self.pos_enc_at_input else curr
        keys = memory + memory_pos if self.pos_enc_at_cross_attn_keys else memory
        for layer in self.layers:
            tgt2 = layer.norm1(output)
            q = tgt2 + pos if self.pos_enc_at_attn else tgt2
            output = output + layer.self_attn(q, q, tgt2, self.rope_cos, self.rope_sin)
            tgt2 = layer.norm2(output)
            q = tgt2 + pos if self.pos_enc_at_cross_attn_queries else tgt2
            output = output + layer.cross_attn_image(q, keys, memory, self.rope_cos, self.rope_sin, bias)
            output = output + layer.linear2(layer.activation(layer.linear1(layer.norm3(output))))
        return self.norm(output).transpose(1, 2).reshape(1, c, h, w)


class ExportableMemoryEncoder(nn.Module):
    """``SAM2Base._encode_new_memory`` for one frame (module docstring)."""

    def __init__(self, sam2: nn.Module):
        super().__init__()
        self.memory_encoder = copy.deepcopy(sam2.memory_encoder)
        self.no_mem_embed = copy.deepcopy(sam2.no_mem_embed)
        self.hidden_dim = int(sam2.hidden_dim)
        self.sigmoid_scale = float(sam2.sigmoid_scale_for_mem_enc)
        self.sigmoid_bias = float(sam2.sigmoid_bias_for_mem_enc)
        self.no_obj_embed_spatial = copy.deepcopy(sam2.no_obj_embed_spatial) if sam2.no_obj_embed_spatial is not None else None

    def forward(self, image_embed: torch.Tensor, pred_masks_high_res: torch.Tensor, object_score_logits: torch.Tensor,
                binarize: torch.Tensor):
        pix_feat = image_embed - self.no_mem_embed.reshape(1, self.hidden_dim, 1, 1)
        gate = binarize.reshape(1, 1, 1, 1)
        mask = gate * (pred_masks_high_res > 0).to(pix_feat.dtype) + (1.0 - gate) * torch.sigmoid(pred_masks_high_res)
        if self.sigmoid_scale != 1.0:
            mask = mask * self.sigmoid_scale
        if self.sigmoid_bias != 0.0:
            mask = mask + self.sigmoid_bias
        out = self.memory_encoder(pix_feat, mask, skip_mask_sigmoid=True)
        features, pos = out["vision_features"], out["vision_pos_enc"][0]
        if self.no_obj_embed_spatial is not None:
            appearing = (object_score_logits > 0).to(features.dtype).reshape(1, 1, 1, 1)
            features = features + (1.0 - appearing) * self.no_obj_embed_spatial.reshape(1, -1, 1, 1)
        return features, pos



class OfficialMemoryAttentionReference(nn.Module):
    """The official ``MemoryAttention`` behind the graph's inputs and outputs, for ``validate``: the tokens the mask
    keeps (whole frames, then pointers) concatenated as ``_prepare_memory_conditioned_features`` concatenates them."""

    def __init__(self, sam2: nn.Module, grid_hw: tuple[int, int], frame_slots: int, pointer_slots: int):
        super().__init__()
        self.model = sam2
        self.layout = ExportableMemoryAttention(sam2, grid_hw, frame_slots, pointer_slots)  # for its constants only

    def forward(self, image_embed, memory, memory_pos, memory_mask):
        lay, (h, w), c = self.layout, self.layout.grid_hw, self.layout.hidden_dim
        keep = memory_mask[0] > 0.5
        spatial = lay.frame_slots * h * w
        pointers = int(keep[spatial:].sum())
        raw = image_embed.reshape(1, c, h * w).permute(2, 0, 1) - self.model.no_mem_embed.reshape(1, 1, c)
        out = self.model.memory_attention(curr=[raw], curr_pos=[lay.curr_pos.transpose(0, 1)],
                                          memory=memory[0][keep][:, None], memory_pos=memory_pos[0][keep][:, None],
                                          num_obj_ptr_tokens=pointers)
        return out.permute(1, 2, 0).reshape(1, c, h, w)


class OfficialMemoryEncoderReference(nn.Module):
    """``SAM2Base._encode_new_memory`` itself, ``binarize`` standing for "clicks made this mask and the model binarizes
    those"."""

    def __init__(self, sam2: nn.Module):
        super().__init__()
        self.model = sam2
        self.model.binarize_mask_from_pts_for_mem_enc = True  # the graph's binarize input says when

    def forward(self, image_embed, pred_masks_high_res, object_score_logits, binarize):
        c, (h, w) = int(self.model.hidden_dim), image_embed.shape[-2:]
        raw = image_embed.reshape(1, c, h * w).permute(2, 0, 1) - self.model.no_mem_embed.reshape(1, 1, c)
        features, pos = self.model._encode_new_memory([raw], [(h, w)], pred_masks_high_res, object_score_logits,
                                                      is_mask_from_pts=bool(float(binarize.reshape(-1)[0]) > 0.5))
        return features, pos[0]


__all__ = ["ExportableMemoryAttention", "ExportableMemoryEncoder", "MASKED", "OfficialMemoryAttentionReference",
           "OfficialMemoryEncoderReference", "RealRoPEAttention", "rotate"]
