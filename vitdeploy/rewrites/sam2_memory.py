"""SAM 2's video memory as two export-friendly graphs, same weights as the official ``sam2`` modules.

**Memory attention** (``SAM2Base._prepare_memory_conditioned_features`` for a frame that is not an initial
conditioning frame: the bank's temporal encodings and object pointers, then ``MemoryAttention``) conditions the current
frame's features on the memory bank. The official form and what changes:

* The rotary embedding is complex arithmetic (``torch.polar``, ``view_as_complex``), which neither ONNX exporter
  takes ("ScalarType ComplexFloat is an unexpected tensor scalar type"). Here it is real: for each pair (x0, x1)
  of a head's channels and its angle's (cos, sin), (x0 cos - x1 sin, x0 sin + x1 cos), the product
  ``view_as_complex(x) * polar(1, angle)`` computes; the cos/sin tables are the official ``compute_axial_cis``
  values (its real and imaginary parts), fixed at construction.
* The bank is two inputs whose lengths are dynamic, each with a mask, instead of one concatenation built in Python:
  ``memory_features`` (1, F, mem_dim, h, w), the memory encoder's ``maskmem_features`` of F frames in any order,
  with ``memory_tpos`` (1, F), each frame's official ``t_pos`` (0: a conditioning frame; 1..num_maskmem-1: a recent
  frame, the most recent the largest), and ``pointer_tokens`` (1, P, C), the SAM output tokens the object pointers
  are made from, with ``pointer_presence`` (1, P) (the official ``lambda_is_obj_appearing``) and ``pointer_tpos``
  (1, P) (the official signed frame distance divided by ``max_obj_ptrs_in_encoder - 1``). ``memory_mask`` (1, F) and
  ``pointer_mask`` (1, P) are 1 for what is in use: masked tokens get an additive -1e9 before the softmax (exp
  underflows to exactly 0), so a fixed-size bank (a static TensorRT engine) gives the result over the entries in use.
* The constants of the bank are in the graph: the memory's sine position encoding (the same for every frame, the
  official ``maskmem_pos_enc``), ``maskmem_tpos_enc`` gathered by ``memory_tpos``, ``obj_ptr_proj`` with the
  no-object mixing of ``_forward_sam_heads`` (``fixed_no_obj_ptr``), and the pointers' temporal encoding
  (``get_1d_sine_pe`` then ``obj_ptr_tpos_proj``), each pointer split into C / mem_dim tokens as officially. The
  rotary embedding of frame tokens depends only on their place in their frame (the official ``rope_k_repeat``), so a
  frame may sit anywhere; pointer tokens get none (the official ``num_k_exclude_rope``).
* Two rearrangements that change the work, not the numbers (the same sums in another order, float32):
  the cross-attention's values are weighted in the bank's own width (``mem_dim``, 64) and ``v_proj`` applied after
  the sum, ``softmax(S) @ (M W^T + b) = (softmax(S) @ M) W^T + b`` as each row of ``softmax(S)`` sums to 1, 4x fewer
  multiply-adds for the product with ~28,700 bank tokens; and queries' and keys' channels are stored in halves
  (``q_proj``/``k_proj`` rows permuted, :mod:`vitdeploy.rewrites.rotary`), which leaves every ``q . k`` as it is
  and makes the rotation two slices and one concatenation instead of an interleave (a slow, unfused copy in
  OpenVINO).
* The current frame comes in as the image encoder's ``image_embed`` (which carries ``no_mem_embed``: subtracted
  here to give the frame's own features), and its positional encoding (the neck's sine encoding of the grid) is a
  constant of the graph.

**Memory encoder** (``SAM2Base._encode_new_memory``): the frame's features and its predicted mask -> the memory
features and their positional encoding. The mask comes in as the decoder's low-resolution logits (1, 1, 4h, 4w) and
is upsampled to the image size in the graph (bilinear, ``align_corners=False``), as ``_forward_sam_heads`` and
``propagate_in_video_preflight`` upsample it before the memory encoder: a 16x smaller input. The per-call choices are
inputs: ``binarize`` (1: the mask came from clicks and the model binarizes those,
``binarize_mask_from_pts_for_mem_enc``; 0: sigmoid) and the object score (no object: the ``no_obj_embed_spatial``
embedding is added), as the official code does.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from vitdeploy.errors import ExportError
from vitdeploy.rewrites.rotary import deinterleave_order, rotate_halves

#: An additive attention bias that makes a masked token's softmax weight exactly 0 in float32.
MASKED = -1e9


class RealRoPEAttention(nn.Module):
    """Official ``RoPEAttention`` (batch of one), rotary embedding in real arithmetic.

    Self-attention: ``forward(q, k, v, cos, sin)`` rotates queries and keys (one frame each). Cross-attention to the
    bank: ``forward(q, frame_k, frame_v, cos, sin, extra_k, extra_v, bias)`` rotates the frame keys frame by frame with
    the same angles (``rope_k_repeat``; any number of frames of ``len(cos)`` tokens) and appends the extra keys
    (object pointers) unrotated, as the official ``num_k_exclude_rope`` does; ``bias`` is added to the scores.
    """

    def __init__(self, official: nn.Module):
        super().__init__()
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            setattr(self, name, copy.deepcopy(getattr(official, name)))
        self.num_heads = int(official.num_heads)
        self.internal_dim = int(official.internal_dim)
        self.head_dim = self.internal_dim // self.num_heads
        #: weight the bank's values before ``v_proj`` where they are narrower than a head (module docstring)
        self.values_in_bank_width = int(official.kv_in_dim) < self.head_dim
        rows = deinterleave_order(self.num_heads, self.head_dim)  # queries' and keys' channels in halves
        with torch.no_grad():
            for proj in (self.q_proj, self.k_proj):
                proj.weight.copy_(proj.weight[rows])
                if proj.bias is not None:
                    proj.bias.copy_(proj.bias[rows])

    def _heads(self, x: torch.Tensor) -> torch.Tensor:  # 1, N, C_int -> 1, heads, N, hd
        return x.reshape(1, -1, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                extra_k: torch.Tensor | None = None, extra_v: torch.Tensor | None = None,
                bias: torch.Tensor | None = None) -> torch.Tensor:
        q = rotate_halves(self._heads(self.q_proj(q)), cos, sin)
        k = self._heads(self.k_proj(k))
        if extra_k is None:  # self-attention: one frame
            k = rotate_halves(k, cos, sin)
        else:  # frames x tokens, each frame with the same angles (broadcast, no repeated table)
            framed = k.reshape(1, self.num_heads, -1, cos.shape[0], self.head_dim)  # 1, heads, F, HW, hd
            k = rotate_halves(framed, cos, sin).reshape(1, self.num_heads, -1, self.head_dim)
            k = torch.cat([k, self._heads(self.k_proj(extra_k))], dim=2)
            v = torch.cat([v, extra_v], dim=1)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        if bias is not None:
            scores = scores + bias
        probs = scores.softmax(dim=-1)
        if extra_k is not None and self.values_in_bank_width:
            out = self.project_values(torch.matmul(probs, v.unsqueeze(1)))  # 1, heads, N, kv_in -> hd
        else:
            out = torch.matmul(probs, self._heads(self.v_proj(v)))
        return self.out_proj(out.transpose(1, 2).reshape(1, -1, self.internal_dim))

    def project_values(self, mixed: torch.Tensor) -> torch.Tensor:
        """(1, heads, N, kv_in) -> (1, heads, N, hd): each head's rows of ``v_proj`` on the softmax-weighted bank."""
        weight = self.v_proj.weight.reshape(self.num_heads, self.head_dim, -1)  # heads, hd, kv_in
        out = torch.matmul(mixed, weight.transpose(1, 2).unsqueeze(0))
        if self.v_proj.bias is None:
            return out
        return out + self.v_proj.bias.reshape(1, self.num_heads, 1, self.head_dim)


def sine_pe_divisors(dim: int, temperature: float = 10000.0) -> torch.Tensor:
    """The divisors of the official ``get_1d_sine_pe(pos, dim)``, computed as it computes them (float32)."""
    pe_dim = dim // 2
    dim_t = torch.arange(pe_dim, dtype=torch.float32)
    return temperature ** (2 * (dim_t // 2) / pe_dim)


def check_tracking_config(sam2: nn.Module) -> None:
    """Refuse SAM 2 configurations the video graphs and runtime do not reproduce (every official 2 / 2.1 config
    passes): they would need paths the official configs never take."""
    needs = {
        "num_maskmem > 0 (a memory bank)": int(sam2.num_maskmem) > 0,
        "use_obj_ptrs_in_encoder (object pointers)": bool(sam2.use_obj_ptrs_in_encoder),
        "directly_add_no_mem_embed (initial frames without memory attention)": bool(sam2.directly_add_no_mem_embed),
        "fixed_no_obj_ptr when pred_obj_scores": bool(sam2.fixed_no_obj_ptr) or not bool(sam2.pred_obj_scores),
        "use_high_res_features_in_sam": bool(sam2.use_high_res_features_in_sam),
    }
    missing = [name for name, ok in needs.items() if not ok]
    if missing:
        raise ExportError(f"this SAM 2 configuration is not supported by the video graphs (it lacks {', '.join(missing)}):"
                          " every official sam2 / sam2.1 config has them")


class ExportableMemoryAttention(nn.Module):
    """``SAM2Base``'s memory conditioning for one frame: the bank's encodings and memory attention (module docstring)."""

    def __init__(self, sam2: nn.Module, grid_hw: tuple[int, int]):
        super().__init__()
        check_tracking_config(sam2)
        official = sam2.memory_attention
        layer0 = official.layers[0]
        self.grid_hw = grid_hw
        h, w = grid_hw
        self.hidden_dim = int(sam2.hidden_dim)
        self.mem_dim = int(sam2.mem_dim)
        self.tokens_per_pointer = self.hidden_dim // self.mem_dim if self.mem_dim < self.hidden_dim else 1
        self.num_maskmem = int(sam2.num_maskmem)
        self.pos_enc_at_input = bool(official.pos_enc_at_input)
        self.pos_enc_at_attn = bool(layer0.pos_enc_at_attn)
        self.pos_enc_at_cross_attn_queries = bool(layer0.pos_enc_at_cross_attn_queries)
        self.pos_enc_at_cross_attn_keys = bool(layer0.pos_enc_at_cross_attn_keys)
        self.no_mem_embed = copy.deepcopy(sam2.no_mem_embed)  # 1, 1, C
        with torch.no_grad():
            pos = sam2.image_encoder.neck.position_encoding(torch.zeros(1, self.hidden_dim, h, w))
            memory_pos = sam2.memory_encoder.position_encoding(torch.zeros(1, self.mem_dim, h, w))
        self.register_buffer("curr_pos", pos.flatten(2).transpose(1, 2).contiguous(), persistent=False)  # 1, HW, C
        self.register_buffer("memory_pos", memory_pos.flatten(2).transpose(1, 2).contiguous(), persistent=False)  # 1, HW, m

        # the bank's encodings (official parameter names, so a state dict proves the weights)
        self.maskmem_tpos_enc = copy.deepcopy(sam2.maskmem_tpos_enc)  # num_maskmem, 1, 1, mem_dim
        self.obj_ptr_proj = copy.deepcopy(sam2.obj_ptr_proj)
        self.obj_ptr_tpos_proj = copy.deepcopy(sam2.obj_ptr_tpos_proj)
        self.pred_obj_scores = bool(sam2.pred_obj_scores)
        if self.pred_obj_scores:
            self.no_obj_ptr = copy.deepcopy(sam2.no_obj_ptr)  # 1, C
        self.add_tpos_enc_to_obj_ptrs = bool(sam2.add_tpos_enc_to_obj_ptrs)
        tpos_dim = self.hidden_dim if bool(sam2.proj_tpos_enc_in_obj_ptrs) else self.mem_dim
        self.register_buffer("tpos_divisors", sine_pe_divisors(tpos_dim), persistent=False)

        self.layers = nn.ModuleList()
        angles = set()
        for official_layer in official.layers:
            layer = nn.Module()
            for name in ("norm1", "norm2", "norm3", "linear1", "linear2", "activation"):
                setattr(layer, name, copy.deepcopy(getattr(official_layer, name)))
            layer.self_attn = RealRoPEAttention(official_layer.self_attn)
            layer.cross_attn_image = RealRoPEAttention(official_layer.cross_attn_image)
            for attn in (official_layer.self_attn, official_layer.cross_attn_image):
                angles.add((attn.internal_dim // attn.num_heads, float(attn.compute_cis.keywords["theta"])))
            self.layers.append(layer)
        if len(angles) != 1:
            raise ExportError(f"the memory attention's rotary embeddings differ between attentions ({sorted(angles)}): "
                              "this rewrite shares one table")
        # the official table, cos + i sin of each angle, by the official package's own compute_axial_cis
        cis = official.layers[0].self_attn.compute_cis(end_x=w, end_y=h)
        self.register_buffer("rope_cos", cis.real.float().contiguous(), persistent=False)
        self.register_buffer("rope_sin", cis.imag.float().contiguous(), persistent=False)
        self.norm = copy.deepcopy(official.norm)

    def frame_bank(self, memory_features: torch.Tensor, memory_tpos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(1, F*HW, m) memory tokens and their positions: each frame's features, the sine encoding plus its temporal
        encoding ``maskmem_tpos_enc[num_maskmem - t_pos - 1]``."""
        m = self.mem_dim
        tokens = memory_features.flatten(3).transpose(2, 3).reshape(1, -1, m)  # 1, F*HW, m (frame by frame, row-major)
        tpos = self.maskmem_tpos_enc.reshape(self.num_maskmem, m)[self.num_maskmem - 1 - memory_tpos[0]]  # F, m
        pos = (self.memory_pos + tpos.unsqueeze(1)).reshape(1, -1, m)  # F, HW, m -> 1, F*HW, m
        return tokens, pos

    def pointer_bank(self, pointer_tokens: torch.Tensor, pointer_presence: torch.Tensor,
                     pointer_tpos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(1, P*T, m) pointer tokens and their positions: ``obj_ptr_proj`` with the no-object mixing, the temporal
        sine encoding projected, each pointer split into T = C / m tokens (module docstring)."""
        m, per = self.mem_dim, self.tokens_per_pointer
        pointers = self.obj_ptr_proj(pointer_tokens)  # 1, P, C
        if self.pred_obj_scores:  # fixed_no_obj_ptr: lambda * ptr + (1 - lambda) * no_obj_ptr
            presence = pointer_presence.unsqueeze(-1)
            pointers = presence * pointers + (1.0 - presence) * self.no_obj_ptr
        if self.add_tpos_enc_to_obj_ptrs:
            angles = pointer_tpos.unsqueeze(-1) / self.tpos_divisors  # 1, P, tpos_dim / 2
            pos = self.obj_ptr_tpos_proj(torch.cat([angles.sin(), angles.cos()], dim=-1))  # 1, P, m
        else:
            pos = torch.zeros_like(pointers[..., :m])
        tokens = pointers.reshape(1, -1, m)  # 1, P*T, m: pointer by pointer, its C split in T pieces
        pos = pos.unsqueeze(2).expand(-1, -1, per, -1).reshape(1, -1, m)
        return tokens, pos

    def forward(self, image_embed: torch.Tensor, memory_features: torch.Tensor, memory_tpos: torch.Tensor,
                memory_mask: torch.Tensor, pointer_tokens: torch.Tensor, pointer_presence: torch.Tensor,
                pointer_tpos: torch.Tensor, pointer_mask: torch.Tensor) -> torch.Tensor:
        (h, w), c = self.grid_hw, self.hidden_dim
        curr = image_embed.reshape(1, c, h * w).transpose(1, 2) - self.no_mem_embed.reshape(1, 1, c)  # the frame's own
        frames, frames_pos = self.frame_bank(memory_features, memory_tpos)
        pointers, pointers_pos = self.pointer_bank(pointer_tokens, pointer_presence, pointer_tpos)
        frame_bias = (1.0 - memory_mask).unsqueeze(-1).expand(-1, -1, h * w).reshape(1, -1)
        pointer_bias = (1.0 - pointer_mask).unsqueeze(-1).expand(-1, -1, self.tokens_per_pointer).reshape(1, -1)
        bias = (torch.cat([frame_bias, pointer_bias], dim=1) * MASKED).reshape(1, 1, 1, -1)
        pos = self.curr_pos
        output = curr + 0.1 * pos if self.pos_enc_at_input else curr
        frame_keys = frames + frames_pos if self.pos_enc_at_cross_attn_keys else frames
        pointer_keys = pointers + pointers_pos if self.pos_enc_at_cross_attn_keys else pointers
        for layer in self.layers:
            tgt2 = layer.norm1(output)
            q = tgt2 + pos if self.pos_enc_at_attn else tgt2
            output = output + layer.self_attn(q, q, tgt2, self.rope_cos, self.rope_sin)
            tgt2 = layer.norm2(output)
            q = tgt2 + pos if self.pos_enc_at_cross_attn_queries else tgt2
            output = output + layer.cross_attn_image(q, frame_keys, frames, self.rope_cos, self.rope_sin, pointer_keys,
                                                     pointers, bias)
            output = output + layer.linear2(layer.activation(layer.linear1(layer.norm3(output))))
        return self.norm(output).transpose(1, 2).reshape(1, c, h, w)


class ExportableMemoryEncoder(nn.Module):
    """``SAM2Base._encode_new_memory`` for one frame, from the low-resolution mask logits (module docstring)."""

    def __init__(self, sam2: nn.Module):
        super().__init__()
        self.memory_encoder = copy.deepcopy(sam2.memory_encoder)
        self.no_mem_embed = copy.deepcopy(sam2.no_mem_embed)
        self.hidden_dim = int(sam2.hidden_dim)
        self.image_size = int(sam2.image_size)
        self.sigmoid_scale = float(sam2.sigmoid_scale_for_mem_enc)
        self.sigmoid_bias = float(sam2.sigmoid_bias_for_mem_enc)
        self.no_obj_embed_spatial = copy.deepcopy(sam2.no_obj_embed_spatial) if sam2.no_obj_embed_spatial is not None else None
        grid = int(sam2.sam_image_embedding_size)
        with torch.no_grad():  # the sine encoding caches its table per size on first use: not during export
            self.memory_encoder.position_encoding(torch.zeros(1, int(sam2.mem_dim), grid, grid))

    def forward(self, image_embed: torch.Tensor, pred_masks: torch.Tensor, object_score_logits: torch.Tensor,
                binarize: torch.Tensor):
        pix_feat = image_embed - self.no_mem_embed.reshape(1, self.hidden_dim, 1, 1)
        high_res = F.interpolate(pred_masks, size=(self.image_size, self.image_size), mode="bilinear", align_corners=False)
        gate = binarize.reshape(1, 1, 1, 1)
        mask = gate * (high_res > 0).to(pix_feat.dtype) + (1.0 - gate) * torch.sigmoid(high_res)
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


def official_bank(model: Any, sine_pe: Any, memory_features, memory_tpos, memory_mask, pointer_tokens, pointer_presence,
                  pointer_tpos, pointer_mask) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(memory, memory_pos, pointer tokens): the bank entries the graph's masks keep, encoded and concatenated as
    ``_prepare_memory_conditioned_features`` does (frames, then pointers), by the official modules of ``model``
    (``SAM2Base`` or a tracker under its names) and its package's ``get_1d_sine_pe`` (``sine_pe``)."""
    c, m = int(model.hidden_dim), int(model.mem_dim)
    memory, memory_pos = [], []
    for f in range(memory_features.shape[1]):
        if float(memory_mask[0, f]) > 0.5:
            feats = memory_features[:, f]  # 1, m, h, w
            enc = model.memory_encoder.position_encoding(feats).flatten(2).permute(2, 0, 1)
            memory.append(feats.flatten(2).permute(2, 0, 1))
            memory_pos.append(enc + model.maskmem_tpos_enc[model.num_maskmem - int(memory_tpos[0, f]) - 1])
    keep = [p for p in range(pointer_tokens.shape[1]) if float(pointer_mask[0, p]) > 0.5]
    pointers = 0
    if keep:
        obj_ptr = model.obj_ptr_proj(pointer_tokens[0, keep])  # P, C (as _forward_sam_heads makes it)
        if model.pred_obj_scores:
            presence = pointer_presence[0, keep].unsqueeze(-1)
            obj_ptr = presence * obj_ptr + (1 - presence) * model.no_obj_ptr
        tpos_dim = c if model.proj_tpos_enc_in_obj_ptrs else m
        obj_pos = model.obj_ptr_tpos_proj(sine_pe(pointer_tpos[0, keep], dim=tpos_dim)).unsqueeze(1)
        obj_ptrs = obj_ptr.unsqueeze(1)
        if m < c:
            obj_ptrs = obj_ptrs.reshape(-1, 1, c // m, m).permute(0, 2, 1, 3).flatten(0, 1)
            obj_pos = obj_pos.repeat_interleave(c // m, dim=0)
        memory.append(obj_ptrs)
        memory_pos.append(obj_pos)
        pointers = obj_ptrs.shape[0]
    return torch.cat(memory), torch.cat(memory_pos), pointers


def official_current_frame(model: Any, image_embed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(the frame's own features, their position encoding), (HW, 1, C) each: ``image_embed`` less ``no_mem_embed``,
    and the image neck's sine encoding."""
    c, (h, w) = int(model.hidden_dim), image_embed.shape[-2:]
    raw = image_embed.reshape(1, c, h * w).permute(2, 0, 1) - model.no_mem_embed.reshape(1, 1, c)
    return raw, model.image_encoder.neck.position_encoding(image_embed).flatten(2).permute(2, 0, 1)


class OfficialMemoryAttentionReference(nn.Module):
    """The official modules behind the graph's inputs and outputs, for ``validate``: the bank (:func:`official_bank`)
    through the official ``MemoryAttention``."""

    def __init__(self, sam2: nn.Module, grid_hw: tuple[int, int]):
        super().__init__()
        self.model = sam2
        self.grid_hw = grid_hw

    def forward(self, image_embed, *bank):
        from sam2.modeling.sam2_utils import get_1d_sine_pe

        model, (h, w) = self.model, self.grid_hw
        memory, memory_pos, pointers = official_bank(model, get_1d_sine_pe, *bank)
        raw, curr_pos = official_current_frame(model, image_embed)
        out = model.memory_attention(curr=[raw], curr_pos=[curr_pos], memory=memory, memory_pos=memory_pos,
                                     num_obj_ptr_tokens=pointers)
        return out.permute(1, 2, 0).reshape(1, int(model.hidden_dim), h, w)


class OfficialMemoryEncoderReference(nn.Module):
    """``SAM2Base._encode_new_memory`` itself on the upsampled mask, as ``propagate_in_video_preflight`` calls it;
    ``binarize`` stands for "clicks made this mask and the model binarizes those"."""

    def __init__(self, sam2: nn.Module):
        super().__init__()
        self.model = sam2
        self.model.binarize_mask_from_pts_for_mem_enc = True  # the graph's binarize input says when

    def forward(self, image_embed, pred_masks, object_score_logits, binarize):
        c, (h, w), size = int(self.model.hidden_dim), image_embed.shape[-2:], int(self.model.image_size)
        raw = image_embed.reshape(1, c, h * w).permute(2, 0, 1) - self.model.no_mem_embed.reshape(1, 1, c)
        high_res = F.interpolate(pred_masks, size=(size, size), mode="bilinear", align_corners=False)
        features, pos = self.model._encode_new_memory([raw], [(h, w)], high_res, object_score_logits,
                                                      is_mask_from_pts=bool(float(binarize.reshape(-1)[0]) > 0.5))
        return features, pos[0]


def tracker_settings(sam2: nn.Module) -> dict:
    """What the video runtime needs from ``SAM2Base`` beyond the graphs: the official settings that choose memories,
    pointers and masks per frame, and two small constants of the mask-prompt path (``_use_mask_as_output``):
    ``no_mem_embed`` (the decoder reads the frame's own features there) and ``mask_downsample`` (a 4x4 stride-4
    convolution of the binary mask, 17 numbers), applied in NumPy."""
    check_tracking_config(sam2)
    flags = ("num_maskmem", "max_obj_ptrs_in_encoder", "max_cond_frames_in_attn", "memory_temporal_stride_for_eval",
             "only_obj_ptrs_in_the_past_for_eval", "use_signed_tpos_enc_to_obj_ptrs", "multimask_output_in_sam",
             "multimask_min_pt_num", "multimask_max_pt_num", "multimask_output_for_tracking",
             "use_multimask_token_for_obj_ptr", "pred_obj_scores", "soft_no_obj_ptr",
             "use_mask_input_as_output_without_sam", "binarize_mask_from_pts_for_mem_enc")
    settings = {name: getattr(sam2, name) for name in flags}
    settings = {k: (bool(v) if isinstance(v, bool) else int(v)) for k, v in settings.items()}
    conv = sam2.mask_downsample
    settings["no_mem_embed"] = [float(v) for v in sam2.no_mem_embed.detach().reshape(-1)]
    settings["mask_downsample"] = {"weight": [[float(v) for v in row] for row in conv.weight.detach().reshape(4, 4)],
                                   "bias": float(conv.bias.detach().reshape(-1)[0]), "kernel": 4, "stride": 4}
    return settings


__all__ = ["ExportableMemoryAttention", "ExportableMemoryEncoder", "MASKED", "OfficialMemoryAttentionReference",
           "OfficialMemoryEncoderReference", "RealRoPEAttention", "check_tracking_config", "official_bank",
           "official_current_frame", "sine_pe_divisors", "tracker_settings"]
