"""SAM 3's text encoder (the official ``VETextEncoder``: a CLIP text transformer, causal, context 32) for export,
same weights, same numbers.

``forward(tokens) -> (text_memory, text_embeds)``: ``tokens`` (B, L) int64 from CLIP's tokenizer (zero-padded);
``text_memory`` (B, L, d_model), the transformer's tokens after ``ln_final`` and the ``resizer``, and
``text_embeds`` (B, L, width), the token embeddings alone: what ``VETextEncoder.forward`` returns as
``text_memory_resized`` and ``inputs_embeds``, batch first (the official returns them sequence first). Its third
value, the padding mask, is ``tokens == 0`` and the runtime computes it.

What differs from the official modules: ``nn.MultiheadAttention`` (whose inference fast path is one fused native op)
is written as its arithmetic, with the same ``in_proj``/``out_proj`` weights and the causal mask a constant of the
graph; the pooled projection (``pooled @ text_projection``), which ``VETextEncoder`` discards, is not computed.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

#: The graph's outputs, in order.
OUTPUT_NAMES = ("text_memory", "text_embeds")


class Sam3TextEncoder(nn.Module):
    """The official ``VETextEncoder.forward`` on token ids (the reference side: its tokenizer is given the ids)."""

    def __init__(self, encoder: nn.Module):
        super().__init__()
        self.encoder = encoder

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.encoder.tokenizer = lambda texts, context_length: tokens  # the ids, as the official tokenizer returns them
        _, memory, embeds = self.encoder([""] * tokens.shape[0], device=tokens.device)
        return memory.transpose(0, 1), embeds.transpose(0, 1)


class TextBlock(nn.Module):
    """``ResidualAttentionBlock`` with its ``nn.MultiheadAttention`` written out (parameter names kept)."""

    def __init__(self, official: nn.Module):
        super().__init__()
        if not isinstance(official.ls_1, nn.Identity) or hasattr(official, "ln_1_kv"):
            raise ValueError("SAM 3's text blocks have no layer scale and attend to themselves")
        attn = official.attn
        self.heads = int(attn.num_heads)
        self.width = int(attn.embed_dim)
        self.in_proj = nn.Linear(self.width, 3 * self.width)
        with torch.no_grad():
            self.in_proj.weight.copy_(attn.in_proj_weight)
            self.in_proj.bias.copy_(attn.in_proj_bias)
        self.out_proj = copy.deepcopy(attn.out_proj)
        self.ln_1 = copy.deepcopy(official.ln_1)
        self.ln_2 = copy.deepcopy(official.ln_2)
        self.mlp = copy.deepcopy(official.mlp)

    def attention(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # B, L, W
        length, heads = mask.shape[0], self.heads
        hd = self.width // heads
        q, k, v = self.in_proj(x).reshape(-1, length, 3, heads, hd).permute(2, 0, 3, 1, 4).unbind(0)  # B, h, L, hd
        scores = torch.matmul(q * hd ** -0.5, k.transpose(-2, -1)) + mask
        out = torch.matmul(scores.softmax(dim=-1), v).permute(0, 2, 1, 3).reshape(-1, length, self.width)
        return self.out_proj(out)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.ln_1(x), mask)
        return x + self.mlp(self.ln_2(x))


class ExportableSam3TextEncoder(nn.Module):
    """The export-friendly copy of ``VETextEncoder`` for token ids of its context length; see the module docstring."""

    def __init__(self, official: nn.Module):
        super().__init__()
        text = official.encoder
        if text.attn_mask is None:
            raise ValueError("SAM 3's text transformer is causal")
        self.context_length = int(official.context_length)
        self.token_embedding = copy.deepcopy(text.token_embedding)
        self.register_buffer("positions", text.positional_embedding.detach()[:self.context_length].clone(),
                             persistent=False)
        self.register_buffer("mask", text.attn_mask.detach()[:self.context_length, :self.context_length].clone(),
                             persistent=False)
        self.blocks = nn.ModuleList(TextBlock(block) for block in text.transformer.resblocks)
        self.ln_final = copy.deepcopy(text.ln_final)
        self.resizer = copy.deepcopy(official.resizer)

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        embeds = self.token_embedding(tokens)  # B, L, W
        x = embeds + self.positions
        for block in self.blocks:
            x = block(x, self.mask)
        return self.resizer(self.ln_final(x)), embeds


def rewrite_sam3_text_encoder(official: nn.Module) -> ExportableSam3TextEncoder:
    """The export-friendly copy (the original is left unchanged)."""
    return ExportableSam3TextEncoder(official.eval()).eval()


__all__ = ["ExportableSam3TextEncoder", "OUTPUT_NAMES", "Sam3TextEncoder", "TextBlock", "rewrite_sam3_text_encoder"]
