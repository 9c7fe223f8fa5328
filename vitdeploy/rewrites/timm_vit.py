"""Export-friendly timm ``VisionTransformer`` (ViT, DeiT), same weights, one static image size.

What differs from timm's module, and why (measured with the dynamo exporter, torch 2.14, opset 18):

* Fused attention off (``fused_attn = False`` on every module that has it, in the copy): with
  ``F.scaled_dot_product_attention`` a dynamic-batch export holds Shape nodes and unknown dimensions
  (the hygiene check fails), and even a static one exports 4 extra Reshape and 2 extra Mul nodes per
  two blocks (scale applied to q and k separately). timm's manual path is plain MatMul/Softmax.
* Class and register tokens are added without reading the batch size: the patch tokens are padded
  with zero rows in front (a constant Pad) and one constant (1, T, C) tensor holding the prefix tokens
  and the position embedding is added (timm: ``cls_token.expand(x.shape[0], -1, -1)`` and ``cat``, which
  exports to Shape/Gather/Expand with a dynamic batch). The sums are the same: ``0 + (cls + pos)``
  and ``x + (0 + pos)`` are exact.
* Another image size than the model's: the position embedding is resampled by a constant linear map
  built once from timm's own ``resample_abs_pos_embed`` (applied to an identity basis; the resample
  is linear per channel), so the stored parameter keeps its shape and ``load_state_dict(strict=True)``
  with the original weights still holds. timm does the same resample at load time (``set_input_size``).
* Output choice fixed at construction: ``logits`` (``forward``), ``pre_logits`` (pooled features,
  ``forward_head(pre_logits=True)``) or ``features`` (all tokens after the final norm, ``forward_features``).
* Dropout/patch-dropout layers are not called (identities in eval mode).
"""

from __future__ import annotations

import copy
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from vitdeploy.errors import ExportError, InputError
from vitdeploy.sizes import require_patch_multiple

TimmOutput = Literal["logits", "pre_logits", "features"]
TIMM_OUTPUTS = ("logits", "pre_logits", "features")


def pos_embed_resample_matrix(old_grid: tuple[int, int], new_grid: tuple[int, int]) -> torch.Tensor:
    """(new_h*new_w, old_h*old_w) matrix ``M`` with ``M @ grid_pos == resample_abs_pos_embed(grid_pos)``.

    Built by timm's own function on an identity basis: channel ``j`` of the input is the one-hot image
    at token ``j``, so output channel ``j`` is column ``j`` of ``M``.
    """
    from timm.layers import resample_abs_pos_embed

    n_old = old_grid[0] * old_grid[1]
    with torch.no_grad():
        basis = torch.eye(n_old, dtype=torch.float32).unsqueeze(0)  # 1, N_old tokens, N_old channels
        out = resample_abs_pos_embed(basis, new_size=list(new_grid), old_size=list(old_grid), num_prefix_tokens=0)
    return out[0].contiguous()  # N_new, N_old


class ExportableVisionTransformer(nn.Module):
    """A timm ``VisionTransformer`` for one static image size; see the module docstring.

    Holds copies of timm's own submodules and parameters under timm's names (``patch_embed``,
    ``cls_token``, ``pos_embed``, ``blocks``, ``norm``, ``fc_norm``, ``head``, ...).
    """

    def __init__(self, official: nn.Module, input_size: int | None = None, output: TimmOutput = "logits"):
        super().__init__()
        _check_official(official)
        if output not in TIMM_OUTPUTS:
            raise InputError(f"unknown output '{output}': use one of {', '.join(TIMM_OUTPUTS)}")
        model = copy.deepcopy(official).eval()
        for module in model.modules():  # decided here, in the copy: timm's manual attention path
            if hasattr(module, "fused_attn"):
                module.fused_attn = False
        for name, child in model.named_children():
            self.add_module(name, child)
        for name, param in model.named_parameters(recurse=False):
            self.register_parameter(name, param)
        for name in ("cls_token", "reg_token", "pos_embed"):
            if getattr(model, name, None) is None:
                self.register_parameter(name, None)
        if model.attn_pool is None:
            self.attn_pool = None
        self.output = output
        self.global_pool = model.global_pool
        self.num_prefix_tokens = int(model.num_prefix_tokens)
        self.no_embed_class = bool(model.no_embed_class)
        self.pool_include_prefix = bool(getattr(model, "pool_include_prefix", False))
        self.embed_dim = int(model.embed_dim)

        patch = _pair(model.patch_embed.patch_size)
        old_img = _pair(model.patch_embed.img_size)
        size = _pair(input_size) if input_size else old_img
        require_patch_multiple(size[0], patch[0], "input size")
        require_patch_multiple(size[1], patch[1], "input size")
        self.input_hw = size
        self.in_chans = int(model.patch_embed.proj.in_channels)
        old_grid = (old_img[0] // patch[0], old_img[1] // patch[1])
        self.grid = (size[0] // patch[0], size[1] // patch[1])
        if self.grid != old_grid:
            # timm's own way to run at another size: PatchEmbed accepts the new size (no weights change).
            self.patch_embed.set_input_size(img_size=size)
        self.resample = self.pos_embed is not None and self.grid != old_grid
        if self.resample:
            self.register_buffer("pos_resample", pos_embed_resample_matrix(old_grid, self.grid), persistent=False)
        self.num_patches = self.grid[0] * self.grid[1]
        self.load_state_dict(official.state_dict(), strict=True)  # proof: timm's weights under timm's names
        self.eval()

    def prefix_and_pos(self) -> torch.Tensor:
        """(1, prefix + patches, C) constant added to the zero-padded patch tokens."""
        prefix = [t for t in (self.cls_token, self.reg_token) if t is not None]
        zeros_patches = torch.zeros(1, self.num_patches, self.embed_dim, dtype=self.patch_embed.proj.weight.dtype,
                                    device=self.patch_embed.proj.weight.device)
        if self.pos_embed is None:
            return torch.cat(prefix + [zeros_patches], dim=1)
        pos = self.pos_embed
        n_pos_prefix = 0 if self.no_embed_class else self.num_prefix_tokens
        if self.resample:
            grid_pos = torch.matmul(self.pos_resample, pos[0, n_pos_prefix:])  # N_new, C
            pos = torch.cat([pos[:, :n_pos_prefix], grid_pos.unsqueeze(0)], dim=1)
        if self.no_embed_class:
            return torch.cat(prefix + [pos], dim=1)  # tokens concatenated after the patches got pos
        return torch.cat(prefix + [zeros_patches], dim=1) + pos  # pos covers prefix and patches

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # B, 3, H, W
        x = self.patch_embed(x)  # B, N, C
        if self.num_prefix_tokens:
            x = F.pad(x, (0, 0, self.num_prefix_tokens, 0))  # B, T + N, C; prefix rows are zeros
        x = x + self.prefix_and_pos()
        x = self.norm_pre(x)
        x = self.blocks(x)
        x = self.norm(x)
        if self.output == "features":
            return x
        x = self.pool(x)
        x = self.fc_norm(x)
        if self.output == "pre_logits":
            return x
        return self.head(x)

    def pool(self, x: torch.Tensor) -> torch.Tensor:
        """timm's ``VisionTransformer.pool``: attention pooling or ``global_pool_nlc``."""
        from timm.layers import global_pool_nlc

        if self.attn_pool is not None:
            if not self.pool_include_prefix:
                x = x[:, self.num_prefix_tokens:]
            return self.attn_pool(x)
        return global_pool_nlc(x, pool_type=self.global_pool, num_prefix_tokens=self.num_prefix_tokens,
                               reduce_include_prefix=self.pool_include_prefix)


def _pair(value: int | tuple[int, int] | list[int]) -> tuple[int, int]:
    if isinstance(value, (tuple, list)):
        return int(value[0]), int(value[1])
    return int(value), int(value)


def _check_official(model: nn.Module) -> None:
    """Refuse models this rewrite was not written for, rather than rewrite them wrongly."""
    from timm.layers import PatchEmbed
    from timm.models.vision_transformer import VisionTransformer

    if type(model) is not VisionTransformer:
        raise ExportError(f"expected timm VisionTransformer, got {type(model).__name__}")
    if type(model.patch_embed) is not PatchEmbed:
        raise ExportError(f"unexpected patch_embed {type(model.patch_embed).__name__}: this rewrite supports timm PatchEmbed")
    if model.dynamic_img_size or getattr(model.patch_embed, "dynamic_img_pad", False):
        raise ExportError("dynamic_img_size/dynamic_img_pad models resample per call: build the model without them "
                          "(vitdeploy exports one static size; use --input-size)")
    if not getattr(model.patch_embed, "flatten", True):
        raise ExportError("patch_embed does not flatten tokens (NHWC output): unsupported layout")


def rewrite_timm_vit(model: nn.Module, input_size: int | None = None, output: TimmOutput = "logits") -> ExportableVisionTransformer:
    """Return an export-friendly copy of a timm ``VisionTransformer`` (the argument is not modified).

    Args:
        model: ``timm.models.vision_transformer.VisionTransformer`` (any ViT/DeiT configuration).
        input_size: static square export size; defaults to the model's. A multiple of the patch size.
        output: ``logits``, ``pre_logits`` (pooled features) or ``features`` (all tokens).
    """
    return ExportableVisionTransformer(model, input_size=input_size, output=output)


def timm_reference_at_size(model: nn.Module, input_size: int | None) -> nn.Module:
    """The eager reference at another size, as timm itself runs it: a copy after ``set_input_size``."""
    ref = copy.deepcopy(model).eval()
    if input_size and _pair(ref.patch_embed.img_size) != (input_size, input_size):
        ref.set_input_size(img_size=(input_size, input_size))
    return ref
