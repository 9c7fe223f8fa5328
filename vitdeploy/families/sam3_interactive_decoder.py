"""SAM 3's interactive (click) decoder (the official ``sam3`` package's SAM heads, ``Sam3Image.predict_inst``):
SAM 2's decoder graph contract exactly -- the vision encoder's ``image_embed`` and ``high_res_feats_0``/``_1`` (which
carry ``conv_s0``/``conv_s1`` and ``no_mem_embed``), clicks, a box and a mask prompt -> every mask token's logits,
IoU and object scores -- built from SAM 3's own classes and weights (the ``tracker.*`` keys of ``sam3.pt``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vitdeploy.errors import InputError
from vitdeploy.families.base import ExportOptions, reference_seed
from vitdeploy.families.sam2_mask_decoder import Sam2MaskDecoder

if TYPE_CHECKING:
    from torch import nn

    from vitdeploy.models.recipes import Recipe


class Sam3InteractiveDecoder(Sam2MaskDecoder):
    name = "sam3_interactive_decoder"
    recipe_suffix = "_interactive"
    title = "SAM 3 interactive decoders"
    verified_on_cuda = (
        (("generic", "fp32"), "H200, onnxruntime-gpu 1.31.1, 2026-11-28: full size, relative L2 3.1e-6 vs the official "
                              "model with TF32 off"),
    )
    role = ("SAM 3 prompt encoder + mask decoder for clicks and boxes: the vision encoder's image_embed and "
            "high_res_feats, clicks/box/mask -> masks, IoU and object scores (Sam3Image.predict_inst)")

    def architecture_class(self) -> type:
        from vitdeploy.models.sam3_interactive_decoder import Sam3InteractiveArch

        return Sam3InteractiveArch

    def check_export(self, recipe: Recipe, options: ExportOptions) -> None:
        if options.input_size:
            raise InputError("--input-size does not apply to SAM 3's interactive decoder: it is built for the model's "
                             "image size (set img_size in the recipe's [architecture], as the vision encoder's)")
        self.architecture(recipe.architecture)
        super().check_export(recipe, options)

    def load_eager(self, recipe: Recipe, checkpoint: str | None, random_seed: int | None) -> tuple[Any, nn.Module]:
        from vitdeploy.models.sam3_interactive_decoder import load_sam3_interactive

        arch = self.architecture(recipe.architecture)
        return arch, load_sam3_interactive(arch, checkpoint, random_seed=random_seed,
                                           what=f"recipe '{recipe.name}' ({recipe.variant})")

    def reference_model(self, metadata: dict[str, Any], checkpoint: str | None) -> nn.Module:
        """The official heads an export was made from (the seed's, or the checked checkpoint's)."""
        seed = reference_seed(metadata, checkpoint)

        from vitdeploy.models.sam3_interactive_decoder import load_sam3_interactive

        return load_sam3_interactive(self.architecture(metadata["architecture"]), checkpoint, random_seed=seed)


FAMILY = Sam3InteractiveDecoder()
