"""The eager reference for SAM 3's text encoder: the official ``sam3`` package's ``VETextEncoder``, as
``sam3.model_builder._create_text_encoder`` builds it (:class:`Sam3TextArch`: its sizes; a recipe may change them
for the tests' tiny model), without its tokenizer (the runtime tokenizes). Weights come from the official
``sam3.pt`` (its ``language_backbone`` keys, read with ``weights_only=True``) or are seeded random."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from torch import nn

from vitdeploy.errors import RecipeError
from vitdeploy.models.sam3_common import ArchTable, load_official_weights, missing_sam3, select_under

#: Keys of an official checkpoint that hold the text encoder (``SAM3VLBackbone.language_backbone``).
TEXT_CHECKPOINT_PREFIXES = ("detector.backbone.language_backbone.", "backbone.language_backbone.")


@dataclass(frozen=True)
class Sam3TextArch(ArchTable):
    """The sizes of SAM 3's text encoder (``VETextEncoder``'s argument names); defaults are ``_create_text_encoder``'s."""

    width: int = 1024
    heads: int = 16
    layers: int = 24
    context_length: int = 32
    vocab_size: int = 49408
    d_model: int = 256

    WHAT: ClassVar[str] = "a SAM 3 text encoder"

    MULTIPLES = (("width", "heads", ""),)

    def check(self) -> None:
        super().check()
        if self.vocab_size < 49408:
            raise RecipeError(f"vocab_size {self.vocab_size}: CLIP's tokenizer gives ids up to 49407")


def build_sam3_text(arch: Sam3TextArch) -> nn.Module:
    """The official ``VETextEncoder`` as ``_create_text_encoder`` builds it, without its tokenizer (the runtime
    tokenizes: :mod:`vitdeploy.runtime.processing.clip_tokenizer`), eval mode."""
    try:
        from sam3.model.text_encoder_ve import VETextEncoder
    except ImportError as exc:
        raise missing_sam3(exc) from exc
    return VETextEncoder(tokenizer=None, d_model=arch.d_model, width=arch.width, heads=arch.heads, layers=arch.layers,
                         context_length=arch.context_length, vocab_size=arch.vocab_size).eval()


def load_sam3_text(arch: Sam3TextArch, checkpoint: str | Path | None = None, *, random_seed: int | None = None,
                   what: str | None = None) -> nn.Module:
    """Build the official text encoder and fill it from a checkpoint (its ``language_backbone`` keys) or with seeded
    random weights."""
    return load_official_weights(build_sam3_text(arch), checkpoint, random_seed=random_seed,
                                 what=what or "SAM 3's text encoder",
                                 hint=": use the official sam3.pt or a state dict of its text encoder",
                                 select=lambda state: select_under(state, TEXT_CHECKPOINT_PREFIXES))


__all__ = ["TEXT_CHECKPOINT_PREFIXES", "Sam3TextArch", "build_sam3_text", "load_sam3_text"]
