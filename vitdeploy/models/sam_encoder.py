"""The eager reference: the official ``segment_anything`` ImageEncoderViT, built from a recipe."""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path

import torch
from torch import nn

from vitdeploy.models.checkpoints import check_fits, load_state_dict_file, select_prefix
from vitdeploy.models.random_weights import randomize_parameters
from vitdeploy.models.sam_arch import SAM_VARIANTS, SamEncoderArch


def build_sam_image_encoder(arch: SamEncoderArch) -> nn.Module:
    """Build an official ``ImageEncoderViT`` with default (untrained) initialisation, in eval mode."""
    from segment_anything.modeling import ImageEncoderViT

    encoder = ImageEncoderViT(
        img_size=arch.img_size,
        patch_size=arch.patch_size,
        in_chans=arch.in_chans,
        embed_dim=arch.embed_dim,
        depth=arch.depth,
        num_heads=arch.num_heads,
        mlp_ratio=arch.mlp_ratio,
        out_chans=arch.out_chans,
        qkv_bias=arch.qkv_bias,
        norm_layer=partial(nn.LayerNorm, eps=arch.layer_norm_eps),
        act_layer=nn.GELU,
        use_abs_pos=arch.use_abs_pos,
        use_rel_pos=arch.use_rel_pos,
        rel_pos_zero_init=True,
        window_size=arch.window_size,
        global_attn_indexes=arch.global_attn_indexes,
    )
    return encoder.eval()


def describe_checkpoint(state: dict[str, torch.Tensor], arch: SamEncoderArch | None = None) -> str:
    """Read a SAM encoder state dict's architecture, for error messages: against ``arch``, only what differs.

    embed_dim and patch size from ``patch_embed.proj.weight``, depth from the block indices, the image
    size from the ``pos_embed`` grid (times the patch size).
    """
    w = state.get("patch_embed.proj.weight")
    if w is None or w.ndim != 4:
        return ""
    found = {"embed_dim": int(w.shape[0]), "patch_size": int(w.shape[-1]),
             "depth": 1 + max((int(m.group(1)) for k in state if (m := re.match(r"blocks\.(\d+)\.", k))), default=-1)}
    pos = state.get("pos_embed")
    if pos is not None and pos.ndim == 4:
        found["img_size"] = int(pos.shape[1]) * found["patch_size"]
    guess = SAM_VARIANTS.get((found["embed_dim"], found["depth"]))
    label = f", which looks like SAM {guess}" if guess else ""
    if arch is None:
        return f" (the checkpoint has embed_dim {found['embed_dim']}, depth {found['depth']}{label})"
    differs = [f"{key} {value} (the recipe: {getattr(arch, key)})" for key, value in found.items()
               if getattr(arch, key) != value]
    if not differs:
        return f" (embed_dim, depth, patch size and image size match the recipe{label}: the tensors above differ)"
    return f" (the checkpoint has {', '.join(differs)}{label})"


def load_sam_image_encoder(
    arch: SamEncoderArch,
    checkpoint: str | Path | None = None,
    *,
    prefix: str = "image_encoder.",
    random_seed: int | None = None,
    what: str = "the SAM image encoder",
) -> nn.Module:
    """Build the official encoder for ``arch`` and fill it from a checkpoint or with seeded random weights.

    Exactly one of ``checkpoint`` and ``random_seed`` must be given. A full SAM checkpoint
    (``image_encoder.*`` keys), an encoder-only state dict and safetensors files are accepted.
    """
    if (checkpoint is None) == (random_seed is None):
        raise ValueError("give exactly one of checkpoint and random_seed")
    encoder = build_sam_image_encoder(arch)
    if checkpoint is None:
        return randomize_parameters(encoder, random_seed)
    state = select_prefix(load_state_dict_file(checkpoint), prefix)
    check_fits(encoder, state, what, hint=describe_checkpoint(state, arch) + ": choose the matching --recipe")
    encoder.load_state_dict(state, strict=True)
    return encoder.eval()


def official_encoder_at_size(encoder: nn.Module, input_size: int) -> nn.Module:
    """The eager reference for an export size other than the checkpoint's, as official code would run it.

    A copy of ``encoder`` whose absolute position embedding is bicubically resampled to the new token
    grid with ``F.interpolate`` (the ViTDet ``get_abs_pos`` way); the official ``get_rel_pos``
    interpolates the relative-position tables at run time by itself. ``encoder`` is not modified.
    """
    import copy

    import torch.nn.functional as F

    ref = copy.deepcopy(encoder)
    patch = int(ref.patch_embed.proj.kernel_size[0])
    grid = input_size // patch
    if ref.pos_embed is not None and ref.pos_embed.shape[1] != grid:
        nchw = ref.pos_embed.detach().permute(0, 3, 1, 2)
        resized = F.interpolate(nchw, size=(grid, grid), mode="bicubic", align_corners=False)
        ref.pos_embed = nn.Parameter(resized.permute(0, 2, 3, 1).contiguous())
    ref.img_size = input_size
    return ref.eval()
