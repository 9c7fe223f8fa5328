"""TensorRT for RTX builds vitdeploy's engines for real, on this machine, with no GPU.

TensorRT-RTX's ahead-of-time build runs on the CPU, so the build side of ``build-engine`` runs here
for every family and every precision the ONNX side makes: the engine is written, its sidecar is
valid and names the library and the compute capabilities it targets, and ``inspect`` shows what
TensorRT-RTX made of each precision (its layer list). Running an engine needs an NVIDIA GPU: on a
CPU-only machine every verb that would run one says so in one line (checked here); on a GPU the
runner tests in test_engine_tensorrt.py run unchanged (``scripts/gpu-check.sh``).
"""

from __future__ import annotations

import importlib.util

import json
from pathlib import Path

import onnx
import pytest
from onnx import helper, numpy_helper

from tests.cli_helpers import run
from tests.conftest import IR_VERSION, TINY_RECIPE
from tests.family_exports import family_export
from vitdeploy.engine.builder import BuildOptions, build_engine, check_options
from vitdeploy.engine.library import RTX, RTX_DEFAULT_TARGETS, load_library
from vitdeploy.engine.sidecar import read_plan_checked, read_sidecar, sidecar_path
from vitdeploy.errors import InputError, MissingDependencyError

try:
    LIBRARY = load_library(RTX, "the TensorRT-RTX tests")
    RTX_REASON = None
except MissingDependencyError as exc:  # the dev extra installs it: CI never skips these
    LIBRARY, RTX_REASON = None, str(exc)
pytestmark = [pytest.mark.tensorrt_rtx,
              pytest.mark.skipif(RTX_REASON is not None, reason=f"needs TensorRT for RTX: {RTX_REASON}")]


def gpu_present() -> bool:
    from vitdeploy.cuda import query_gpu
    from vitdeploy.errors import VitdeployError

    try:
        query_gpu(0)
    except VitdeployError:
        return False
    return True


#: the files named here -> their family's tiny export, shared with the family contract (tests/family_exports.py)
SHARED = {"sam_encoder": "sam_image_encoder", "sam_decoder": "sam_mask_decoder", "timm_vit": "timm_vit",
          "timm_hiera": "timm_hiera", "sam3_vision": "sam3_vision_encoder", "sam3_detector": "sam3_detector",
          "sam3_interactive": "sam3_interactive_decoder", "sam3_memory_encoder": "sam3_memory_encoder",
          "sam3_memory_attention": "sam3_memory_attention"}


@pytest.fixture(scope="module")
def onnx_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every family's tiny export, and the encoder exported for TensorRT at each precision the ONNX side makes."""
    root = tmp_path_factory.mktemp("rtx")
    (root / "tiny.toml").write_text(TINY_RECIPE)
    files = {"root": root}
    for name, family in SHARED.items():
        if family.startswith("sam3") and importlib.util.find_spec("sam3") is None:
            continue  # the dev install has it (scripts/lib/venv.sh)
        files[name], _ = family_export(tmp_path_factory, family)
    files["sam_encoder_trt"] = root / "sam_encoder_trt.onnx"
    code, output = run("export", "-r", str(root / "tiny.toml"), "--target", "tensorrt", "--random-weights", "--seed", "5",
                       "-o", str(files["sam_encoder_trt"]))
    assert code == 0, output
    for precision in ("fp16", "bf16", "int8"):
        files[f"sam_encoder_trt_{precision}"] = root / f"sam_encoder_trt_{precision}.onnx"
        code, output = run("calibrate", str(files["sam_encoder_trt"]), "-p", precision, "--no-eager",
                           "-o", str(files[f"sam_encoder_trt_{precision}"]))
        assert code == 0, output
    return files


#: ONNX file -> (family, precision the sidecar records, precisions the layer list must show, must not show)
CASES = {
    "sam_encoder": ("sam_image_encoder", "fp32", {"fp32"}, {"fp16", "int8"}),
    "sam_encoder_trt": ("sam_image_encoder", "fp32", {"fp32"}, {"fp16", "int8"}),
    "sam_encoder_trt_fp16": ("sam_image_encoder", "fp16", {"fp16"}, {"int8"}),
    "sam_encoder_trt_bf16": ("sam_image_encoder", "bf16", {"bf16"}, {"fp16", "int8"}),
    "sam_encoder_trt_int8": ("sam_image_encoder", "int8", {"int8", "fp32"}, {"fp16"}),
    "sam_decoder": ("sam_mask_decoder", "fp32", {"fp32"}, {"fp16", "int8"}),
    "timm_vit": ("timm_vit", "fp32", {"fp32"}, {"fp16", "int8"}),
    "timm_hiera": ("timm_hiera", "fp32", {"fp32"}, {"fp16", "int8"}),
    "sam3_vision": ("sam3_vision_encoder", "fp32", {"fp32"}, {"fp16", "int8"}),
    "sam3_detector": ("sam3_detector", "fp32", {"fp32"}, {"fp16", "int8"}),
    "sam3_interactive": ("sam3_interactive_decoder", "fp32", {"fp32"}, {"fp16", "int8"}),
    "sam3_memory_encoder": ("sam3_memory_encoder", "fp32", {"fp32"}, {"fp16", "int8"}),
    "sam3_memory_attention": ("sam3_memory_attention", "fp32", {"fp32"}, {"fp16", "int8"}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_every_family_and_precision_builds_a_real_engine(onnx_files: dict[str, Path], name: str) -> None:
    family, precision, shown, absent = CASES[name]
    if name not in onnx_files:
        pytest.skip(f"{family}'s official package is not installed (scripts/test.sh installs it)")
    plan = onnx_files["root"] / f"{name}.plan"
    code, output = run("build-engine", str(onnx_files[name]), "-o", str(plan), "--builder", "tensorrt-rtx")
    assert code == 0, output
    assert f"TensorRT-RTX {LIBRARY.version}, ahead of time on the CPU" in output
    sidecar = read_sidecar(plan)
    read_plan_checked(plan, sidecar)  # raises unless the plan's size and SHA-256 are the sidecar's
    assert sidecar["tensorrt"] == {"version": LIBRARY.version, "library": "tensorrt-rtx"}
    assert sidecar["gpu"]["targets"] == list(RTX_DEFAULT_TARGETS) and sidecar["gpu"]["name"] is None
    assert sidecar["precision"] == precision and sidecar["network"] == "strongly_typed"
    assert sidecar["metadata"]["family"] == family and sidecar["metadata"]["precision"] == precision
    layers = sidecar["layers"]
    seen = {p for p, n in layers["by_precision"].items() if n}
    assert shown <= seen and not (absent & seen), layers["by_precision"]
    assert layers["count"] == len(layers["list"]) == sum(layers["by_precision"].values()) > 0
    code, text = run("inspect", str(plan))
    assert code == 0, text
    assert "TensorRT-RTX engine" in text and "plan file matches the sidecar's SHA-256" in text
    counts = ", ".join(f"{n} {p}" for p, n in layers["by_precision"].items())
    assert f"engine layers (the builder's layer list): {layers['count']}: {counts}" in text


def test_int8_qdq_gemms_read_int8_activations_and_weights(onnx_files: dict[str, Path]) -> None:
    """TensorRT-RTX's support matrix lists INT8 as weight-only GEMM; its layer list for vitdeploy's Q/DQ file says
    more: every GEMM reads two INT8 operands, INT8 activations times INT8 weights (the linear layers) or times
    INT8 activations (attention's two matmuls). Measured with TensorRT-RTX 1.7.1.116; what the GPU then runs is
    its JIT compiler's choice, which only a GPU run can show."""
    result = build_engine(onnx_files["sam_encoder_trt_int8"], onnx_files["root"] / "q.plan", BuildOptions(builder=RTX))
    gemms = [layer for layer in result.sidecar["layers"]["list"] if layer["type"] == "gemm"]
    assert gemms and all(layer["precision"] == "int8" for layer in gemms)
    assert all(layer["inputs"][0] == "Int8" and (layer["inputs"] + layer["constants"]).count("Int8") == 2 for layer in gemms), gemms[:2]
    weights = [layer for layer in gemms if "Int8" in layer["constants"]]
    assert weights and len(weights) < len(gemms)  # both kinds are there
    onnx_nodes = {n for layer in gemms for n in layer["onnx_nodes"]}
    assert any("QuantizeLinear" in n or "DequantizeLinear" in n for n in onnx_nodes)


def test_decoder_prompt_profile_is_built_and_recorded(onnx_files: dict[str, Path]) -> None:
    result = build_engine(onnx_files["sam_decoder"], onnx_files["root"] / "d.plan", BuildOptions(builder=RTX))
    (profile,) = result.sidecar["profiles"]
    assert profile["point_coords"]["min"][1] == 1 and profile["point_coords"]["max"][1] >= profile["point_coords"]["opt"][1] > 1
    assert set(profile) == {"point_coords", "point_labels"}


def test_bf16_calibrated_gemms_run_in_bf16_and_the_fp32_islands_stay_fp32(onnx_files: dict[str, Path]) -> None:
    """What TensorRT-RTX 1.7.1.116 made of ``calibrate -p bf16``'s graph (its layer list): every GEMM reads and writes
    BF16, and the nodes the pass kept in FP32 (the MatMul LayerNorm2d of the neck) are built with FP32 tensors."""
    result = build_engine(onnx_files["sam_encoder_trt_bf16"], onnx_files["root"] / "b16.plan", BuildOptions(builder=RTX))
    layers = result.sidecar["layers"]["list"]
    gemms = [layer for layer in layers if layer["type"] == "gemm"]
    assert gemms and all(layer["inputs"] == ["BFloat16"] and layer["outputs"] == ["BFloat16"] for layer in gemms), gemms[:2]
    neck = [layer for layer in layers if any("node_sqrt" in n for n in layer["onnx_nodes"])]
    assert neck and all("Float" in layer["inputs"] + layer["outputs"] for layer in neck), neck


def test_bf16_graph_builds_a_bf16_engine(tmp_path: Path) -> None:
    node = helper.make_node("Relu", ["x"], ["y"], name="/bf16/Relu")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", onnx.TensorProto.BFLOAT16, [1, 8])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.BFLOAT16, [1, 8])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=IR_VERSION), str(tmp_path / "b.onnx"))
    result = build_engine(tmp_path / "b.onnx", tmp_path / "b.plan", BuildOptions(builder=RTX))
    assert result.sidecar["precision"] == "bf16" and result.sidecar["layers"]["by_precision"] == {"bf16": 1}


def test_compute_capabilities_are_targeted_and_recorded(onnx_files: dict[str, Path]) -> None:
    plan = onnx_files["root"] / "cc.plan"
    code, output = run("build-engine", str(onnx_files["sam_encoder"]), "-o", str(plan), "--compute-capability", "8.6",
                       "--compute-capability", "sm_120", "--builder", "tensorrt-rtx")
    assert code == 0, output
    assert read_sidecar(plan)["gpu"]["targets"] == ["8.6", "12.0"]
    assert read_sidecar(plan)["build_options"]["compute_capabilities"] == ["8.6", "sm_120"]
    code, text = run("inspect", str(plan))
    assert "built ahead of time for compute capability 8.6, 12.0" in text


def _assert_one_line_error(code: int, output: str, *needles: str) -> None:
    assert code == 1, output
    lines = [ln for ln in output.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in output, output
    for needle in needles:
        assert needle in lines[0], output


def _graph(tmp_path: Path, name: str, nodes: list, initializers: list = (), opset: int = 18,
           domains: tuple[str, ...] = ()) -> Path:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])], list(initializers))
    ops = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    path = tmp_path / f"{name}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=ops, ir_version=IR_VERSION), str(path))
    return path


def test_a_node_tensorrt_rtx_refuses_is_named_and_nothing_is_written(tmp_path: Path) -> None:
    path = _graph(tmp_path, "bad", [helper.make_node("NoSuchOp", ["x"], ["y"], name="/bad/NoSuchOp", domain="vitdeploy.test")],
                  domains=("vitdeploy.test",))
    code, output = run("build-engine", str(path), "-o", str(tmp_path / "bad.plan"), "--builder", "tensorrt-rtx")
    _assert_one_line_error(code, output, f"TensorRT-RTX {LIBRARY.version} cannot parse 'bad.onnx'",
                           "node '/bad/NoSuchOp' (NoSuchOp)", "Re-export without that op")
    assert not list(tmp_path.glob("bad.plan*"))


def test_a_precision_tensorrt_rtx_refuses_names_the_weight_and_its_type(tmp_path: Path) -> None:
    import numpy as np

    scale = numpy_helper.from_array(np.array(0.1, np.float32), "s")
    zero = helper.make_tensor("z16", onnx.TensorProto.UINT16, [], [0])
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z16"], ["q"], name="/u16/Quantize"),
             helper.make_node("DequantizeLinear", ["q", "s", "z16"], ["y"], name="/u16/Dequantize")]
    path = _graph(tmp_path, "u16", nodes, [scale, zero], opset=21)
    code, output = run("build-engine", str(path), "-o", str(tmp_path / "u16.plan"), "--builder", "tensorrt-rtx")
    _assert_one_line_error(code, output, "cannot import the weight 'z16' (UINT16)", "quantize to INT8 Q/DQ")
    assert not list(tmp_path.glob("u16.plan*"))


@pytest.mark.parametrize(("args", "needle"), [
    (["--timing-cache", "{d}/t.cache"], "--timing-cache has no effect on TensorRT-RTX"),
    (["--hardware-compatibility", "ampere_plus"], "use --compute-capability"),
    (["--version-compatible"], "--version-compatible is a classic TensorRT option"),
    (["--legacy-fp16"], "builds strongly typed networks only"),
    (["--compute-capability", "9.0"], "--compute-capability '9.0' is not one TensorRT-RTX can target"),
])
def test_classic_options_are_refused_with_what_to_do(onnx_files: dict[str, Path], tmp_path: Path, args: list[str],
                                                      needle: str) -> None:
    code, output = run("build-engine", str(onnx_files["sam_encoder"]), "-o", str(tmp_path / "o.plan"), "--builder",
                       "tensorrt-rtx", *[a.format(d=tmp_path) for a in args])
    _assert_one_line_error(code, output, needle)
    assert not (tmp_path / "o.plan").exists() and not (tmp_path / "t.cache").exists()


def test_compute_capability_is_refused_for_classic_tensorrt() -> None:
    with pytest.raises(InputError, match="--compute-capability is a TensorRT-RTX option"):
        check_options(BuildOptions(compute_capabilities=("8.6",)), "10.13.0.35", "tensorrt")


@pytest.mark.skipif(gpu_present(), reason="a GPU is here: test_engine_tensorrt.py runs the engine instead")
@pytest.mark.parametrize("verb", [["validate"], ["benchmark", "--runs", "2"], ["inspect"]])
def test_without_a_gpu_every_verb_that_runs_an_engine_says_so(onnx_files: dict[str, Path], verb: list[str]) -> None:
    plan = onnx_files["root"] / "run.plan"
    if not plan.exists():
        build_engine(onnx_files["sam_encoder"], plan, BuildOptions(builder=RTX))
    code, output = run(verb[0], str(plan), *verb[1:])
    if verb[0] == "inspect":  # reads the sidecar only: works anywhere
        assert code == 0 and "TensorRT-RTX engine" in output, output
        return
    _assert_one_line_error(code, output, f"is a TensorRT-RTX {LIBRARY.version} engine, which runs only on an NVIDIA GPU",
                           "run the ONNX file instead")


def test_sidecar_stays_readable_json_and_lists_layers(onnx_files: dict[str, Path]) -> None:
    plan = onnx_files["root"] / "j.plan"
    build_engine(onnx_files["sam_encoder"], plan, BuildOptions(builder=RTX))
    side = json.loads(sidecar_path(plan).read_text())
    first = side["layers"]["list"][0]
    assert set(first) == {"name", "type", "inputs", "constants", "outputs", "onnx_nodes", "precision"}
