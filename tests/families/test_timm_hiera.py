"""The fourth family, timm Hiera and SAM 2's Hiera trunk: export, parity against timm eager, hygiene, FP16.

Tiny seeded configurations of the shipped recipes' timm models (``hiera_tiny_224`` and
``sam2_hiera_tiny`` with fewer, narrower blocks) go through the same verbs as every family: the
library calls behind ``export``, ``validate`` and ``calibrate``. The reference is timm's own module
as timm ships it (fused attention on); the export's copy computes attention by hand.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from vitdeploy.errors import InputError, RecipeError
from vitdeploy.families import ExportOptions, eager_reference
from vitdeploy.pipeline import export_recipe
from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner
from vitdeploy.parity import TOLERANCES, compare
from vitdeploy.validation.validate_model import ValidateOptions, validate_model

FP32, FP16 = TOLERANCES["fp32"], TOLERANCES["fp16"]

#: Tiny versions of the shipped recipes' models: the same timm classes and code paths (mask units and
#: q-pooling at every stage change; HieraDet windows with padding and one global block), seconds to export.
TINY = {
    "hiera": ('model_name = "hiera_tiny_224"\nembed_dim = 16\nnum_heads = 1\nstages = [1, 1, 2, 1]\n'
              'img_size = [64, 64]\nnum_classes = 10', 64),
    "sam2_hiera": ('model_name = "sam2_hiera_tiny"\nembed_dim = 16\nnum_heads = 1\nstages = [1, 1, 2, 1]\n'
                   'global_att_blocks = [3]\nwindow_spec = [4, 4, 4, 2]\nglobal_pos_size = [4, 4]\nnum_classes = 10', 96),
}


def write_recipe(folder: Path, name: str, output: str = "logits") -> Path:
    arch, _ = TINY[name]
    path = folder / f"tiny_{name}_{output}.toml"
    path.write_text(f'[model]\nfamily = "timm_hiera"\nvariant = "tiny_{name}"\n\n[architecture]\n{arch}\n\n'
                    f'[timm]\noutput = "{output}"\n')
    return path


def export_tiny(folder: Path, name: str, output: str = "logits", **options) -> Path:
    _, size = TINY[name]
    recipe = write_recipe(folder, name, output)
    path = folder / f"{recipe.stem}{'_dyn' if options.get('dynamic_batch') else ''}.onnx"
    input_size = size if name == "sam2_hiera" else None  # HieraDet: timm's 896 default is too big for a test
    export_recipe(str(recipe), path, ExportOptions(random_seed=3, input_size=input_size, **options))
    return path


@pytest.mark.parametrize("output", ["logits", "features"])
@pytest.mark.parametrize("name", list(TINY))
def test_export_matches_timm_eager(name: str, output: str, tmp_path: Path) -> None:
    path = export_tiny(tmp_path, name, output)
    report = validate_model(path, ValidateOptions(random_inputs=3, runs=0, threads=2))
    assert len(report.parity) == 3
    worst = min(p.cosine for p in report.parity)
    assert report, [p.to_dict() for p in report.parity]
    assert worst >= FP32.cosine_min
    assert max(p.rel_l2 for p in report.parity) <= FP32.rel_l2_max


@pytest.mark.parametrize("name", list(TINY))
def test_dynamic_batch_graph_is_hygiene_clean_and_right_at_batch_3(name: str, tmp_path: Path) -> None:
    path = export_tiny(tmp_path, name, dynamic_batch=True)
    graph = onnx.load(str(path)).graph
    ops = {node.op_type for node in graph.node}
    assert not ops & {"Shape", "Range", "If", "Loop", "Einsum", "NonZero", "ConstantOfShape"}, ops
    assert not graph.input[0].type.tensor_type.shape.dim[0].HasField("dim_value")  # symbolic batch
    runner = OnnxRuntimeRunner(path, threads=2)
    x = np.random.default_rng(0).standard_normal((3, *runner.input_shapes()["image"][1:])).astype(np.float32)
    got = runner.run({"image": x})["logits"]
    with torch.no_grad():
        expected = eager_reference(runner.metadata)(torch.from_numpy(x)).numpy()
    result = compare(expected, got, FP32)
    assert result, result.to_dict()


def test_fp16_file_from_images_is_within_the_fp16_tolerance(tmp_path: Path) -> None:
    """calibrate fp16 (timm preprocessing of the bundled images) -> a file that validate passes at 'fp16'."""
    from vitdeploy.precision.calibrate import CalibrateOptions, calibrate_onnx

    path = export_tiny(tmp_path, "sam2_hiera", "features")
    out = tmp_path / "fp16.onnx"
    report = calibrate_onnx(path, out, CalibrateOptions(precision="fp16", holdout=2, min_images=4, max_images=6,
                                                        cache_dir=str(tmp_path / "cache"), threads=2))
    assert report.parity_eager and all(report.parity_eager), [p.to_dict() for p in report.parity_eager]
    types = {init.data_type for init in onnx.load(str(out)).graph.initializer}
    assert onnx.TensorProto.FLOAT16 in types
    validated = validate_model(out, ValidateOptions(random_inputs=2, runs=0, threads=2))
    assert validated.tolerance.name == "fp16" and validated, [p.to_dict() for p in validated.parity]
    assert min(p.cosine for p in validated.parity) >= FP16.cosine_min


def test_hiera_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    recipe = write_recipe(tmp_path, "hiera")
    with pytest.raises(InputError, match="position embedding is built for 64x64"):
        export_recipe(str(recipe), tmp_path / "a.onnx", ExportOptions(random_seed=0, input_size=96))
    with pytest.raises(InputError, match="--target tensorrt applies to sam_image_encoder recipes"):
        export_recipe(str(recipe), tmp_path / "b.onnx", ExportOptions(random_seed=0, target="tensorrt"))
    sam2 = write_recipe(tmp_path, "sam2_hiera")
    with pytest.raises(InputError, match="not a multiple of the total stride 32: use 96 or 128"):
        export_recipe(str(sam2), tmp_path / "c.onnx", ExportOptions(random_seed=0, input_size=100))
    vit = tmp_path / "vit.toml"
    vit.write_text('[model]\nfamily = "timm_hiera"\nvariant = "v"\n\n[architecture]\nmodel_name = "vit_tiny_patch16_224"\n'
                   'depth = 1\n')
    with pytest.raises(RecipeError, match="is a VisionTransformer, not one of Hiera, HieraDet"):
        export_recipe(str(vit), tmp_path / "d.onnx", ExportOptions(random_seed=0))
    assert not list(tmp_path.glob("*.onnx"))


@pytest.mark.parametrize("recipe", ["timm_hiera_tiny_224", "timm_sam2_hiera_tiny"])
def test_shipped_hiera_recipes_build_their_timm_model(recipe: str) -> None:
    """The full-size recipes name real timm models of the family (built, not exported: seconds)."""
    from vitdeploy.pipeline import load_eager_from_recipe

    _, arch, model = load_eager_from_recipe(recipe, None, True, 0)
    assert type(model).__name__ in ("Hiera", "HieraDet") and arch.model_name == recipe.removeprefix("timm_")
