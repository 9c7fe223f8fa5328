"""Stage 1: build the eager reference models from official code and load user checkpoints.

The names below load on first use, so ``vitdeploy.models.recipes`` (plain TOML) can be read before
torch is imported: the CLI checks a recipe name in milliseconds.
"""

from __future__ import annotations

from vitdeploy._lazy import lazy_attributes

__getattr__ = lazy_attributes(__name__, {
    "load_state_dict_file": "checkpoints", "select_prefix": "checkpoints",
    "Recipe": "recipes", "load_recipe": "recipes", "recipe_names": "recipes",
    "SamEncoderArch": "sam_encoder", "build_sam_image_encoder": "sam_encoder", "load_sam_image_encoder": "sam_encoder",
})

__all__ = [
    "Recipe",
    "SamEncoderArch",
    "build_sam_image_encoder",
    "load_recipe",
    "load_sam_image_encoder",
    "load_state_dict_file",
    "recipe_names",
    "select_prefix",
]
