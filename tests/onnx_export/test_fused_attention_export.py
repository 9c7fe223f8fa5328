"""Export targets: each graph holds the attention form its runtime fuses, and all compute the official numbers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from click.testing import CliRunner

from tests.conftest import TINY_ARCHS, tiny_encoder
from vitdeploy.cli import cli
from vitdeploy.metadata import read_onnx_metadata
from vitdeploy.onnx_export.sam_encoder import export_sam_image_encoder
from vitdeploy.targets import DEFAULT_TARGET, TARGETS
from vitdeploy.runtime.backends.ort_fusions import fusion_report, optimized_graph
from vitdeploy.runtime.backends.ort_settings import OrtSettings
from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner
from vitdeploy.parity import compare

ARCH = "padded_windows"  # windowed blocks with padding and one global block
DEPTH = TINY_ARCHS[ARCH].depth


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("targets")
    encoder = tiny_encoder(ARCH, seed=5)
    return {t: export_sam_image_encoder(encoder, root / f"{t}.onnx", target=t).path for t in TARGETS}


@pytest.mark.parametrize("target", list(TARGETS))
def test_every_target_matches_the_official_model_on_onnxruntime(exports: dict[str, Path], target: str) -> None:
    official = tiny_encoder(ARCH, seed=5)
    runner = OnnxRuntimeRunner(exports[target], threads=2)
    assert runner.metadata["target"] == target
    s = TINY_ARCHS[ARCH].img_size
    for seed in (0, 1):
        x = torch.randn(1, 3, s, s, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            ref = official(x)
        result = compare(ref, runner.run({"image": x.numpy()})["image_embeddings"], "fp32", label=f"{target} seed {seed}")
        assert result, result.summary()


def _softmax_inputs_from(model: onnx.ModelProto) -> set[str]:
    producers = {o: n.op_type for n in model.graph.node for o in n.output}
    return {producers.get(n.input[0], "graph input") for n in model.graph.node if n.op_type == "Softmax"}


def test_tensorrt_target_is_standard_bias_free_attention(exports: dict[str, Path]) -> None:
    model = onnx.load(str(exports["tensorrt"]))
    assert {n.domain for n in model.graph.node} == {""}  # standard ONNX only
    assert sum(n.op_type == "Softmax" for n in model.graph.node) == DEPTH
    # Scores come straight out of a MatMul: no additive bias between the first BMM and Softmax.
    assert _softmax_inputs_from(model) == {"MatMul"}
    onnx.checker.check_model(model, full_check=True)


def test_generic_target_keeps_the_decomposed_bias(exports: dict[str, Path]) -> None:
    model = onnx.load(str(exports["generic"]))
    assert _softmax_inputs_from(model) == {"Add"}  # scores + rel-pos bias
    assert not any(n.op_type == "MultiHeadAttention" for n in model.graph.node)
    assert read_onnx_metadata(str(exports["generic"]))["target"] == DEFAULT_TARGET == "generic"


def test_onnxruntime_target_fuses_attention_and_gelu(exports: dict[str, Path], tmp_path: Path) -> None:
    model = onnx.load(str(exports["onnxruntime-cpu"]))
    mha = [n for n in model.graph.node if n.op_type == "MultiHeadAttention"]
    assert len(mha) == DEPTH and {n.domain for n in mha} == {"com.microsoft"}
    # No bias or mask input: the inputs ONNX Runtime's CPU flash-attention path takes.
    assert all(len([i for i in n.input if i]) == 3 for n in mha)
    assert not any(n.op_type == "Softmax" for n in model.graph.node)
    report = fusion_report(optimized_graph(exports["onnxruntime-cpu"], tmp_path / "opt.onnx", OrtSettings(optimization="extended")))
    assert report.fused["gelu"] == DEPTH and report.unfused["gelu"] == 0
    assert report.fused["attention"] == DEPTH and report.unfused["attention"] == 0
    assert report.fused["layernorm"] == 2 * DEPTH and report.unfused["layernorm"] == 0
    # qkv, proj, two MLP linears per block; a padded windowed block adds its qkv bias after the padding
    # (ExportableBlock.windowed_attention), so its qkv is a bias-free MatMul.
    arch = TINY_ARCHS[ARCH]
    grid = arch.img_size // arch.patch_size
    padded_windowed = (arch.depth - len(arch.global_attn_indexes)) if grid % arch.window_size else 0
    assert report.unfused["matmul_bias"] == 0 and report.fused["matmul_bias"] == 4 * DEPTH - padded_windowed
    assert report.missing() == []
    generic = fusion_report(optimized_graph(exports["generic"], tmp_path / "generic.onnx", OrtSettings(optimization="extended")))
    assert generic.unfused["gelu"] == DEPTH  # the exporter's GELU order is not one ORT fuses


def test_cli_export_with_target(tiny_recipe: Path, tmp_path: Path) -> None:
    out = tmp_path / "cpu.onnx"
    result = CliRunner().invoke(cli, ["export", "-r", str(tiny_recipe), "--random-weights", "-o", str(out),
                                      "--target", "onnxruntime-cpu"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "MultiHeadAttention 3" in result.output
    assert read_onnx_metadata(str(out))["target"] == "onnxruntime-cpu"
    runner = OnnxRuntimeRunner(out, threads=2)
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
    from vitdeploy.families import eager_reference

    with torch.no_grad():
        ref = eager_reference(runner.metadata, None)(torch.from_numpy(x))
    assert compare(ref, runner.run({"image": x})["image_embeddings"], "fp32")


def test_cli_bad_target_is_a_usage_error(tiny_recipe: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["export", "-r", str(tiny_recipe), "--random-weights", "-o", str(tmp_path / "x.onnx"),
                                      "--target", "cuda"])
    assert result.exit_code == 2
    assert "Invalid value for '--target'" in result.output
    assert not (tmp_path / "x.onnx").exists()


def test_cli_target_on_a_non_encoder_recipe_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["export", "-r", "timm_deit_small_patch16_224", "--random-weights", "-o",
                                      str(tmp_path / "x.onnx"), "--target", "tensorrt"])
    assert result.exit_code == 1, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "--target tensorrt applies to sam_image_encoder recipes" in errors[0] and "Traceback" not in result.output
    assert not (tmp_path / "x.onnx").exists()


@pytest.mark.parametrize("target", ["tensorrt", "onnxruntime-cpu"])
def test_fused_targets_export_a_dynamic_batch_without_shape_nodes(target: str, tmp_path: Path) -> None:
    official = tiny_encoder(ARCH, seed=6)
    result = export_sam_image_encoder(official, tmp_path / "dyn.onnx", target=target, dynamic_batch=True)
    assert result.input_shapes["image"][0] == "batch" and "Shape" not in result.hygiene.op_counts
    x = torch.randn(3, 3, 64, 64, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref = official(x)
    parity = compare(ref, OnnxRuntimeRunner(result.path, threads=2).run({"image": x.numpy()})["image_embeddings"], "fp32")
    assert parity, parity.summary()
