"""Everything ``build-engine`` decides before and around TensorRT, tested where TensorRT is absent.

ONNX facts (precision read from the graph, inputs, external data), optimization profiles, option
checks against the installed TensorRT version, failure messages that name the node, the build log,
and the CLI's bad-input cases (exit 1, one line, nothing written). Small graphs are built with
``onnx.helper`` so these run in milliseconds.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.cli_helpers import assert_user_error, run
from tests.conftest import IR_VERSION
from vitdeploy.engine.build_log import BuildLog
from vitdeploy.engine.builder import BuildOptions, check_options, engine_precision
from vitdeploy.engine.library import TensorRTLibrary
from vitdeploy.engine.diagnostics import (ParserProblem, format_build_failure, format_parse_failure, nodes_named_in,
                                          parser_problems)
from vitdeploy.engine.onnx_facts import read_onnx_facts
from vitdeploy.engine.profiles import BatchProfile, input_profiles, parse_input_profile
from vitdeploy.errors import InputError
from vitdeploy.metadata import encode


def make_onnx(path: Path, *, batch: int | str = 1, kind: str = "fp32", external: bool = False,
              extra_dynamic: bool = False) -> Path:
    """y = x @ W (+ casts or Q/DQ by ``kind``) with vitdeploy metadata; ``batch`` may be symbolic."""
    w = numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4) / 10, "W")
    nodes = []
    src = "x"
    if kind == "fp16":
        w = numpy_helper.from_array(np.arange(16, dtype=np.float16).reshape(4, 4) / 10, "W")
        nodes.append(helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16, name="/in/Cast"))
        src = "x16"
    if kind == "int8":
        scale = numpy_helper.from_array(np.array(0.05, dtype=np.float32), "s")
        nodes += [helper.make_node("QuantizeLinear", ["x", "s"], ["xq"], name="/q/QuantizeLinear"),
                  helper.make_node("DequantizeLinear", ["xq", "s"], ["xd"], name="/q/DequantizeLinear")]
        src = "xd"
    out = "y16" if kind == "fp16" else "y"
    nodes.append(helper.make_node("MatMul", [src, "W"], [out], name="/blocks.0/attn/MatMul"))
    if kind == "fp16":
        nodes.append(helper.make_node("Cast", ["y16"], ["y"], to=TensorProto.FLOAT, name="/out/Cast"))
    inits = [w] + ([scale] if kind == "int8" else [])
    second = "tokens" if extra_dynamic else 8
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, second, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, second, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=IR_VERSION)
    for key, value in encode({"family": "sam_image_encoder", "precision": kind, "variant": "unit"}).items():
        model.metadata_props.add(key=key, value=value)
    if external:
        onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                  location=path.name + ".data", size_threshold=0)
    else:
        onnx.save(model, str(path))
    return path


# --- ONNX facts -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fp32", "fp16", "int8"])
def test_precision_is_read_from_the_graph(tmp_path: Path, kind: str) -> None:
    facts = read_onnx_facts(make_onnx(tmp_path / "m.onnx", kind=kind))
    assert facts.graph_precision == kind
    assert facts.metadata["family"] == "sam_image_encoder"
    assert facts.node_ops["/blocks.0/attn/MatMul"] == "MatMul"
    assert [(t.name, t.dtype, t.dims) for t in facts.inputs] == [("x", "float32", (1, 8, 4))]  # initializers excluded
    assert engine_precision(facts, legacy_fp16=False) == kind


def test_legacy_fp16_turns_an_fp32_graph_into_an_fp16_engine_only(tmp_path: Path) -> None:
    fp32 = read_onnx_facts(make_onnx(tmp_path / "a.onnx", kind="fp32"))
    int8 = read_onnx_facts(make_onnx(tmp_path / "b.onnx", kind="int8"))
    assert engine_precision(fp32, legacy_fp16=True) == "fp16"
    assert engine_precision(int8, legacy_fp16=True) == "int8"


def test_external_data_is_listed_and_a_missing_file_is_named(tmp_path: Path) -> None:
    path = make_onnx(tmp_path / "ext.onnx", external=True)
    facts = read_onnx_facts(path)
    assert [f.name for f in facts.external_data] == ["ext.onnx.data"]
    (tmp_path / "ext.onnx.data").unlink()
    with pytest.raises(InputError, match=r"keeps its weights in 'ext\.onnx\.data', which is missing"):
        read_onnx_facts(path)


def test_not_an_onnx_file(tmp_path: Path) -> None:
    bogus = tmp_path / "m.onnx"
    bogus.write_text("[model]\nfamily = 'x'\n")
    with pytest.raises(InputError, match="is not a readable ONNX file"):
        read_onnx_facts(bogus)
    with pytest.raises(InputError, match="not found"):
        read_onnx_facts(tmp_path / "absent.onnx")


# --- profiles ---------------------------------------------------------------------------------------------


def test_profiles(tmp_path: Path) -> None:
    static = read_onnx_facts(make_onnx(tmp_path / "s.onnx")).inputs
    dynamic = read_onnx_facts(make_onnx(tmp_path / "d.onnx", batch="batch")).inputs
    tokens = read_onnx_facts(make_onnx(tmp_path / "t.onnx", batch="batch", extra_dynamic=True)).inputs
    assert input_profiles(static, None) == {}
    assert input_profiles(dynamic, BatchProfile(1, 2, 8)) == {"x": {"min": [1, 8, 4], "opt": [2, 8, 4], "max": [8, 8, 4]}}
    with pytest.raises(InputError, match="has only static inputs .*re-export with --dynamic-batch"):
        input_profiles(static, BatchProfile(1, 1, 2))
    with pytest.raises(InputError, match="dynamic batch axis on 'x': give --batch-profile MIN OPT MAX"):
        input_profiles(dynamic, None)
    with pytest.raises(InputError, match=r"dynamic axes \[0, 1\].*--input-profile x=MIN:OPT:MAX"):
        input_profiles(tokens, BatchProfile(1, 1, 2))
    explicit = dict([parse_input_profile("x=1x1x4:2x5x4:4x16x4")])
    assert input_profiles(tokens, None, explicit)["x"]["opt"] == [2, 5, 4]
    with pytest.raises(InputError, match="axis 2 is static"):
        input_profiles(tokens, None, dict([parse_input_profile("x=1x1x3:1x1x3:1x1x3")]))
    with pytest.raises(InputError, match=r"names \['nope'\]"):
        input_profiles(tokens, None, dict([parse_input_profile("nope=1:1:1")]))


def test_profile_recorded_by_the_exporter_is_the_default(tmp_path: Path) -> None:
    tokens = read_onnx_facts(make_onnx(tmp_path / "t.onnx", batch=1, extra_dynamic=True)).inputs
    recorded = {"x": {"min": [1, 1, 4], "opt": [1, 2, 4], "max": [1, 32, 4]}, "not_an_input": {"min": [1]}}
    assert input_profiles(tokens, None, None, "m", recorded) == {"x": recorded["x"]}
    explicit = dict([parse_input_profile("x=1x1x4:1x4x4:1x8x4")])
    assert input_profiles(tokens, None, explicit, "m", recorded)["x"]["max"] == [1, 8, 4]
    with pytest.raises(InputError, match="recorded shape_profile for 'x': axis 2 is static"):
        input_profiles(tokens, None, None, "m", {"x": {"min": [1, 1, 3], "opt": [1, 1, 3], "max": [1, 1, 3]}})
    with pytest.raises(InputError, match="is not min/opt/max shapes"):
        input_profiles(tokens, None, None, "m", {"x": {"min": [1, 1, 4]}})


@pytest.mark.parametrize(
    ("text", "message"),
    [("x1x3", "is not NAME=MIN:OPT:MAX"), ("x=1x3:1x3", "is not NAME=MIN:OPT:MAX"), ("x=ax3:1x3:1x3", "is not NAME"),
     ("x=1x3:1x3x1:1x3", "different ranks"), ("x=4x3:2x3:8x3", "0 <= MIN <= OPT <= MAX")],
)
def test_bad_input_profile_text(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_input_profile(text)


def test_batch_profile_order() -> None:
    with pytest.raises(InputError, match="is not ordered"):
        BatchProfile(4, 2, 8)


# --- options against the installed TensorRT version --------------------------------------------------------


def test_legacy_fp16_only_on_tensorrt_10() -> None:
    check_options(BuildOptions(legacy_fp16=True), "10.13.0.35")
    with pytest.raises(InputError, match=r"--legacy-fp16 needs TensorRT 10; TensorRT 11\.1\.0 removed weak typing"):
        check_options(BuildOptions(legacy_fp16=True), "11.1.0")
    with pytest.raises(InputError, match="outside 0..5"):
        check_options(BuildOptions(optimization_level=7), "10.13.0")
    with pytest.raises(InputError, match="--hardware-compatibility must be one of"):
        check_options(BuildOptions(hardware_compatibility="turing_plus"), "10.13.0")


def test_strongly_typed_flag_is_set_on_10_and_left_to_the_default_on_11() -> None:
    # A stand-in exposing only the enum value vitdeploy reads: this checks vitdeploy's choice of flags.
    fake = SimpleNamespace(NetworkDefinitionCreationFlag=SimpleNamespace(STRONGLY_TYPED=0))
    assert TensorRTLibrary(fake, "10.13.0.35").network_flags(legacy_fp16=False) == 1
    assert TensorRTLibrary(fake, "10.13.0.35").network_flags(legacy_fp16=True) == 0
    assert TensorRTLibrary(fake, "11.1.0.1").network_flags(legacy_fp16=False) == 0


def test_options_land_in_the_sidecar_as_plain_json() -> None:
    d = BuildOptions(batch_profile=BatchProfile(1, 2, 4), workspace_mib=512).to_dict()
    assert d["batch_profile"] == {"min": 1, "opt": 2, "max": 4} and d["workspace_mib"] == 512 and d["tf32"] is False


# --- failure messages -------------------------------------------------------------------------------------


def test_parse_failure_names_node_op_and_tensorrt_message() -> None:
    problems = [ParserProblem(3, "/blocks.0/attn/Einsum", "Einsum", "UNSUPPORTED_NODE", "Unsupported equation bhwc,hkc->bhwk\n")]
    text = format_parse_failure("m.onnx", problems)
    assert "TensorRT cannot parse 'm.onnx': node '/blocks.0/attn/Einsum' (Einsum): Unsupported equation bhwc,hkc->bhwk [UNSUPPORTED_NODE]" in text
    many = problems * 5
    assert "(+2 more)" in format_parse_failure("m.onnx", many)
    graph_level = ParserProblem(-1, "", "?", "INVALID_GRAPH", "bad opset")
    assert "the graph: bad opset" in format_parse_failure("m.onnx", [graph_level])


def test_parser_problems_reads_the_parser_error_accessors() -> None:
    # Stand-ins with IParserError's documented accessors: checks that every field is copied over.
    err = SimpleNamespace(node=lambda: 7, node_name=lambda: "/neck/Conv", node_operator=lambda: "Conv",
                          code=lambda: "ErrorCode.UNSUPPORTED_NODE", desc=lambda: "kernel weights must be constant")
    parser = SimpleNamespace(num_errors=1, get_error=lambda i: err)
    assert parser_problems(parser) == [ParserProblem(7, "/neck/Conv", "Conv", "UNSUPPORTED_NODE", "kernel weights must be constant")]


def test_build_failure_names_the_longest_matching_node() -> None:
    nodes = {"/attn/MatMul": "MatMul", "/attn/MatMul_1": "MatMul", "/attn/Softmax": "Softmax"}
    errors = ["[graphShapeAnalyzer] /attn/MatMul_1: mismatched dims 64 and 65", "Network validation failed."]
    assert nodes_named_in(errors, nodes) == [("/attn/MatMul_1", "MatMul")]
    text = format_build_failure("m.onnx", errors, nodes)
    assert "(failing node '/attn/MatMul_1' (MatMul))" in text and "mismatched dims 64 and 65" in text
    assert "no error was logged" in format_build_failure("m.onnx", [], nodes)


def test_build_log_keeps_errors_dedupes_warnings_and_writes_everything(tmp_path: Path) -> None:
    shown: list[str] = []
    with BuildLog(tmp_path / "build.log", shown.append) as log:
        log.note("options {}")
        for level, msg in [("V", "tactic 12"), ("W", "layernorm overflow"), ("W", "layernorm overflow"), ("E", "boom")]:
            log.record(level, msg)
    assert log.errors == ["boom"] and log.warnings == ["layernorm overflow"]
    assert shown == ["TensorRT warning: layernorm overflow"]
    assert (tmp_path / "build.log").read_text().splitlines() == [
        "[vitdeploy] options {}", "[V] tactic 12", "[W] layernorm overflow", "[W] layernorm overflow", "[E] boom"]
    quiet = BuildLog()
    assert not quiet.verbose


# --- CLI: bad input, and no TensorRT --------------------------------------------------------------------


def test_build_engine_without_either_library_names_both_installs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # import tensorrt -> ImportError, on any machine
    monkeypatch.setitem(sys.modules, "tensorrt_rtx_bindings", None)
    model = make_onnx(tmp_path / "m.onnx")
    code, output = run("build-engine", str(model), "-o", str(tmp_path / "m.plan"))
    assert_user_error(code, output, "neither TensorRT nor TensorRT for RTX imports here", "vitdeploy[tensorrt-rtx]",
                      "pip install tensorrt")
    assert not (tmp_path / "m.plan").exists() and not (tmp_path / "m.plan.json").exists()


@pytest.mark.parametrize(("builder", "blocked", "needles"), [
    ("tensorrt", "tensorrt", ["needs the 'tensorrt' package", "pip install tensorrt", "vitdeploy[tensorrt]"]),
    ("tensorrt-rtx", "tensorrt_rtx_bindings", ["needs the 'tensorrt-rtx' package", "vitdeploy[tensorrt-rtx]", "-cu12"]),
])
def test_the_named_builder_missing_names_its_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, builder: str,
                                                      blocked: str, needles: list[str]) -> None:
    monkeypatch.setitem(sys.modules, blocked, None)
    model = make_onnx(tmp_path / "m.onnx")
    code, output = run("build-engine", str(model), "-o", str(tmp_path / "m.plan"), "--builder", builder)
    assert_user_error(code, output, *needles)
    assert not (tmp_path / "m.plan").exists()


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["{d}/absent.onnx", "-o", "{d}/m.plan"], ["absent.onnx' not found"]),
        (["{d}/notes.txt", "-o", "{d}/m.plan"], ["is not a readable ONNX file"]),
        (["{d}/dyn.onnx", "-o", "{d}/m.plan"], ["dynamic batch axis", "--batch-profile MIN OPT MAX"]),
        (["{d}/m.onnx", "-o", "{d}/m.plan", "--batch-profile", "1", "2", "4"], ["only static inputs"]),
        (["{d}/dyn.onnx", "-o", "{d}/m.plan", "--batch-profile", "4", "2", "8"], ["is not ordered"]),
        (["{d}/dyn.onnx", "-o", "{d}/m.plan", "--input-profile", "x=1x8x4"], ["is not NAME=MIN:OPT:MAX"]),
        (["{d}/m.onnx", "-o", "{d}/m.onnx"], ["is the ONNX file itself"]),
        (["{d}/m.onnx", "-o", "{d}/missing_dir/m.plan"], ["does not exist"]),
    ],
)
def test_build_engine_bad_input(tmp_path: Path, args: list[str], needles: list[str]) -> None:
    make_onnx(tmp_path / "m.onnx")
    make_onnx(tmp_path / "dyn.onnx", batch="batch")
    (tmp_path / "notes.txt").write_text("hello")
    code, output = run("build-engine", *[a.format(d=tmp_path) for a in args])
    assert_user_error(code, output, *needles)
    assert not (tmp_path / "m.plan").exists()


def test_build_engine_usage_errors_and_help() -> None:
    code, output = run("build-engine", "m.onnx", "-o", "m.plan", "--optimization-level", "9")
    assert code == 2, output
    code, output = run("build-engine", "m.onnx")
    assert code == 2 and "--output" in output
    code, output = run("build-engine", "--help")
    assert code == 0 and "vitdeploy build-engine sam_vit_b.onnx -o sam_vit_b.plan" in output and "--legacy-fp16" in output


def test_profile_goes_through_polygraphy_with_static_inputs_filled_in() -> None:
    """vitdeploy's use of Polygraphy's ``Profile`` (the real one): dynamic ranges as given, static inputs at
    their shapes. The network/builder/config stand-ins expose only the attributes Polygraphy reads and
    record what it sets; nothing here claims TensorRT built anything."""
    pytest.importorskip("polygraphy")
    from vitdeploy.engine.builder import _add_profile

    class Recorder:
        def __init__(self) -> None:
            self.shapes: dict[str, tuple] = {}

        def set_shape(self, name: str, lo: tuple, mid: tuple, hi: tuple) -> None:
            self.shapes[name] = (tuple(lo), tuple(mid), tuple(hi))

        def __bool__(self) -> bool:
            return True

    inputs = [SimpleNamespace(name="image_embeddings", shape=(1, 8, 4, 4), dtype="float32", is_shape_tensor=False),
              SimpleNamespace(name="point_coords", shape=(1, -1, 2), dtype="float32", is_shape_tensor=False)]
    network = SimpleNamespace(num_inputs=2, get_input=lambda i: inputs[i])
    recorder = Recorder()
    builder = SimpleNamespace(create_optimization_profile=lambda: recorder)
    added: list[object] = []
    config = SimpleNamespace(add_optimization_profile=added.append)
    _add_profile(builder, network, config, {"point_coords": {"min": [1, 1, 2], "opt": [1, 2, 2], "max": [1, 32, 2]}})
    assert added == [recorder]
    assert recorder.shapes == {"image_embeddings": ((1, 8, 4, 4),) * 3, "point_coords": ((1, 1, 2), (1, 2, 2), (1, 32, 2))}


def test_options_map_to_polygraphy_create_config_arguments(tmp_path: Path) -> None:
    """Which ``CreateConfig`` arguments each option sets (enum members read from a stand-in), and that
    Polygraphy's real ``CreateConfig`` accepts them."""
    poly = pytest.importorskip("polygraphy.backend.trt")
    from vitdeploy.engine.builder import config_kwargs

    enums = SimpleNamespace(MemoryPoolType=SimpleNamespace(WORKSPACE="WORKSPACE"),
                            HardwareCompatibilityLevel=SimpleNamespace(AMPERE_PLUS="AMPERE_PLUS", SAME_COMPUTE_CAPABILITY="SCC"))
    assert config_kwargs(enums, BuildOptions(), False) == {"tf32": False, "fp16": False}
    options = BuildOptions(workspace_mib=1024, timing_cache=str(tmp_path / "t.cache"), optimization_level=4,
                           hardware_compatibility="ampere_plus", version_compatible=True, tf32=True)
    kwargs = config_kwargs(enums, options, timing_cache_exists=True)
    assert kwargs == {"tf32": True, "fp16": False, "memory_pool_limits": {"WORKSPACE": 1024 << 20},
                      "load_timing_cache": str(tmp_path / "t.cache"), "builder_optimization_level": 4,
                      "hardware_compatibility_level": "AMPERE_PLUS", "version_compatible": True}
    assert "load_timing_cache" not in config_kwargs(enums, options, timing_cache_exists=False)
    assert config_kwargs(enums, BuildOptions(legacy_fp16=True), False)["fp16"] is True
    old_trt = SimpleNamespace(__version__="10.8.0", HardwareCompatibilityLevel=SimpleNamespace(AMPERE_PLUS="A"))
    with pytest.raises(InputError, match="same_compute_capability is not in TensorRT 10.8.0"):
        config_kwargs(old_trt, BuildOptions(hardware_compatibility="same_compute_capability"), False)
    loader = poly.CreateConfig(**kwargs)  # no TypeError: every argument exists in this Polygraphy
    assert loader.builder_optimization_level == 4 and loader.version_compatible and loader.tf32
    assert not loader.int8 and loader.calibrator is None and loader.quantization_flags is None


def test_onnxruntime_cpu_target_is_refused_before_tensorrt(tmp_path) -> None:
    """A graph with ONNX Runtime contrib ops cannot go to TensorRT: say so, whatever is installed."""
    import onnx
    from onnx import TensorProto, helper

    from vitdeploy.engine.builder import BuildOptions, build_engine
    from vitdeploy.errors import InputError

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])])
    model = helper.make_model(graph)
    model.metadata_props.append(onnx.StringStringEntryProto(key="vitdeploy.target", value="onnxruntime-cpu"))
    path = tmp_path / "cpu.onnx"
    onnx.save(model, str(path))
    with pytest.raises(InputError, match="--target tensorrt"):
        build_engine(path, tmp_path / "cpu.plan", BuildOptions())
    assert not (tmp_path / "cpu.plan").exists()
