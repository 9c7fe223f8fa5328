"""The eager reference: the official ``segment_anything`` ImageEncoderViT, built from a recipe."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vitdeploy.errors import RecipeError
from vitdeploy.models.checkpoints import check_fits, load_state_dict_file, select_prefix
from vitdeploy.models.recipes import Recipe


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # TOML true is no integer here


def _type_problem(value: Any, default: Any) -> str | None:
    """What ``value`` must be to take the place of ``default`` (None when it may)."""
    if isinstance(default, bool):
        return None if isinstance(value, bool) else "true or false"
    if isinstance(default, int):
        return None if _is_int(value) else "an integer"
    if isinstance(default, float):
        return None if _is_int(value) or isinstance(value, float) else "a number"
    if isinstance(default, tuple):
        return None if isinstance(value, (list, tuple)) and all(map(_is_int, value)) else "a list of integers"
    return None


@dataclass(frozen=True)
class SamEncoderArch:
    """Constructor arguments of ``segment_anything.modeling.ImageEncoderViT`` (its own names)."""

    img_size: int = 1024
    patch_size: int = 16
    in_chans: int = 3
    embed_dim: int = 768
    depth: int = 12
    num_heads: int = 12
    mlp_ratio: float = 4.0
    out_chans: int = 256
    qkv_bias: bool = True
    use_abs_pos: bool = True
    use_rel_pos: bool = True
    window_size: int = 14
    global_attn_indexes: tuple[int, ...] = field(default=(2, 5, 8, 11))
    layer_norm_eps: float = 1e-6

    @classmethod
    def from_recipe(cls, recipe: Recipe) -> SamEncoderArch:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(recipe.architecture) - known)
        if unknown:
            raise RecipeError(f"recipe '{recipe.name}' has unknown architecture keys {unknown}: allowed are {sorted(known)}")
        arch = dict(recipe.architecture)
        for key, value in arch.items():
            default = cls.__dataclass_fields__[key].default
            want = _type_problem(value, default)
            if want:
                example = str(default).lower() if isinstance(default, bool) else list(default) if isinstance(default, tuple) else default
                raise RecipeError(f"recipe '{recipe.name}': architecture.{key} = {value!r} must be {want} "
                                  f"(e.g. {key} = {example})")
        if "global_attn_indexes" in arch:
            arch["global_attn_indexes"] = tuple(int(i) for i in arch["global_attn_indexes"])
        arch = cls(**arch)
        arch.validate(recipe.name)
        return arch

    @classmethod
    def from_module(cls, encoder: nn.Module) -> SamEncoderArch:
        """Read the architecture off an official ``ImageEncoderViT`` (e.g. one from ``sam_model_registry``)."""
        first = encoder.blocks[0]
        embed_dim = encoder.patch_embed.proj.out_channels
        windows = [int(b.window_size) for b in encoder.blocks]
        return cls(
            img_size=int(encoder.img_size),
            patch_size=int(encoder.patch_embed.proj.kernel_size[0]),
            in_chans=int(encoder.patch_embed.proj.in_channels),
            embed_dim=int(embed_dim),
            depth=len(encoder.blocks),
            num_heads=int(first.attn.num_heads),
            mlp_ratio=first.mlp.lin1.out_features / embed_dim,
            out_chans=int(encoder.neck[0].out_channels),
            qkv_bias=first.attn.qkv.bias is not None,
            use_abs_pos=encoder.pos_embed is not None,
            use_rel_pos=bool(first.attn.use_rel_pos),
            window_size=max(windows),
            global_attn_indexes=tuple(i for i, w in enumerate(windows) if w == 0) if max(windows) else (),
            layer_norm_eps=float(first.norm1.eps),
        )

    def validate(self, where: str = "architecture") -> None:
        if self.img_size % self.patch_size:
            raise RecipeError(f"{where}: img_size {self.img_size} is not a multiple of patch_size {self.patch_size}")
        if self.embed_dim % self.num_heads:
            raise RecipeError(f"{where}: embed_dim {self.embed_dim} is not divisible by num_heads {self.num_heads}")
        bad = [i for i in self.global_attn_indexes if not 0 <= i < self.depth]
        if bad:
            raise RecipeError(f"{where}: global_attn_indexes {bad} are outside 0..{self.depth - 1}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["global_attn_indexes"] = list(self.global_attn_indexes)
        return d


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


def randomize_parameters(module: nn.Module, seed: int, std: float = 0.02) -> nn.Module:
    """Give every parameter seeded, non-zero random values, in place; returns ``module``.

    Official SAM initialises the position embedding and relative-position tables to zero and
    LayerNorm to (1, 0); random weights that kept those would skip whole code paths in parity tests.
    """
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(module.named_parameters()):
            noise = torch.randn(param.shape, generator=gen, dtype=torch.float32)
            if _is_norm_weight(name, param):
                param.copy_(1.0 + 0.1 * noise)
            elif param.ndim >= 2 and name.rsplit(".", 1)[-1] == "weight":
                fan_in = param[0].numel()
                param.copy_(noise / fan_in**0.5)
            else:
                param.copy_(std * noise)
    return module


def _is_norm_weight(name: str, param: torch.Tensor) -> bool:
    return param.ndim == 1 and name.endswith("weight") and bool(torch.all(param == 1))


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
    known = {(768, 12): "vit_b", (1024, 24): "vit_l", (1280, 32): "vit_h"}
    guess = known.get((found["embed_dim"], found["depth"]))
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
