"""A ``--target tensorrt`` export on ONNX Runtime's CPU: its folded MatMul-Softmax-MatMul chains run as
``MultiHeadAttention`` (then the CPU forms of the ``onnxruntime-cpu`` target apply), with the official numbers, only
where the graph proves the pattern, and the file as written on request."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
import torch
from onnx import helper

from tests.conftest import (TINY_ARCHS, WRITTEN_VS_IN_MEMORY_MAX_ABS_REL, assert_matches_official, export_tiny_targets,
                            load_benchmark, max_abs_rel, tiny_encoder)
from vitdeploy.cpu_optimize import write_cpu_form
from vitdeploy.errors import InputError
from vitdeploy.runtime.forms.folded_attention import find_folded_attention
from vitdeploy.runtime.forms.folded_sdpa import sdpa_as_multihead_attention
from vitdeploy.runtime.backends.providers import plan_providers
from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner

ARCH = "padded_windows"  # two 3x3-window blocks and one 8x8 global block, head size 16
SEED = 17
#: The converted graph vs the tensorrt file as written on ONNX Runtime, max-abs error relative to the output scale
#: (the same products, summed in another order by another kernel).
CONVERTED_VS_WRITTEN_MAX_ABS_REL = 1e-5


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return export_tiny_targets(tmp_path_factory.mktemp("folded_sdpa"), ARCH, seed=SEED,
                               targets=("tensorrt", "onnxruntime-cpu"), dynamic_batch=True)


def _image(batch: int, seed: int) -> torch.Tensor:
    size = TINY_ARCHS[ARCH].img_size
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(seed))


def test_runner_runs_tensorrt_attention_as_multihead_attention(exports: dict[str, Path]) -> None:
    arch = TINY_ARCHS[ARCH]
    runner = OnnxRuntimeRunner(exports["tensorrt"], threads=2, fused_attention=False)
    written = OnnxRuntimeRunner(exports["tensorrt"], threads=2, folded_attention=True)
    assert len(runner.sdpa.changed) == arch.depth and runner.sdpa.kept == {}
    # ... then the onnxruntime-cpu target's default: the global block takes its rel-pos term as a bias.
    assert len(runner.unfold.changed) == len(arch.global_attn_indexes)
    assert written.sdpa is None and written.unfold is None  # the file as written: TensorRT's pattern
    assert any("run as ONNX Runtime's MultiHeadAttention" in note for note in runner.notes())
    official = tiny_encoder(ARCH, seed=SEED)
    for batch, seed in ((1, 0), (2, 1)):  # the Reshapes copy the batch axis: a dynamic batch runs too
        x = _image(batch, seed)
        out = assert_matches_official(official, runner, x, f"tensorrt target on the CPU, batch {batch}")
        as_written = written.run({"image": x.numpy()})["image_embeddings"]
        assert max_abs_rel(out, as_written) <= CONVERTED_VS_WRITTEN_MAX_ABS_REL


def test_converted_graph_is_the_onnxruntime_cpu_form(exports: dict[str, Path]) -> None:
    model, report = sdpa_as_multihead_attention(onnx.load(str(exports["tensorrt"])))
    onnx.checker.check_model(model)  # topologically sorted, every value defined, the contrib opset imported
    assert report.kept == {} and not [n for n in model.graph.node if n.op_type == "Softmax"]
    converted, _ = find_folded_attention(model.graph)
    reference, _ = find_folded_attention(onnx.load(str(exports["onnxruntime-cpu"])).graph)
    layouts = sorted((f.num_heads, f.head_dim, f.grid_h, f.grid_w) for f in converted)
    assert layouts == sorted((f.num_heads, f.head_dim, f.grid_h, f.grid_w) for f in reference)
    assert sorted(f.label for f in converted) == sorted(report.changed)
    # The values reach the attention unpadded: no Pad is left but the keys' (one per block).
    pads = [n for n in model.graph.node if n.op_type == "Pad"]
    padded_keys = {f.keys for f in converted}
    assert len([n for n in pads if n.input[0] in padded_keys]) == len(converted)


def _softmax_axis_two(model: onnx.ModelProto) -> int:
    """Every attention softmax over the queries instead of the keys (another function): in place, the count."""
    changed = 0
    for node in model.graph.node:
        if node.op_type == "Softmax":
            del node.attribute[:]
            node.attribute.append(helper.make_attribute("axis", 2))
            changed += 1
    return changed


def _probabilities_as_output(model: onnx.ModelProto) -> int:
    """The first softmax's output also a graph output (an intermediate used elsewhere)."""
    softmax = next(n for n in model.graph.node if n.op_type == "Softmax")
    model.graph.output.append(helper.make_tensor_value_info(softmax.output[0], onnx.TensorProto.FLOAT, None))
    return 1


@pytest.mark.parametrize("tamper, reason", [
    (_softmax_axis_two, "the softmax is not over the keys"),
    (_probabilities_as_output, "the softmax does not feed one P.V product"),
])
def test_only_the_proven_pattern_is_converted(exports: dict[str, Path], tmp_path: Path, tamper, reason: str) -> None:
    """A graph that is not exactly the folded pattern keeps its own function: converting it would change the numbers."""
    model = onnx.load(str(exports["tensorrt"]))
    changed = tamper(model)
    path = tmp_path / "tampered.onnx"
    onnx.save_model(model, str(path))
    runner = OnnxRuntimeRunner(path, threads=2)
    assert len(runner.sdpa.kept) == changed and set(runner.sdpa.kept.values()) == {reason}
    assert len(runner.sdpa.changed) == TINY_ARCHS[ARCH].depth - changed
    written = OnnxRuntimeRunner(path, threads=2, folded_attention=True)
    x = _image(1, 3).numpy()
    out = runner.run({"image": x})["image_embeddings"]
    as_written = written.run({"image": x})["image_embeddings"]
    assert max_abs_rel(out, as_written) <= CONVERTED_VS_WRITTEN_MAX_ABS_REL


def test_optimize_writes_the_tensorrt_exports_cpu_form(exports: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "tensorrt.cpu.onnx"
    result = write_cpu_form(exports["tensorrt"], out)
    in_memory = OnnxRuntimeRunner(exports["tensorrt"], threads=2, fused_attention=False)
    assert list(result.form.nodes) == in_memory.unfold.changed
    runner = OnnxRuntimeRunner(out, threads=2)
    assert runner.cpu_form is not None and runner.sdpa is None  # run as written: nothing left to convert
    x = _image(1, 4).numpy()
    same = in_memory.run({"image": x})["image_embeddings"]
    out_written = runner.run({"image": x})["image_embeddings"]
    assert max_abs_rel(out_written, same) <= WRITTEN_VS_IN_MEMORY_MAX_ABS_REL
    # The form holds ONNX Runtime contrib ops for its CPU provider: refused on a GPU before any session is made.
    with pytest.raises(InputError, match="is a CPU form written by 'vitdeploy optimize'.*run the exported file 'tensorrt.onnx'"):
        plan_providers(runner.metadata, "cuda", name="'tensorrt.cpu.onnx'")


def test_benchmark_fusion_check_reads_the_graph_the_runner_runs(exports: dict[str, Path]) -> None:
    """bench_encoder_speed's fusion check: a tensorrt file's attention counted as ONNX Runtime runs it on the CPU
    (MultiHeadAttention), not as the file is written (Softmax chains)."""
    module = load_benchmark("bench_encoder_speed")
    rows = [{"name": "tensorrt", "kind": "ort", "model": exports["tensorrt"].name, "settings": module.VITDEPLOY_ORT_SETTINGS}]
    checks = module.fusion_checks(exports["tensorrt"].parent, rows)
    assert checks["tensorrt"]["fused"]["attention"] == TINY_ARCHS[ARCH].depth
    assert checks["tensorrt"]["unfused"]["attention"] == 0
