"""The tiny SAM 3 image model's three files (``sam3_tiny``, ``sam3_tiny_text``, ``sam3_tiny_detector``, seed
:data:`SEED`), exported once per test run for every test that runs them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.once_per_run import once_per_run

SEED = 6
RECIPES = {"vision": "sam3_tiny", "text": "sam3_tiny_text", "detector": "sam3_tiny_detector"}


def sam3_tiny_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(vision encoder, text encoder, detector) of one seeded tiny model."""
    from vitdeploy.pipeline import export_from_recipe

    made = once_per_run(tmp_path_factory, "sam3_tiny_model", lambda root: {
        part: export_from_recipe(recipe, root / f"{recipe}.onnx", random_weights=True, seed=SEED).path
        for part, recipe in RECIPES.items()})
    return made["vision"], made["text"], made["detector"]


def sam3_tiny_interactive_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The interactive (click) decoder of the same seeded tiny model (``sam3_tiny_interactive``)."""
    from vitdeploy.pipeline import export_from_recipe

    made = once_per_run(tmp_path_factory, "sam3_tiny_interactive", lambda root: {
        "interactive": export_from_recipe("sam3_tiny_interactive", root / "sam3_tiny_interactive.onnx",
                                          random_weights=True, seed=SEED).path})
    return made["interactive"]


def sam3_tiny_files_with_vocab(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """:func:`sam3_tiny_files` for tests that tokenize text: skipped, saying why, where CLIP's vocabulary is not."""
    from vitdeploy.errors import InputError
    from vitdeploy.runtime.processing.clip_tokenizer import default_vocab

    try:
        default_vocab()
    except InputError as exc:
        pytest.skip(f"CLIP's vocabulary is not installed ({exc}; scripts/test.sh installs open_clip_torch)")
    return sam3_tiny_files(tmp_path_factory)


__all__ = ["RECIPES", "SEED", "sam3_tiny_files", "sam3_tiny_files_with_vocab", "sam3_tiny_interactive_file"]
