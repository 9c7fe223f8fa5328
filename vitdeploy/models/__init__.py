"""Stage 1: build the eager reference models from official code and load user checkpoints."""

from vitdeploy.models.checkpoints import load_state_dict_file, select_prefix
from vitdeploy.models.recipes import Recipe, load_recipe, recipe_names
from vitdeploy.models.sam_encoder import SamEncoderArch, build_sam_image_encoder, load_sam_image_encoder

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
