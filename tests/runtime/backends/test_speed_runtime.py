"""ONNX Runtime session settings through OnnxRuntimeRunner: same numbers, the fusions they promise, INT8 kept integer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from precision_fixtures import calib_cache, calibration_feeds, export_tiny  # noqa: F401  (fixtures)
from vitdeploy.errors import InputError
from vitdeploy.metadata import encode
from vitdeploy.runtime.backends.ort_fusions import fusion_report, optimized_graph
from vitdeploy.metadata import read_metadata_props
from vitdeploy.runtime.backends.ort_settings import INT8_DISABLED_OPTIMIZERS, OrtSettings, default_memory_pattern
from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner


@pytest.fixture(scope="module")
def fp32_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_tiny(tmp_path_factory.mktemp("speed") / "tiny.onnx")


@pytest.fixture(scope="module")
def int8_model(fp32_model: Path, calib_cache: Path) -> Path:  # noqa: F811  (fixture)
    from vitdeploy.precision.int8 import Int8Config, quantize_int8
    from vitdeploy.precision.report import read_metadata, stamp_metadata

    cal, _ = calibration_feeds(fp32_model, calib_cache)
    model = onnx.load(str(fp32_model))
    qmodel, _, _ = quantize_int8(model, cal[:4], Int8Config())
    stamp_metadata(qmodel, {**read_metadata(model), "precision": "int8"})
    path = fp32_model.parent / "tiny_int8.onnx"
    onnx.save(qmodel, str(path))
    return path


def _input() -> dict[str, np.ndarray]:
    return {"image": np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)}


def test_settings_change_speed_knobs_not_numbers(fp32_model: Path, tmp_path: Path) -> None:
    default = OnnxRuntimeRunner(fp32_model, threads=2)
    tuned = OnnxRuntimeRunner(fp32_model, threads=2, optimization="extended", optimized_model_path=tmp_path / "opt.onnx",
                              memory_arena=False, memory_pattern=False, spinning=False, io_binding=True,
                              session_config={"session.intra_op.allow_spinning": "0"})
    plain = OnnxRuntimeRunner(fp32_model, threads=1, optimization="disable")
    ref = default.run(_input())["image_embeddings"]
    for runner in (tuned, plain):
        out = runner.run(_input())["image_embeddings"]
        assert out.shape == ref.shape and float(np.abs(out - ref).max() / np.abs(ref).max()) < 1e-5
    assert (tmp_path / "opt.onnx").is_file()
    assert tuned.settings.to_dict()["io_binding"] and not tuned.settings.memory_arena
    # I/O binding writes into the runner's own output array: a second run reuses it.
    first = tuned.run(_input())["image_embeddings"]
    second = tuned.run({"image": np.zeros((1, 3, 64, 64), np.float32)})["image_embeddings"]
    assert first is second


def test_memory_pattern_is_off_on_the_cpu_unless_asked_for(fp32_model: Path) -> None:
    """ONNX Runtime's default is on; vitdeploy's runner turns it off on the CPU (see default_memory_pattern)."""
    assert not OnnxRuntimeRunner(fp32_model, threads=1).session.get_session_options().enable_mem_pattern
    assert OnnxRuntimeRunner(fp32_model, threads=1, memory_pattern=True).session.get_session_options().enable_mem_pattern
    assert default_memory_pattern("cuda") and default_memory_pattern("tensorrt") and not default_memory_pattern("cpu")


def test_metadata_is_read_without_loading_the_graph(fp32_model: Path) -> None:
    model = onnx.load(str(fp32_model), load_external_data=False)
    assert read_metadata_props(fp32_model) == {p.key: p.value for p in model.metadata_props}
    assert read_metadata_props(fp32_model)["vitdeploy.precision"] == encode({"precision": "fp32"})["vitdeploy.precision"]


def test_not_onnx_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\xff\xff\xff\xff\x0f")
    with pytest.raises(InputError):
        read_metadata_props(bad)
    with pytest.raises(InputError, match="unknown graph optimization level 'fast'"):
        OrtSettings(optimization="fast")
    with pytest.raises(InputError, match="threads must be at least 1"):
        OrtSettings(threads=0)


def test_int8_graph_runs_integer_kernels_by_default(int8_model: Path, fp32_model: Path, tmp_path: Path) -> None:
    """MatMulAddFusion is skipped for Q/DQ graphs, so DQ->MatMul becomes MatMulIntegerToFloat, not a float Gemm."""
    runner = OnnxRuntimeRunner(int8_model, threads=2)
    assert runner.disabled_optimizers == list(INT8_DISABLED_OPTIMIZERS)
    assert OnnxRuntimeRunner(fp32_model, threads=2).disabled_optimizers == []
    assert OnnxRuntimeRunner(fp32_model, threads=2).int8_kernels is None
    auto = fusion_report(optimized_graph(int8_model, tmp_path / "auto.onnx", OrtSettings(optimization="extended")))
    forced = fusion_report(optimized_graph(int8_model, tmp_path / "forced.onnx",
                                           OrtSettings(optimization="extended", disabled_optimizers=())))
    print(f"int8 kernels: auto {auto.fused['int8']} (fake-quant {auto.unfused['int8']}), "
          f"with MatMulAddFusion {forced.fused['int8']} (fake-quant {forced.unfused['int8']})")
    assert auto.fused["int8"] > forced.fused["int8"]
    assert auto.unfused["int8"] < forced.unfused["int8"]
    # Same numbers either way (integer kernels vs float math on dequantized values).
    a = runner.run(_input())["image_embeddings"]
    b = OnnxRuntimeRunner(int8_model, threads=2, disabled_optimizers=())
    assert _rel_max_abs(a, b.run(_input())["image_embeddings"]) < INT8_KERNEL_VS_FLOAT


#: Integer kernels vs the Q/DQ graph computed in float (what TensorRT computes), max-abs / max|ref|:
#: int32 accumulation of exact int8 products differs from float only in rounding.
INT8_KERNEL_VS_FLOAT = 1e-3
#: What makes an AVX-512 machine decide like an AVX2-only one (and the other way round is the real CPU).
AVX2_ONLY_MASK = "avx512*,amx*,avx_vnni"


def _rel_max_abs(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def _float_semantics(int8_model: Path) -> np.ndarray:
    """The Q/DQ graph with no graph optimization: every DQ -> MatMul computed in float."""
    return OnnxRuntimeRunner(int8_model, threads=2, optimization="disable").run(_input())["image_embeddings"]


def test_int8_kernels_match_float_semantics_on_this_cpu(int8_model: Path) -> None:
    """Whatever this CPU is, the kernels the runner picks compute the graph's own numbers."""
    from vitdeploy.cpu_features import cpu_features

    cpu = cpu_features()
    runner = OnnxRuntimeRunner(int8_model, threads=2)
    err = _rel_max_abs(runner.run(_input())["image_embeddings"], _float_semantics(int8_model))
    print(f"{cpu.summary()}: {runner.int8_kernels}; max-abs vs float semantics {err:.2e}")
    assert err < INT8_KERNEL_VS_FLOAT
    assert runner.int8_kernels.startswith("u8u8" if cpu.u8s8_saturates else "u8s8")


def test_int8_kernels_on_a_cpu_without_vnni(int8_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Forced on any CPU: deciding as on an AVX2-only one picks the exact u8u8 kernels, with the same numbers."""
    monkeypatch.setenv("VITDEPLOY_CPU_MASK", AVX2_ONLY_MASK)
    runner = OnnxRuntimeRunner(int8_model, threads=2)
    assert runner.int8_kernels.startswith("u8u8") and "session.x64quantprecision=1" in runner.int8_kernels
    assert _rel_max_abs(runner.run(_input())["image_embeddings"], _float_semantics(int8_model)) < INT8_KERNEL_VS_FLOAT


def test_default_u8s8_kernels_saturate_exactly_where_the_cpu_says(int8_model: Path, monkeypatch) -> None:
    """The root cause, measured on the CPU at hand: ONNX Runtime's default u8s8 kernels (option off) match the
    float semantics on CPUs with VNNI/AMX and miss them on CPUs without (int16 pair sums saturate). The hardware
    answers here, so its real flags decide, whatever VITDEPLOY_CPU_MASK hides from vitdeploy's own decisions."""
    from vitdeploy.cpu_features import MASK_ENV, cpu_features

    monkeypatch.delenv(MASK_ENV, raising=False)

    default = OnnxRuntimeRunner(int8_model, threads=2, session_config={"session.x64quantprecision": "0"})
    assert "given by the caller" in default.int8_kernels
    err = _rel_max_abs(default.run(_input())["image_embeddings"], _float_semantics(int8_model))
    cpu = cpu_features()
    print(f"{cpu.summary()}: default u8s8 kernels, max-abs vs float semantics {err:.2e}")
    if cpu.u8s8_saturates:
        assert err > INT8_KERNEL_VS_FLOAT, "no saturation measured on a CPU without VNNI: revisit int8_kernels()"
    else:
        assert err < INT8_KERNEL_VS_FLOAT


def test_benchmark_and_validate_say_what_the_cpu_does_with_fp16_and_int8(int8_model: Path, fp32_model: Path) -> None:
    """A newcomer saw FP16/INT8 files run slower than FP32 on the CPU with no word of why."""
    from click.testing import CliRunner

    from vitdeploy.cli import cli
    from vitdeploy.precision.half_precision import rewrite_to_half
    from vitdeploy.precision.report import read_metadata, stamp_metadata
    from vitdeploy.runtime.backends.ort_fusions import fp16_fallback_ops

    model = onnx.load(str(fp32_model))
    fp16 = rewrite_to_half(model, [n.name for n in model.graph.node if n.op_type == "LayerNormalization"])
    stamp_metadata(fp16, {**read_metadata(model), "precision": "fp16"})
    fp16_path = fp32_model.parent / "tiny_fp16.onnx"
    onnx.save(fp16, str(fp16_path))
    # What ONNX Runtime's CPU provider runs in FP16 depends on the CPU and the version: the note must say what the
    # graph it optimized here shows, whichever it is.
    ops, _ = fp16_fallback_ops(optimized_graph(fp16_path, fp32_model.parent / "fp16_opt.onnx", OrtSettings()))
    expected = (f"fp16 on this CPU: ONNX Runtime has no FP16 CPU kernel for {sum(ops.values())} node(s)" if ops
                else "fp16 on this CPU: every FP16 node has an FP16 CPU kernel here")

    bench = CliRunner().invoke(cli, ["benchmark", str(fp16_path), str(int8_model), "--no-eager", "--runs", "1",
                                     "--warmup", "0", "--threads", "2"])
    assert bench.exit_code == 0, bench.output
    assert expected in bench.output, bench.output
    assert "int8 on this CPU: " in bench.output and "integer kernel(s) (" in bench.output
    val = CliRunner().invoke(cli, ["validate", str(fp16_path), "--random-inputs", "1", "--runs", "1"])
    assert "fp16 on this CPU" in val.output, val.output
    fp32 = CliRunner().invoke(cli, ["benchmark", str(fp32_model), "--no-eager", "--runs", "1", "--warmup", "0"])
    assert fp32.exit_code == 0 and "on this CPU:" not in fp32.output, fp32.output
