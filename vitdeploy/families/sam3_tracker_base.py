"""What SAM 3's two tracker families share: the official ``Sam3TrackerBase`` built from a recipe's
``[architecture]`` and weights (:mod:`vitdeploy.models.sam3_tracker`), given to SAM 2's graphs under SAM 2's names
(:class:`vitdeploy.rewrites.sam3_tracker.TrackerAsSam2`), and the official tracker as the eager reference."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vitdeploy.families.base import reference_seed

if TYPE_CHECKING:
    from torch import nn

    from vitdeploy.models.recipes import Recipe


class Sam3TrackerFamily:
    """A SAM 3 tracker family (put before the SAM 2 family whose graph it exports): its model is the official
    tracker of ``[architecture]`` (:class:`~vitdeploy.models.sam3_tracker.Sam3TrackerArch`)."""

    def architecture_class(self) -> type:
        from vitdeploy.models.sam3_tracker import Sam3TrackerArch

        return Sam3TrackerArch

    def load_eager(self, recipe: Recipe, checkpoint: str | None, random_seed: int | None) -> tuple[Any, Any]:
        """(the architecture, the official tracker under SAM 2's names): what SAM 2's export reads."""
        from vitdeploy.models.sam3_common import build_position_encoding
        from vitdeploy.models.sam3_tracker import load_sam3_tracker
        from vitdeploy.rewrites.sam3_tracker import TrackerAsSam2

        arch = self.architecture(recipe.architecture)
        tracker = load_sam3_tracker(arch, checkpoint, random_seed=random_seed,
                                    what=f"recipe '{recipe.name}' ({recipe.variant})")
        return arch, TrackerAsSam2(tracker, build_position_encoding(arch.d_model))

    def reference_model(self, metadata: dict[str, Any], checkpoint: str | None) -> nn.Module:
        """The official tracker an export was made from (the seed's, or the checked checkpoint's)."""
        seed = reference_seed(metadata, checkpoint)  # refuses a wrong checkpoint before torch is imported

        from vitdeploy.models.sam3_tracker import load_sam3_tracker

        return load_sam3_tracker(self.architecture(metadata["architecture"]), checkpoint, random_seed=seed)


__all__ = ["Sam3TrackerFamily"]
