"""What every SAM 2 / 2.1 family shares: the official ``SAM2Base`` built from a recipe's config, overrides and weights
(:mod:`vitdeploy.models.sam2`), for export and as the eager reference of a file."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vitdeploy.families.base import ModelFamily, reference_seed

if TYPE_CHECKING:
    from torch import nn

    from vitdeploy.models.recipes import Recipe


class Sam2Family(ModelFamily):
    """A SAM 2 family: its model is the official ``SAM2Base`` of ``[architecture] config`` (+ ``overrides``)."""

    def architecture_class(self) -> type:
        from vitdeploy.models.sam2 import Sam2Arch

        return Sam2Arch

    def load_eager(self, recipe: Recipe, checkpoint: str | None, random_seed: int | None) -> tuple[Any, nn.Module]:
        from vitdeploy.models.sam2 import Sam2Arch, load_sam2

        arch = Sam2Arch.from_dict(recipe.architecture)
        return arch, load_sam2(arch, checkpoint, random_seed=random_seed, what=f"recipe '{recipe.name}' ({recipe.variant})")

    def reference_model(self, metadata: dict[str, Any], checkpoint: str | None) -> nn.Module:
        """The official ``SAM2Base`` an export was made from (the seed's, or the checked checkpoint's)."""
        seed = reference_seed(metadata, checkpoint)  # refuses a wrong checkpoint before torch is imported

        from vitdeploy.models.sam2 import Sam2Arch, load_sam2

        return load_sam2(Sam2Arch.from_dict(metadata["architecture"]), checkpoint, random_seed=seed)


__all__ = ["Sam2Family"]
