"""The eager reference: a timm ``VisionTransformer`` (ViT, DeiT), built from a recipe.

A recipe's ``[architecture]`` names a timm registry model (``model_name = "vit_base_patch16_224"``)
and optionally overrides its constructor arguments (timm's own names: ``img_size``, ``depth``,
``class_token``, ``global_pool``, ...). Without ``model_name`` the arguments build a
``VisionTransformer`` directly. Nothing is downloaded: weights come from ``--checkpoint`` (a timm
state dict, ``.pth``/``.bin`` or ``.safetensors``) or are seeded random.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vitdeploy.errors import RecipeError
from vitdeploy.models.checkpoints import check_fits, load_state_dict_file, select_prefix
from vitdeploy.models.recipes import Recipe
from vitdeploy.models.random_weights import randomize_parameters


@dataclass(frozen=True)
class TimmVitArch:
    """A timm registry name (or ``None``) and constructor overrides, in timm's own argument names."""

    model_name: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, arch: dict[str, Any]) -> TimmVitArch:
        arch = dict(arch)
        name = arch.pop("model_name", None)
        return cls(model_name=str(name) if name else None, kwargs=arch)

    @classmethod
    def from_recipe(cls, recipe: Recipe) -> TimmVitArch:
        return cls.from_dict(recipe.architecture)

    def to_dict(self) -> dict[str, Any]:
        return {"model_name": self.model_name, **self.kwargs} if self.model_name else dict(self.kwargs)

    @property
    def label(self) -> str:
        return self.model_name or "VisionTransformer"


def build_timm_vit(arch: TimmVitArch) -> nn.Module:
    """Build the timm model with timm's own (untrained) initialisation, in eval mode.

    Raises:
        RecipeError: unknown timm name, bad constructor arguments, or a model that is not a plain
            ``VisionTransformer`` (distilled DeiT, EVA, ... are other classes the rewrite does not cover).
    """
    import timm
    from timm.models.vision_transformer import VisionTransformer

    try:
        if arch.model_name:
            model = timm.create_model(arch.model_name, pretrained=False, **arch.kwargs)
        else:
            model = VisionTransformer(**arch.kwargs)
    except RuntimeError as exc:  # timm: "Unknown model (...)"
        raise RecipeError(f"timm cannot build '{arch.label}' ({exc}): check model_name against timm.list_models('vit_*')") from exc
    except (TypeError, ValueError, AssertionError) as exc:
        raise RecipeError(f"timm cannot build '{arch.label}' with {arch.kwargs} ({exc}): check the [architecture] keys") from exc
    if type(model) is not VisionTransformer:
        raise RecipeError(
            f"timm model '{arch.label}' is a {type(model).__name__}, not a VisionTransformer: "
            "vitdeploy exports timm's plain VisionTransformer (ViT, DeiT without distillation)"
        )
    return model.eval()


def load_timm_vit(
    arch: TimmVitArch,
    checkpoint: str | Path | None = None,
    *,
    prefix: str = "",
    random_seed: int | None = None,
    what: str | None = None,
) -> nn.Module:
    """Build the timm model for ``arch`` and fill it from a checkpoint or with seeded random weights.

    Exactly one of ``checkpoint`` and ``random_seed`` must be given. Random weights make every
    parameter non-zero (timm zero-initialises the classifier head and, for some models, the
    position embedding), so no path is trivially skipped.
    """
    return fill_timm_model(build_timm_vit(arch), arch, checkpoint, prefix=prefix, random_seed=random_seed, what=what,
                           hint=": choose the matching --recipe (or its img_size/num_classes)")


def fill_timm_model(model: nn.Module, arch: TimmVitArch, checkpoint: str | Path | None, *, prefix: str,
                    random_seed: int | None, what: str | None, hint: str) -> nn.Module:
    """Fill a freshly built timm model from a checkpoint (a timm state dict under ``prefix``) or a seed."""
    if (checkpoint is None) == (random_seed is None):
        raise ValueError("give exactly one of checkpoint and random_seed")
    if checkpoint is None:
        return randomize_parameters(model, random_seed).eval()
    state = select_prefix(load_state_dict_file(checkpoint), prefix)
    check_fits(model, state, what or f"timm {arch.label}", hint=hint)
    model.load_state_dict(state, strict=True)
    return model.eval()


def timm_data_config(model: nn.Module) -> dict[str, Any]:
    """timm's preprocessing for ``model`` (input size, interpolation, mean/std in [0, 1], crop)."""
    from timm.data import resolve_data_config

    config = resolve_data_config({}, model=model)
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in config.items()}


class TimmOutputReference(nn.Module):
    """timm's own methods for the artifact's output: ``forward``, ``forward_head(pre_logits=True)`` or ``forward_features``."""

    def __init__(self, model: nn.Module, output: str):
        super().__init__()
        self.model = model
        self.output = output

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.output == "features":
            return self.model.forward_features(x)
        if self.output == "pre_logits":
            return self.model.forward_head(self.model.forward_features(x), pre_logits=True)
        return self.model(x)
