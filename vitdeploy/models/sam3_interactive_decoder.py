"""The eager reference for SAM 3's interactive (click) predictor: the official ``sam3`` package's SAM-style prompt
encoder and mask decoder, and what the image model adds to the features they read.

``build_sam3_image_model(enable_inst_interactivity=True)`` builds a whole video tracker (``build_tracker``:
memory encoder, memory attention, object pointers) to use its SAM heads for clicks on one image
(``Sam3Image.predict_inst``). What a click reads of it is :meth:`Sam3TrackerBase._build_sam_heads`'s
``sam_prompt_encoder`` and ``sam_mask_decoder`` (with ``conv_s0``/``conv_s1``, which ``Sam3Processor.set_image``
applies once per image) and ``no_mem_embed`` (which ``predict_inst`` adds to the lowest-resolution level).
:class:`Sam3InteractiveHeads` holds exactly those, built by the official ``_build_sam_heads`` with
``build_tracker``'s arguments (``sam_mask_decoder_extra_args``: the dynamic single-mask choice); a recipe may
change the sizes (:class:`Sam3InteractiveArch`: the tests' tiny model).

Weights come from ``--checkpoint`` (the official ``sam3.pt``: its ``tracker.sam_prompt_encoder.*``,
``tracker.sam_mask_decoder.*`` and ``tracker.no_mem_embed`` keys, which ``_load_checkpoint`` puts under
``inst_interactive_predictor.model.``; a state dict with either prefix) or are seeded random (every parameter
perturbed, and the prompt encoder's random Fourier matrix drawn from the seed).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch import nn

from vitdeploy.models.sam3_common import GridArchTable, load_official_weights, missing_sam3, select_under

#: Where ``sam3.pt`` keeps the tracker, and where ``Sam3Image`` with interactivity keeps the same module.
CHECKPOINT_PREFIXES = ("tracker.", "inst_interactive_predictor.model.", "detector.inst_interactive_predictor.model.")
#: The parts of the tracker a click on one image reads.
HEAD_KEYS = ("sam_prompt_encoder.", "sam_mask_decoder.", "no_mem_embed")
#: ``build_tracker``'s ``sam_mask_decoder_extra_args``.
MASK_DECODER_EXTRA_ARGS = {"dynamic_multimask_via_stability": True, "dynamic_multimask_stability_delta": 0.05,
                           "dynamic_multimask_stability_thresh": 0.98}


@dataclass(frozen=True)
class Sam3InteractiveArch(GridArchTable):
    """The sizes of SAM 3's interactive heads: ``Sam3TrackerBase``'s ``image_size`` and ``backbone_stride``
    (the prompt encoder's input frame and grid) and ``d_model`` (its ``hidden_dim``: the vision neck's width)."""

    img_size: int = 1008
    patch_size: int = 14
    d_model: int = 256

    WHAT: ClassVar[str] = "SAM 3's interactive predictor"
    MULTIPLES = GridArchTable.MULTIPLES + (("d_model", 8, "conv_s0 makes d_model/8 channels"),)


class Sam3InteractiveHeads(nn.Module):
    """The official SAM heads of ``Sam3TrackerBase`` and its ``no_mem_embed``, built by the official
    ``_build_sam_heads`` (the object pointer projections it also makes are for video and are dropped), with what
    ``SAM3InteractiveImagePredictor`` reads of its model: ``image_size``, ``_prepare_backbone_features``,
    ``device``."""

    num_feature_levels = 3

    def __init__(self, arch: Sam3InteractiveArch):
        super().__init__()
        try:
            from sam3.model.sam3_tracker_base import Sam3TrackerBase
        except ImportError as exc:
            raise missing_sam3(exc) from exc
        arch.check()
        self.hidden_dim = self.mem_dim = int(arch.d_model)
        self.image_size, self.backbone_stride = int(arch.img_size), int(arch.patch_size)
        self.sam_mask_decoder_extra_args = dict(MASK_DECODER_EXTRA_ARGS)
        Sam3TrackerBase._build_sam_heads(self)
        del self.obj_ptr_proj, self.obj_ptr_tpos_proj
        self.no_mem_embed = nn.Parameter(torch.zeros(1, 1, self.hidden_dim))
        self._prepare_backbone_features = Sam3TrackerBase._prepare_backbone_features.__get__(self)

    @property
    def device(self) -> torch.device:
        return self.no_mem_embed.device


def load_sam3_interactive(arch: Sam3InteractiveArch, checkpoint: str | Path | Mapping[str, Any] | None = None, *,
                          random_seed: int | None = None, what: str | None = None) -> Sam3InteractiveHeads:
    """Build the official heads and fill them from a checkpoint (the tracker's keys; a path or the state dict already
    read) or with seeded random weights."""
    from vitdeploy.models.sam_decoder import randomize_prompt_decoder

    def select(state: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in select_under(state, CHECKPOINT_PREFIXES).items() if k.startswith(HEAD_KEYS)}

    return load_official_weights(Sam3InteractiveHeads(arch), checkpoint, random_seed=random_seed,
                                 what=what or "SAM 3's interactive predictor",
                                 hint=": use the official sam3.pt or a state dict of its tracker", select=select,
                                 randomize=randomize_prompt_decoder)


__all__ = ["CHECKPOINT_PREFIXES", "Sam3InteractiveArch", "Sam3InteractiveHeads", "load_sam3_interactive"]
