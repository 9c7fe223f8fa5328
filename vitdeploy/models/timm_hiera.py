"""The eager reference: a timm Hiera (``Hiera``: ``hiera_*``) or SAM 2's Hiera trunk (``HieraDet``: ``sam2_hiera_*``).

A recipe's ``[architecture]`` names the timm registry model and may override its constructor
arguments (timm's names: ``embed_dim``, ``stages``, ``window_spec``, ``global_att_blocks``, ...), as
for timm ViTs (:class:`~vitdeploy.models.timm_vit.TimmVitArch`). Weights come from ``--checkpoint``
(a timm state dict) or are seeded random; nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path

from torch import nn

from vitdeploy.errors import RecipeError
from vitdeploy.models.timm_vit import TimmVitArch, fill_timm_model

#: timm classes this family covers: Hiera (MAE-pretrained, mask-unit attention) and SAM 2's HieraDet.
HIERA_CLASSES = ("Hiera", "HieraDet")


def build_timm_hiera(arch: TimmVitArch) -> nn.Module:
    """Build the timm Hiera with timm's own (untrained) initialisation, in eval mode."""
    import timm

    if not arch.model_name:
        raise RecipeError("a Hiera recipe names its timm model: [architecture] model_name = \"hiera_tiny_224\" "
                          "(or a sam2_hiera_* name)")
    try:
        model = timm.create_model(arch.model_name, pretrained=False, **arch.kwargs)
    except RuntimeError as exc:  # timm: "Unknown model (...)"
        raise RecipeError(f"timm cannot build '{arch.label}' ({exc}): check model_name against "
                          "timm.list_models('*hiera*')") from exc
    except (TypeError, ValueError, AssertionError, ZeroDivisionError) as exc:
        raise RecipeError(f"timm cannot build '{arch.label}' with {arch.kwargs} ({type(exc).__name__}: {exc}): check "
                          "the [architecture] keys") from exc
    if type(model).__name__ not in HIERA_CLASSES:
        raise RecipeError(f"timm model '{arch.label}' is a {type(model).__name__}, not one of {', '.join(HIERA_CLASSES)}: "
                          "use the recipe family that exports it")
    return model.eval()


def load_timm_hiera(arch: TimmVitArch, checkpoint: str | Path | None = None, *, prefix: str = "",
                    random_seed: int | None = None, what: str | None = None) -> nn.Module:
    """Build the Hiera for ``arch`` and fill it from a checkpoint or with seeded random weights (every parameter
    non-zero: timm zero-initialises position embeddings and scales the head down to 0.001)."""
    return fill_timm_model(build_timm_hiera(arch), arch, checkpoint, prefix=prefix, random_seed=random_seed, what=what,
                           hint=": choose the matching --recipe (or its [architecture])")


def hiera_input_size(model: nn.Module) -> int:
    """The square input side a timm Hiera is built for: its token grid times its patch stride (Hiera, whose
    position embedding fixes the size), else timm's data config (HieraDet, which resizes its own)."""
    from vitdeploy.models.timm_vit import timm_data_config

    grid, stride = getattr(model, "tokens_spatial_shape", None), getattr(model, "patch_stride", None)
    if grid and stride:
        sides = {int(g) * int(s) for g, s in zip(grid, stride)}
        if len(sides) != 1:
            raise RecipeError(f"this Hiera takes a {int(grid[0]) * int(stride[0])}x{int(grid[1]) * int(stride[1])} input: "
                              "vitdeploy exports square inputs only; give [architecture] img_size one side")
        return sides.pop()
    return int(timm_data_config(model)["input_size"][-1])
