"""One tiny export of every registered family, made once per test run and shared by the test files that need a file
per family: the family contract (tests/families/test_family_contract.py) and TensorRT for RTX's builds
(tests/engine/test_engine_tensorrt_rtx.py). Each was ~80 s of exports on 2 cores when both files made their own.

A family's file is written alone into its own folder (``<run>/family_<name>/export/<name>.onnx``); the recipe text and
the :class:`~vitdeploy.onnx_export.exporter.ExportResult` the export returned (pickled) sit beside that folder.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from tests.once_per_run import once_per_run
from tests.sam2_tiny import TINY_SAM2_RECIPE, TINY_SAM2_VIDEO_RECIPE
from vitdeploy.onnx_export.exporter import ExportResult

SEED = 7

#: family -> (recipe: a shipped file under export/ or TOML text, input size to export at or None for the recipe's).
TINY_RECIPES: dict[str, tuple[str, int | None]] = {
    "sam_image_encoder": ("sam_tiny", None),
    "sam_mask_decoder": ("sam_tiny_decoder", None),
    "timm_vit": ('[model]\nfamily = "timm_vit"\nvariant = "tiny"\n\n[architecture]\nmodel_name = "vit_tiny_patch16_224"\n'
                 'embed_dim = 32\ndepth = 2\nnum_heads = 2\nimg_size = 32\nnum_classes = 10\n', None),
    "timm_hiera": ('[model]\nfamily = "timm_hiera"\nvariant = "tiny"\n\n[architecture]\nmodel_name = "sam2_hiera_tiny"\n'
                   'embed_dim = 16\nnum_heads = 1\nstages = [1, 1, 2, 1]\nglobal_att_blocks = [3]\n'
                   'window_spec = [4, 4, 4, 2]\nglobal_pos_size = [4, 4]\nnum_classes = 10\n\n[timm]\noutput = "features"\n', 96),
    "sam2_image_encoder": (TINY_SAM2_RECIPE, 256),
    "sam2_mask_decoder": (TINY_SAM2_RECIPE.replace("sam2_image_encoder", "sam2_mask_decoder"), None),
    "sam2_memory_encoder": (TINY_SAM2_VIDEO_RECIPE.replace("sam2_image_encoder", "sam2_memory_encoder"), None),
    "sam2_memory_attention": (TINY_SAM2_VIDEO_RECIPE.replace("sam2_image_encoder", "sam2_memory_attention")
                              + "\n[memory]\nframe_slots = 3\npointer_slots = 4\n", None),
    "sam3_vision_encoder": ("sam3_tiny", None),
    "sam3_text_encoder": ("sam3_tiny_text", None),
    "sam3_detector": ("sam3_tiny_detector", None),
    "sam3_interactive_decoder": ("sam3_tiny_interactive", None),
    "sam3_memory_encoder": ("sam3_tiny_memory_encoder", None),
    "sam3_memory_attention": ("sam3_tiny_memory_attention", None),
}


def family_export(tmp_path_factory: pytest.TempPathFactory, name: str) -> tuple[Path, ExportResult]:
    """``name``'s tiny recipe exported by the library call behind ``vitdeploy export`` (seeded random weights
    :data:`SEED`), once for all workers of this run: the file and what the export returned."""
    from vitdeploy.families import ExportOptions
    from vitdeploy.pipeline import export_recipe

    def make(folder: Path) -> dict[str, Path]:
        recipe, size = TINY_RECIPES[name]
        if recipe.startswith("["):
            (folder / "tiny.toml").write_text(recipe)
            recipe = str(folder / "tiny.toml")
        out = folder / "export" / f"{name}.onnx"
        out.parent.mkdir()
        result = export_recipe(recipe, out, ExportOptions(random_seed=SEED, input_size=size))
        (folder / "result.pickle").write_bytes(pickle.dumps(result))
        return {"onnx": out, "result": folder / "result.pickle"}

    made = once_per_run(tmp_path_factory, f"family_{name}", make)
    return made["onnx"], pickle.loads(made["result"].read_bytes())


def family_export_copy(tmp_path_factory: pytest.TempPathFactory, name: str, folder: Path, stem: str) -> Path:
    """:func:`family_export`'s file copied to ``folder/<stem>.onnx``: for tests that write beside the files they use
    (outputs, profiles), so the shared file's folder stays as the export left it."""
    import shutil

    path, _ = family_export(tmp_path_factory, name)
    return Path(shutil.copyfile(path, folder / f"{stem}.onnx"))


__all__ = ["SEED", "TINY_RECIPES", "family_export", "family_export_copy"]
