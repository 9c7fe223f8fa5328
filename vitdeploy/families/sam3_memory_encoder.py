"""SAM 3's memory encoder (the official ``sam3`` tracker's ``maskmem_backbone``, ``Sam3TrackerBase.
_encode_new_memory``): SAM 2's memory encoder graph exactly -- a frame's features (the vision encoder's
``image_embed``) and its predicted mask (the interactive decoder's low-resolution logits, upsampled in the graph) ->
the memory later frames attend to -- built from SAM 3's own classes and weights (the ``tracker.*`` keys of
``sam3.pt``; :mod:`vitdeploy.rewrites.sam3_tracker` says where SAM 3's code differs from SAM 2's)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vitdeploy.families.sam2_memory_encoder import Sam2MemoryEncoder
from vitdeploy.families.sam3_tracker_base import Sam3TrackerFamily

if TYPE_CHECKING:
    from torch import nn


class Sam3MemoryEncoder(Sam3TrackerFamily, Sam2MemoryEncoder):
    name = "sam3_memory_encoder"
    recipe_suffix = "_memory_encoder"
    title = "SAM 3 memory encoders"
    role = "SAM 3 memory encoder (video tracker): a frame's features and mask -> the memory later frames attend to"
    full_size_masks = True  # Sam3TrackerPredictor encodes prompted frames from masks made non-overlapping at 1008 px

    def exportable(self, model: Any) -> nn.Module:
        from vitdeploy.rewrites.sam3_tracker import tracker_memory_encoder

        return tracker_memory_encoder(model)

    def eager_reference(self, metadata: dict[str, Any], checkpoint: str | None) -> nn.Module:
        from vitdeploy.rewrites.sam3_tracker import OfficialSam3MemoryEncoderReference

        return OfficialSam3MemoryEncoderReference(self.reference_model(metadata, checkpoint)).eval()


FAMILY = Sam3MemoryEncoder()
