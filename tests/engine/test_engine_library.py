"""The two TensorRT libraries' differences, decided in one place: library choice, compute capabilities, the
rules for running a TensorRT-RTX engine, and the builder's layer list read into per-layer precisions.

Pure functions, no GPU and (but for the library choice) no TensorRT needed.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from vitdeploy.engine.compat import RunningEnvironment, check_rtx_engine_compat
from vitdeploy.engine.layers import parse_layer_list, summarize_layers
from vitdeploy.engine.library import CLASSIC, RTX, library_of_sidecar, load_library, parse_compute_capability
from vitdeploy.errors import EngineError, InputError, MissingDependencyError

#: Two lines of TensorRT-RTX 1.7.1.116's layer list (an INT8 GEMM, a shape layer), as its builder logged them.
LAYER_LIST = (
    "Layers:\n"
    "Name: node_linear_myl0_3, LayerType: gemm, Inputs: [ { Name: a, Dimensions: [1,4,8], Strides: [32,8,1], "
    "StrideOrder: [2,1,0], Datatype: Int8, Format: (Linear) Row major linear format }], Constants: [ { Name: w, "
    "Dimensions: [1,8,8], Datatype: Int8, Format: (Linear) }, { Name: s, Dimensions: [1], Datatype: Float, "
    "Format: (Linear) }], Outputs: [ { Name: y, Dimensions: [1,4,8], Datatype: Float, Format: (Linear) }], "
    "TacticName: __myelin_CASK_STUB, StreamId: 0, Metadata: [ONNX Layer: node_linear][ONNX Layer: w_DequantizeLinear]\n"
    "Name: shape_0, LayerType: shape_call, Inputs: [ { Name: p, Dimensions: [2], Datatype: Int64, Format: (Linear) }], "
    "Outputs: [ { Name: q, Dimensions: [2], Datatype: Int64, Format: (Linear) }], TacticName: x, StreamId: 0, Metadata: \n"
    "Name: norm_1, LayerType: kgen, Inputs: [ { Name: h, Dimensions: [1,4,8], Datatype: Half, Format: (Linear) }], "
    "Outputs: [ { Name: o, Dimensions: [1,4,8], Datatype: Float, Format: (Linear) }], TacticName: x, StreamId: 0, "
    "Metadata: [ONNX Layer: /norm]\n"
)


def test_layer_list_reads_types_datatypes_and_onnx_nodes() -> None:
    gemm, shape, norm = parse_layer_list(LAYER_LIST)
    assert (gemm.name, gemm.type, gemm.inputs, gemm.constants, gemm.outputs) == (
        "node_linear_myl0_3", "gemm", ["Int8"], ["Int8", "Float"], ["Float"])
    assert gemm.onnx_nodes == ["node_linear", "w_DequantizeLinear"] and gemm.precision == "int8"
    assert shape.precision == "other" and shape.onnx_nodes == []
    assert norm.precision == "fp16"  # what it reads, not what it writes
    summary = summarize_layers([gemm, shape, norm])
    assert summary["by_precision"] == {"fp16": 1, "int8": 1, "other": 1} and summary["count"] == 3
    assert summary["by_type_and_precision"] == {"gemm:int8": 1, "kgen:fp16": 1, "shape_call:other": 1}


def test_layer_list_skips_lines_that_are_not_layers() -> None:
    assert parse_layer_list("Layers:\n\nsomething else\n") == []


@pytest.mark.parametrize(("text", "value"), [("8.6", "8.6"), ("86", "8.6"), ("sm_120", "12.0"), ("SM75", "7.5"),
                                             (" 12.1 ", "12.1")])
def test_compute_capability_spellings(text: str, value: str) -> None:
    assert parse_compute_capability(text) == value


@pytest.mark.parametrize("text", ["9.0", "7.0", "abc", "", "8.65"])
def test_compute_capabilities_tensorrt_rtx_cannot_target_are_refused(text: str) -> None:
    with pytest.raises(InputError, match="is not one TensorRT-RTX can target: use one of 7.5, 8.0"):
        parse_compute_capability(text)


def _sidecar(targets: list[str] | None = None, version: str = "1.7.1.116") -> dict:
    return {"tensorrt": {"version": version, "library": "tensorrt-rtx"}, "onnx": {"file": "m.onnx"},
            "gpu": {"name": None, "compute_capability": None, **({"targets": targets} if targets else {})}}


@pytest.mark.parametrize(("cc", "outcome"), [("8.6", "runs"), ("12.0", "runs"), ("12.1", "runs"), ("13.0", "runs"),
                                             ("9.0", "no rtx"), ("10.0", "no rtx"), ("11.0", "no rtx"), ("8.7", "no rtx"),
                                             ("7.5", "refused"), ("6.1", "no rtx")])
def test_rtx_engine_with_default_targets(cc: str, outcome: str) -> None:
    """Default targets run on 8.0/8.6/8.9 and 12.0 "and later" (past 12.0); on 9.0 to 11.x TensorRT-RTX runs nothing
    (its own refusal on an H100), which is said before the plan is read, naming classic TensorRT and ONNX Runtime CUDA."""
    env = RunningEnvironment("1.7.1.116", "NVIDIA X", cc)
    if outcome == "refused":
        with pytest.raises(EngineError, match=f"built for compute capability 8.0, 8.6, 8.9, 12.0 and this GPU is NVIDIA X "
                                              rf"\(compute capability {cc}\).*--compute-capability {cc}"):
            check_rtx_engine_compat(_sidecar(), env, "m.plan")
        return
    if outcome == "no rtx":
        with pytest.raises(EngineError, match=rf"'m.plan' is a TensorRT-RTX engine and TensorRT-RTX runs no engine on NVIDIA X "
                                              rf"\(compute capability {cc}\).*--builder tensorrt'.*onnxruntime-gpu"):
            check_rtx_engine_compat(_sidecar(["8.0", "8.6", "8.9", "12.0"]), env, "m.plan")
        return
    assert check_rtx_engine_compat(_sidecar(["8.0", "8.6", "8.9", "12.0"]), env, "m.plan") == []


def test_rtx_engine_built_for_named_targets_runs_only_there() -> None:
    assert check_rtx_engine_compat(_sidecar(["7.5"]), RunningEnvironment("1.7.1.116", "RTX 2080", "7.5")) == []
    with pytest.raises(EngineError, match="built for compute capability 7.5 and this GPU"):
        check_rtx_engine_compat(_sidecar(["7.5"]), RunningEnvironment("1.7.1.116", "RTX 4090", "8.9"))


def test_rtx_engine_from_another_release_is_refused() -> None:
    with pytest.raises(EngineError, match="built with TensorRT-RTX 1.6.0.1 and this is TensorRT-RTX 1.7.1.116.*--builder tensorrt-rtx"):
        check_rtx_engine_compat(_sidecar(version="1.6.0.1"), RunningEnvironment("1.7.1.116", "RTX 4090", "8.9"))


def test_library_of_sidecar() -> None:
    assert library_of_sidecar({"tensorrt": {"version": "10.13"}}) == CLASSIC  # sidecars from before TensorRT-RTX
    assert library_of_sidecar({"tensorrt": {"library": "tensorrt-rtx"}}) == RTX
    with pytest.raises(InputError, match="unknown TensorRT library 'onnx'"):
        library_of_sidecar({"tensorrt": {"library": "onnx"}})


def test_auto_takes_classic_first_then_rtx(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_classic = SimpleNamespace(__version__="10.13.0.35")
    fake_rtx = SimpleNamespace(__version__="1.7.1.116")
    monkeypatch.setitem(sys.modules, "tensorrt", fake_classic)
    monkeypatch.setitem(sys.modules, "tensorrt_rtx_bindings", fake_rtx)
    chosen = load_library("auto", "building")
    assert chosen.name == CLASSIC and chosen.module is fake_classic and chosen.label == "TensorRT 10.13.0.35"
    assert chosen.weak_typing and not chosen.builds_without_gpu
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    chosen = load_library("auto", "building")
    assert chosen.name == RTX and chosen.label == "TensorRT-RTX 1.7.1.116" and chosen.builds_without_gpu
    assert not chosen.weak_typing and chosen.network_flags(legacy_fp16=False) == 0
    monkeypatch.setitem(sys.modules, "tensorrt", SimpleNamespace(__version__="8.6.1"))
    with pytest.raises(MissingDependencyError, match="TensorRT 8.6.1 is too old"):
        load_library("tensorrt", "building")
    with pytest.raises(InputError, match="unknown TensorRT builder 'trt'"):
        load_library("trt", "building")


def test_each_library_says_on_which_gpu_it_runs_no_engine() -> None:
    """The type answers (no caller tests which library it holds): TensorRT-RTX refuses Hopper (9.0) in one line
    naming what to use instead and runs on Ada (8.9); classic TensorRT refuses no GPU it supports."""
    from types import SimpleNamespace

    from vitdeploy.engine.library import TensorRTForRTX, TensorRTLibrary

    rtx, classic = TensorRTForRTX(SimpleNamespace(), "1.7.1.116"), TensorRTLibrary(SimpleNamespace(), "10.13.0.35")
    refusal = rtx.gpu_refusal("NVIDIA H200", "9.0")
    assert refusal is not None and "TensorRT-RTX runs no engine on NVIDIA H200 (compute capability 9.0)" in refusal
    assert "--builder tensorrt" in refusal
    assert rtx.gpu_refusal("NVIDIA L4", "8.9") is None and classic.gpu_refusal("NVIDIA H200", "9.0") is None
