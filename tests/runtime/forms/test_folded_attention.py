"""The folded rel-pos attention unfolded at load time into ONNX Runtime's attention with a bias: same numbers,
only where the graph proves the folded layout, only where it pays, and the file's form on request."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
import torch
from click.testing import CliRunner

from tests.conftest import (TINY_ARCHS, assert_matches_official, export_tiny_targets, max_abs_rel, tamper_onehot_tables,
                            tiny_encoder)
from vitdeploy.cli import cli
from vitdeploy.errors import InputError
from vitdeploy.runtime.forms.folded_attention import find_folded_attention, pays_to_unfold, unfold_relpos_attention
from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner

ARCH = "padded_windows"  # two 3x3-window blocks and one 8x8 global block, head size 16
#: Unfolded vs folded ONNX Runtime graph, max-abs error relative to the output scale (reordered float sums).
UNFOLDED_VS_FOLDED_MAX_ABS_REL = 1e-5


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return export_tiny_targets(tmp_path_factory.mktemp("folded"), ARCH, seed=11, dynamic_batch=True)


def test_runner_unfolds_the_global_block_with_the_official_numbers(exports: dict[str, Path]) -> None:
    arch = TINY_ARCHS[ARCH]
    unfolded = OnnxRuntimeRunner(exports["onnxruntime-cpu"], threads=2, fused_attention=False)
    folded = OnnxRuntimeRunner(exports["onnxruntime-cpu"], threads=2, folded_attention=True)
    # 8x8 global grid: 8 + 8 rel-pos columns >= head size 16, unfolded; 3x3 windows: 6 < 16, left folded.
    assert len(unfolded.unfold.changed) == len(arch.global_attn_indexes)
    assert len(unfolded.unfold.kept) == arch.depth - len(arch.global_attn_indexes)
    assert all("the folded form is as fast there" in why for why in unfolded.unfold.kept.values())
    assert folded.unfold is None
    official = tiny_encoder(ARCH, seed=11)
    for batch, seed in ((1, 0), (2, 1)):  # the Reshapes copy the batch axis: a dynamic batch runs too
        x = torch.randn(batch, 3, arch.img_size, arch.img_size, generator=torch.Generator().manual_seed(seed))
        out = assert_matches_official(official, unfolded, x, f"unfolded batch {batch}")
        as_exported = folded.run({"image": x.numpy()})["image_embeddings"]
        assert max_abs_rel(out, as_exported) <= UNFOLDED_VS_FOLDED_MAX_ABS_REL


def test_unfolded_graph_takes_the_bias_and_the_plain_keys(exports: dict[str, Path]) -> None:
    model = onnx.load(str(exports["onnxruntime-cpu"]))
    found, kept = find_folded_attention(model.graph)
    assert len(found) == TINY_ARCHS[ARCH].depth and kept == {}
    global_block = [f for f in found if pays_to_unfold(f)]
    assert [(f.grid_h, f.grid_w, f.head_dim) for f in global_block] == [(8, 8, 16)]
    model, report = unfold_relpos_attention(model)
    assert report.changed == [global_block[0].label]
    onnx.checker.check_model(model)  # topologically sorted, every value defined
    node = next(n for n in model.graph.node if n.name == global_block[0].label)
    assert node.op_type == "MultiHeadAttention" and len(node.input) == 6 and node.input[5]  # attention_bias
    assert node.input[1].endswith("/unfold/k")  # the 16-wide keys, not the folded 32-wide ones


def test_unfold_needs_the_exact_one_hot_keys(exports: dict[str, Path]) -> None:
    model = onnx.load(str(exports["onnxruntime-cpu"]))
    assert tamper_onehot_tables(model)  # one key in two columns
    _, report = unfold_relpos_attention(model)
    assert report.changed == []
    assert set(report.kept.values()) == {"the key table is not the one-hot rel-pos layout"}


def test_other_targets_run_as_they_are(exports: dict[str, Path]) -> None:
    assert OnnxRuntimeRunner(exports["generic"], threads=2).unfold is None


def test_fused_and_folded_together_are_refused(exports: dict[str, Path]) -> None:
    with pytest.raises(InputError, match="ask for one of the two"):
        OnnxRuntimeRunner(exports["onnxruntime-cpu"], fused_attention=True, folded_attention=True)


def test_cli_says_which_form_ran(exports: dict[str, Path]) -> None:
    model = str(exports["onnxruntime-cpu"])
    unfolded = CliRunner().invoke(cli, ["validate", model, "--no-fused-attention", "--random-inputs", "1", "--runs", "0"])
    assert unfolded.exit_code == 0, unfolded.output
    assert "1 folded attention node(s) on ONNX Runtime's kernel with the rel-pos term as an attention bias" in unfolded.output
    folded = CliRunner().invoke(cli, ["validate", model, "--folded-attention", "--random-inputs", "1", "--runs", "0"])
    assert folded.exit_code == 0, folded.output
    assert "attention bias" not in folded.output
    timed = CliRunner().invoke(cli, ["benchmark", model, "--folded-attention", "--no-eager", "--runs", "1", "--warmup", "0"])
    assert timed.exit_code == 0, timed.output
    assert "folded attention" in timed.output
    refused = CliRunner().invoke(cli, ["validate", model, "--folded-attention", "--runtime", "openvino", "--runs", "0"])
    assert refused.exit_code == 1 and "Traceback" not in refused.output
