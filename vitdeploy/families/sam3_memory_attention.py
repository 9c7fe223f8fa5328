"""SAM 3's memory attention (the official ``sam3`` tracker's ``transformer.encoder`` with the bank
``Sam3TrackerBase._prepare_memory_conditioned_features`` builds): SAM 2's memory attention graph exactly -- the
current frame's features conditioned on the memory bank (recent and prompted frames, object pointers), the bank as
two inputs of dynamic length with masks -- built from SAM 3's own classes and weights (the ``tracker.*`` keys of
``sam3.pt``; :mod:`vitdeploy.rewrites.sam3_tracker` says where SAM 3's code differs from SAM 2's). The file also
records the settings the video runtime tracks with (``tracker``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vitdeploy.families.sam2_memory_attention import Sam2MemoryAttention
from vitdeploy.families.sam3_tracker_base import Sam3TrackerFamily

if TYPE_CHECKING:
    from torch import nn


class Sam3MemoryAttention(Sam3TrackerFamily, Sam2MemoryAttention):
    name = "sam3_memory_attention"
    recipe_suffix = "_memory_attention"
    title = "SAM 3 memory attentions"
    role = ("SAM 3 memory attention (video tracker): a frame's features conditioned on the memory bank -> the "
            "interactive decoder's input; carries the tracker's settings")

    def eager_reference(self, metadata: dict[str, Any], checkpoint: str | None) -> nn.Module:
        from vitdeploy.models.sam3_common import build_position_encoding
        from vitdeploy.rewrites.sam3_tracker import OfficialSam3MemoryAttentionReference

        arch = self.architecture(metadata["architecture"])
        return OfficialSam3MemoryAttentionReference(self.reference_model(metadata, checkpoint),
                                                    build_position_encoding(arch.d_model)).eval()


FAMILY = Sam3MemoryAttention()
