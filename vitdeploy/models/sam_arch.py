"""The SAM architectures as recipes write them: the official constructors' arguments, checked without torch.

``SamEncoderArch`` mirrors ``segment_anything.modeling.ImageEncoderViT``, ``SamDecoderArch`` the prompt
encoder + mask decoder of ``segment_anything.build_sam._build_sam``. Parsing and checking a recipe needs
no torch, so ``vitdeploy export`` refuses a bad recipe or input size before torch is imported; the
models are built from these in :mod:`vitdeploy.models.sam_encoder` and :mod:`vitdeploy.models.sam_decoder`.
"""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from vitdeploy.errors import RecipeError
from vitdeploy.sizes import require_patch_multiple

if TYPE_CHECKING:
    from torch import nn

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


def checked_architecture(cls: Any, recipe: Recipe) -> Any:
    """``cls`` built from a recipe's ``[architecture]`` table: unknown keys and values of the wrong type are
    refused, naming the key and an example of a right value."""
    known = set(cls.__dataclass_fields__)
    unknown = sorted(set(recipe.architecture) - known)
    if unknown:
        raise RecipeError(f"recipe '{recipe.name}' has unknown architecture keys {unknown}: allowed are {sorted(known)}")
    arch = dict(recipe.architecture)
    for key, value in arch.items():
        field_ = cls.__dataclass_fields__[key]
        default = field_.default if field_.default_factory is MISSING else field_.default_factory()
        want = _type_problem(value, default)
        if want:
            example = str(default).lower() if isinstance(default, bool) else list(default) if isinstance(default, tuple) else default
            raise RecipeError(f"recipe '{recipe.name}': architecture.{key} = {value!r} must be {want} "
                              f"(e.g. {key} = {example})")
        if isinstance(default, tuple):
            arch[key] = tuple(int(i) for i in value)
    return cls(**arch)


#: The official SAM variants by their encoder's (embed_dim, depth): the one table of their names.
SAM_VARIANTS = {(768, 12): "vit_b", (1024, 24): "vit_l", (1280, 32): "vit_h"}


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
        arch = checked_architecture(cls, recipe)
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


@dataclass(frozen=True)
class SamDecoderArch:
    """Arguments of ``segment_anything.build_sam._build_sam`` for the prompt encoder and mask decoder.

    Defaults are those of every official SAM variant (vit_b, vit_l and vit_h share this architecture).
    ``input_image_size`` is the encoder's input size (the frame of the point coordinates) and
    ``image_embedding_size`` its output grid.
    """

    embed_dim: int = 256  # prompt_embed_dim == transformer_dim
    image_embedding_size: int = 64
    input_image_size: int = 1024
    mask_in_chans: int = 16
    num_multimask_outputs: int = 3
    transformer_depth: int = 2
    transformer_mlp_dim: int = 2048
    transformer_num_heads: int = 8
    attention_downsample_rate: int = 2
    iou_head_depth: int = 3
    iou_head_hidden_dim: int = 256

    @classmethod
    def from_recipe(cls, recipe: Recipe) -> SamDecoderArch:
        arch = checked_architecture(cls, recipe)
        arch.validate(f"recipe '{recipe.name}'")
        return arch

    @classmethod
    def from_modules(cls, prompt_encoder: nn.Module, mask_decoder: nn.Module) -> SamDecoderArch:
        """Read the architecture off official ``PromptEncoder``/``MaskDecoder`` modules (e.g. of a ``Sam``)."""
        transformer = mask_decoder.transformer
        iou_head = mask_decoder.iou_prediction_head
        return cls(
            embed_dim=int(prompt_encoder.embed_dim),
            image_embedding_size=int(prompt_encoder.image_embedding_size[0]),
            input_image_size=int(prompt_encoder.input_image_size[0]),
            mask_in_chans=int(prompt_encoder.mask_downscaling[3].out_channels),
            num_multimask_outputs=int(mask_decoder.num_multimask_outputs),
            transformer_depth=int(transformer.depth),
            transformer_mlp_dim=int(transformer.mlp_dim),
            transformer_num_heads=int(transformer.num_heads),
            attention_downsample_rate=int(transformer.embedding_dim // transformer.final_attn_token_to_image.internal_dim),
            iou_head_depth=int(iou_head.num_layers),
            iou_head_hidden_dim=int(iou_head.layers[0].out_features) if iou_head.num_layers > 1 else 256,
        )

    @property
    def encoder_stride(self) -> int:
        """Pixels of the encoder input per embedding cell (the encoder's patch size, 16 for SAM)."""
        return self.input_image_size // self.image_embedding_size

    def validate(self, where: str = "architecture") -> None:
        if self.input_image_size % self.image_embedding_size:
            raise RecipeError(
                f"{where}: input_image_size {self.input_image_size} is not a multiple of "
                f"image_embedding_size {self.image_embedding_size}"
            )
        internal = self.embed_dim // self.attention_downsample_rate
        if self.embed_dim % 8 or internal % self.transformer_num_heads:
            raise RecipeError(
                f"{where}: embed_dim {self.embed_dim} must be a multiple of 8 and embed_dim/attention_downsample_rate "
                f"({internal}) divisible by transformer_num_heads {self.transformer_num_heads}"
            )
        if self.mask_in_chans % 4:
            raise RecipeError(f"{where}: mask_in_chans {self.mask_in_chans} is not a multiple of 4")

    def at_input_size(self, input_size: int) -> SamDecoderArch:
        """The same decoder paired with an encoder exported at ``input_size`` (same patch size).

        The prompt encoder's positional encoding is a function of normalised coordinates, so the
        official modules built for another size take the same weights; only the sizes change.
        """
        stride = self.encoder_stride
        require_patch_multiple(input_size, stride, "input size", unit="encoder patch size")
        return replace(self, input_image_size=input_size, image_embedding_size=input_size // stride)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
