"""timm VisionTransformer: the export-friendly rewrite and its ONNX export vs timm's eager model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from vitdeploy.errors import CheckpointError, ExportError, InputError, RecipeError
from vitdeploy.models.recipes import load_recipe
from vitdeploy.models.timm_vit import TimmVitArch, build_timm_vit, load_timm_vit
from vitdeploy.onnx_export.timm_vit import export_timm_vit
from vitdeploy.rewrites.timm_vit import rewrite_timm_vit, timm_reference_at_size
from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner
from vitdeploy.parity import TOLERANCES, compare

FP32 = TOLERANCES["fp32"]
COSINE_MIN = 0.99999  # the bar for logits

BASE = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=10)
CONFIGS = {
    "class_token": BASE,
    "no_class_token_avg": {**BASE, "class_token": False, "global_pool": "avg"},
    "registers_no_embed_class": {**BASE, "reg_tokens": 2, "no_embed_class": True},
    "map_pool_pre_norm": {**BASE, "class_token": False, "global_pool": "map", "pre_norm": True},
    "qk_norm_fc_norm": {**BASE, "qk_norm": True, "global_pool": "avg", "fc_norm": True, "class_token": False},
}


def tiny_vit(name: str, seed: int = 0) -> torch.nn.Module:
    return load_timm_vit(TimmVitArch(kwargs=dict(CONFIGS[name])), random_seed=seed)


def _reference_output(ref: torch.nn.Module, x: torch.Tensor, output: str) -> torch.Tensor:
    features = ref.forward_features(x)
    if output == "features":
        return features
    return ref.forward_head(features, pre_logits=output == "pre_logits")


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("size", [None, 48, 24])
@pytest.mark.parametrize("output", ["logits", "pre_logits", "features"])
def test_rewrite_matches_timm(name: str, size: int | None, output: str) -> None:
    model = tiny_vit(name)
    rewritten = rewrite_timm_vit(model, input_size=size, output=output)
    reference = timm_reference_at_size(model, size)  # timm's own set_input_size / resample_abs_pos_embed
    x = torch.randn(2, 3, size or 32, size or 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        result = compare(_reference_output(reference, x, output), rewritten(x), FP32, label=f"{name}/{size}/{output}")
    assert result, result.summary()


def test_rewrite_works_on_a_copy_with_fused_attention_off() -> None:
    model = tiny_vit("class_token")
    fused_before = [m.fused_attn for m in model.modules() if hasattr(m, "fused_attn")]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rewritten = rewrite_timm_vit(model, input_size=48)
    assert all(not m.fused_attn for m in rewritten.modules() if hasattr(m, "fused_attn"))
    assert [m.fused_attn for m in model.modules() if hasattr(m, "fused_attn")] == fused_before
    assert tuple(model.patch_embed.img_size) == (32, 32)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    # the stored parameters keep their shapes: the checkpoint's state dict loads strictly
    rewritten.load_state_dict(before, strict=True)


def test_rewrite_refuses_what_it_does_not_cover() -> None:
    with pytest.raises(ExportError, match="VisionTransformer"):
        rewrite_timm_vit(torch.nn.Linear(2, 2))
    with pytest.raises(InputError, match="multiple of the patch size 8"):
        rewrite_timm_vit(tiny_vit("class_token"), input_size=50)
    dynamic = load_timm_vit(TimmVitArch(kwargs={**BASE, "dynamic_img_size": True}), random_seed=0)
    with pytest.raises(ExportError, match="dynamic_img_size"):
        rewrite_timm_vit(dynamic)


EXPORTS = {
    # name: (config, export size, dynamic batch, output)
    "class_token_resized_dynamic": ("class_token", 48, True, "logits"),
    "no_class_token": ("no_class_token_avg", None, False, "logits"),
    "registers_features": ("registers_no_embed_class", None, True, "features"),
}


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory):
    torch.set_num_threads(2)
    root = tmp_path_factory.mktemp("timm")
    out = {}
    for name, (config, size, dynamic, output) in EXPORTS.items():
        model = tiny_vit(config)
        result = export_timm_vit(model, root / f"{name}.onnx", input_size=size, dynamic_batch=dynamic, output=output)
        out[name] = (result, timm_reference_at_size(model, size), size or 32, dynamic, output)
    return out


@pytest.mark.parametrize("name", list(EXPORTS))
def test_onnxruntime_matches_timm(exported, name: str) -> None:
    result, reference, size, dynamic, output = exported[name]
    assert result.hygiene, result.hygiene.problems
    runner = OnnxRuntimeRunner(result.path, threads=2)
    for seed, batch in ((11, 1), (12, 3 if dynamic else 1)):
        x = np.random.default_rng(seed).standard_normal((batch, 3, size, size)).astype(np.float32)
        with torch.no_grad():
            ref = _reference_output(reference, torch.from_numpy(x), output).numpy()
        out = runner.run({"image": x})[output]
        parity = compare(ref, out, FP32, label=f"{name}/seed{seed}")
        assert parity and parity.cosine >= COSINE_MIN, parity.summary()


def test_exported_graphs_are_static_apart_from_the_batch(exported) -> None:
    for name, (result, _, size, dynamic, _) in exported.items():
        model = onnx.load(str(result.path), load_external_data=False)
        ops = {n.op_type for n in model.graph.node}
        assert not ops & {"Shape", "Expand", "Einsum", "If", "Range"}, (name, ops)
        assert result.input_shapes["image"] == ["batch" if dynamic else 1, 3, size, size]


def test_from_module_metadata_uses_timm_preprocessing(tmp_path: Path) -> None:
    from vitdeploy.metadata import read_onnx_metadata

    model = tiny_vit("no_class_token_avg")
    export_timm_vit(model, tmp_path / "m.onnx")
    meta = read_onnx_metadata(str(tmp_path / "m.onnx"))
    assert meta["family"] == "timm_vit" and meta["output"] == "logits" and meta["input_size"] == [32, 32]
    assert meta["pixel_mean"] == pytest.approx([255 * m for m in meta["data_config"]["mean"]])


@pytest.mark.parametrize("recipe", ["timm_vit_base_patch16_224", "timm_deit_small_patch16_224", "timm_vit_base_patch16_gap_224"])
def test_shipped_timm_recipes_name_timm_models(recipe: str) -> None:
    import timm

    parsed = load_recipe(recipe)
    arch = TimmVitArch.from_recipe(parsed)
    assert parsed.family == "timm_vit" and arch.model_name in timm.list_models()
    assert arch.kwargs["img_size"] == 224 and arch.kwargs["num_classes"] == 1000


def test_model_errors(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="cannot build 'vit_nonexistent'"):
        build_timm_vit(TimmVitArch(model_name="vit_nonexistent"))
    with pytest.raises(RecipeError, match="not a VisionTransformer"):
        build_timm_vit(TimmVitArch(model_name="deit_tiny_distilled_patch16_224", kwargs={"depth": 1}))
    with pytest.raises(RecipeError, match="cannot build"):
        build_timm_vit(TimmVitArch(kwargs={**BASE, "embed_dims": 3}))
    path = tmp_path / "vit.pth"
    torch.save(tiny_vit("class_token").state_dict(), path)
    with pytest.raises(CheckpointError, match="does not fit"):
        load_timm_vit(TimmVitArch(kwargs={**BASE, "num_classes": 5}), path)
    loaded = load_timm_vit(TimmVitArch(kwargs=dict(BASE)), path)
    assert torch.equal(loaded.pos_embed, tiny_vit("class_token").pos_embed)
