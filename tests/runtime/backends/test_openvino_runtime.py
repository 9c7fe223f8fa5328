"""OpenVINO as a second CPU runtime: the same ONNX files, parity against the official models.

Every family, export target and precision vitdeploy writes runs on OpenVINO here and is compared with
the official eager model (segment_anything, timm) at that precision's named tolerance, through the same
library call as ``vitdeploy validate --runtime openvino``. Tiny seeded models; OpenVINO comes with the
``dev`` extra (the ``openvino`` extra for users).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from tests.conftest import TINY_RECIPE, TINY_TIMM_RECIPE
from tests.sam_tiny import sample_image
from vitdeploy.cli import cli
from vitdeploy.errors import InputError, MissingDependencyError
from vitdeploy.metadata import read_onnx_metadata
from vitdeploy.pipeline import export_from_recipe
from vitdeploy.precision.calibration_data import bundled_calibration_dir
from vitdeploy.runtime.backends.base import RunnerOptions
from vitdeploy.runtime.deploy.loader import open_runner
from vitdeploy.runtime.backends.openvino_runner import OpenVinoRunner, cpu_config
from vitdeploy.validation.masks import compare_masks
from vitdeploy.parity import TOLERANCES, compare
from vitdeploy.validation.validate_model import ValidateOptions, validate_model

pytest.importorskip("openvino", reason="OpenVINO is not installed (pip install 'vitdeploy[openvino]')")
pytest_plugins = ["tests.sam_tiny_fixtures"]


@pytest.fixture(scope="module")
def encoders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny SAM encoder exported for every target, random weights seed 4."""
    root = tmp_path_factory.mktemp("openvino_encoders")
    recipe = root / "tiny.toml"
    recipe.write_text(TINY_RECIPE)
    return {target: export_from_recipe(str(recipe), root / f"{target}.onnx", random_weights=True, seed=4, target=target).path
            for target in ("generic", "tensorrt", "onnxruntime-cpu")}


def _validate(path: Path, tolerance: str = "auto", inputs: int = 3, images: tuple[str, ...] = ()):
    report = validate_model(path, ValidateOptions(runtime="openvino", random_inputs=inputs, images=images, runs=0,
                                                  threads=2, tolerance=tolerance))
    assert report, [p.to_dict() for p in report.parity]
    return report


@pytest.mark.parametrize("target", ["generic", "tensorrt", "onnxruntime-cpu"])
def test_sam_encoder_targets_match_the_official_model_in_fp32(encoders: dict[str, Path], target: str) -> None:
    """Every export target (the onnxruntime-cpu one holds com.microsoft.MultiHeadAttention) within 'fp32'."""
    report = _validate(encoders[target])
    fp32 = TOLERANCES["fp32"]
    assert report.tolerance.name == "fp32"
    assert min(p.cosine for p in report.parity) >= fp32.cosine_min
    assert max(p.rel_l2 for p in report.parity) <= fp32.rel_l2_max


def test_runner_pins_fp32_and_says_what_ran(encoders: dict[str, Path]) -> None:
    """FP32 is pinned (OpenVINO's CPU default is BF16 on AVX-512 BF16/AMX CPUs), the thread count is applied."""
    runner = OpenVinoRunner(encoders["generic"], threads=2)
    assert runner.inference_precision == "f32"
    assert "OpenVINO" in runner.provider and "f32" in runner.provider and "2 thread" in runner.provider
    assert runner.metadata["family"] == "sam_image_encoder" and runner.input_shapes()["image"] == [1, 3, 64, 64]


@pytest.mark.parametrize("apart", [True, False], ids=["gelu apart", "gelu fused"])
def test_gelus_kept_apart_from_their_gemms_or_not_both_match_the_official_model(encoders: dict[str, Path],
                                                                                 apart: bool) -> None:
    """The load-time form of vitdeploy/runtime/forms/openvino_gelu.py, on and off whatever this CPU's default: each MLP
    GELU (one per block) is kept apart from its GEMM or not, and both are within 'fp32' of the official model."""
    from vitdeploy.cpu_features import cpu_features
    from vitdeploy.families import family_of
    from vitdeploy.precisions import Precision
    from vitdeploy.runtime.forms.openvino_gelu import keep_gelu_apart
    from vitdeploy.validation.torch_runner import TorchRunner
    from vitdeploy.validation.validate import validate_runner

    runner = OpenVinoRunner(encoders["generic"], threads=2, gelu_apart=apart)
    depth = runner.metadata["architecture"]["depth"]
    assert runner.gelus_apart == (depth if apart else 0)
    assert (f"{depth} GELU(s) kept apart" in runner.provider) is apart, runner.provider
    fused_into_gemms = _gelus_fused_into_gemms(encoders["generic"], runner.compiled)
    if apart:
        assert not fused_into_gemms, fused_into_gemms
    elif keep_gelu_apart(cpu_features(), Precision.FP32):  # where the form was measured, OpenVINO fuses without it
        assert len(fused_into_gemms) == depth, fused_into_gemms
    family = family_of(runner.metadata, "tiny", for_reference=True)
    official = TorchRunner(family.eager_reference(runner.metadata, None), runner.input_names, runner.output_names,
                           threads=2, metadata=runner.metadata)
    sets = family.random_input_sets(runner.metadata, runner.input_names, runner.input_shapes(), 3)
    report = validate_runner(official, runner, sets, TOLERANCES["fp32"], latency_runs=0)
    assert report, [p.to_dict() for p in report.parity]


def _gelus_fused_into_gemms(path: Path, compiled) -> list[set[str]]:
    """The ONNX names of each GELU chain of ``path`` (the Div into Erf, the Erf and what follows it) that OpenVINO's
    ``compiled`` model fused into a FullyConnected node."""
    graph = onnx.load(str(path), load_external_data=False).graph
    consumers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    producer = {out: node for node in graph.node for out in node.output}
    chain: set[str] = set()
    for erf in (n for n in graph.node if n.op_type == "Erf"):
        chain.add(producer[erf.input[0]].name)
        frontier = [erf]
        for _ in range(4):  # Erf -> Add -> Mul -> Mul
            chain.update(n.name for n in frontier)
            frontier = [c for n in frontier for c in consumers.get(n.output[0], [])]
    assert chain, "no GELU chain found by its ONNX names"
    return [names for op in compiled.get_runtime_model().get_ordered_ops()
            if op.get_rt_info()["layerType"].astype(str) == "FullyConnected"
            for names in [set(op.get_rt_info()["originalLayersNames"].astype(str).split(","))]
            if names & chain]


def test_the_openvino_form_file_keeps_gelus_apart_in_a_stock_openvino(encoders: dict[str, Path], tmp_path: Path) -> None:
    """``vitdeploy optimize --runtime openvino`` writes the GELU form into the file: an application's own OpenVINO
    (plain ``Core.read_model``, no vitdeploy) fuses none of its GELUs into a GEMM where it fuses the exported file's
    (on the CPUs where the form was measured); vitdeploy's runner says the file holds them and refuses the fused
    reading; on OpenVINO and ONNX Runtime alike it stays within 'fp32' of the official model."""
    import openvino as ov

    from vitdeploy.cpu_features import cpu_features
    from vitdeploy.precisions import Precision
    from vitdeploy.runtime.forms.openvino_gelu import keep_gelu_apart

    source, path = encoders["generic"], tmp_path / "generic.openvino.onnx"
    result = CliRunner().invoke(cli, ["optimize", str(source), "-o", str(path), "--runtime", "openvino", "--json"])
    assert result.exit_code == 0, result.output
    depth = read_onnx_metadata(source)["architecture"]["depth"]
    assert json.loads(result.output) == {"files": [str(path)], "runtime": "openvino", "gelus_apart": depth,
                                         "source": source.name}
    graph = onnx.load(str(path)).graph
    read = {name for node in graph.node for name in node.input}
    assert [t.name for t in graph.initializer if t.name not in read] == []  # the replaced scalars are not left behind
    core = ov.Core()
    stock = {name: core.compile_model(core.read_model(str(file)), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
             for name, file in (("form", path), ("export", source))}
    assert not _gelus_fused_into_gemms(path, stock["form"])
    if keep_gelu_apart(cpu_features(), Precision.FP32):  # where OpenVINO fuses the exported file's GELUs
        assert len(_gelus_fused_into_gemms(source, stock["export"])) == depth
    runner = OpenVinoRunner(path, threads=2, gelu_apart=None)
    assert runner.gelus_apart == depth and f"{depth} GELU(s) kept apart" in runner.provider
    assert "as the file holds them" in runner.provider
    with pytest.raises(InputError, match="holds its GELUs apart from their GEMMs .* for the fused reading run 'generic.onnx'"):
        OpenVinoRunner(path, threads=2, gelu_apart=False)
    fp32 = TOLERANCES["fp32"]
    for runtime in ("openvino", "onnxruntime"):
        report = validate_model(path, ValidateOptions(runtime=runtime, random_inputs=3, runs=0, threads=2))
        assert report and report.tolerance.name == "fp32", [p.to_dict() for p in report.parity]
        assert min(p.cosine for p in report.parity) >= fp32.cosine_min
    notes = open_runner(path, runtime="onnxruntime").notes()
    assert any(f"ONNX Runtime does not fuse its {depth} GELU(s); on ONNX Runtime run 'generic.onnx'" in n
               for n in notes), notes


def test_the_openvino_form_is_refused_where_it_does_not_apply(encoders: dict[str, Path], tmp_path: Path) -> None:
    """One line, exit 1, nothing written: a file already in a form (either runtime's), a reduced-precision file, a graph
    without a GELU fed by a GEMM, --fused-attention with --runtime openvino."""
    from vitdeploy.cpu_optimize import write_cpu_form, write_openvino_form

    form = tmp_path / "form.onnx"
    write_openvino_form(encoders["generic"], form)
    cpu_form = tmp_path / "cpu.onnx"
    write_cpu_form(encoders["onnxruntime-cpu"], cpu_form)
    int8 = onnx.load(str(encoders["generic"]))
    for prop in int8.metadata_props:
        if prop.key == "vitdeploy.precision":
            prop.value = "int8"
    onnx.save(int8, str(tmp_path / "int8.onnx"))
    no_gelu = onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["x"], ["y"])], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])]))
    onnx.save(no_gelu, str(tmp_path / "relu.onnx"))
    cases = {
        form: "'form.onnx' is already a form written by 'vitdeploy optimize': optimize the exported file ('generic.onnx')",
        cpu_form: "'cpu.onnx' is already a form written by 'vitdeploy optimize': optimize the exported file "
                  "('onnxruntime-cpu.onnx')",
        tmp_path / "int8.onnx": "'int8.onnx' is not an FP32 graph (INT8): the OpenVINO form keeps GELUs apart from FP32 GEMMs only",
        tmp_path / "relu.onnx": "'relu.onnx' has no GELU fed by a GEMM",
    }
    for source, message in cases.items():
        out = tmp_path / "out.onnx"
        result = CliRunner().invoke(cli, ["optimize", str(source), "-o", str(out), "--runtime", "openvino"])
        assert result.exit_code == 1 and message in result.output and "Traceback" not in result.output, result.output
        assert not out.exists() and len(result.output.strip().splitlines()) == 1
    result = CliRunner().invoke(cli, ["optimize", str(form), "-o", str(tmp_path / "out.onnx")])  # ONNX Runtime's form of it
    assert result.exit_code == 1 and "is the OpenVINO form written by 'vitdeploy optimize --runtime openvino'" in result.output
    result = CliRunner().invoke(cli, ["optimize", str(encoders["generic"]), "-o", str(tmp_path / "out.onnx"), "--runtime",
                                      "openvino", "--fused-attention"])
    assert result.exit_code == 1 and "--fused-attention is ONNX Runtime's CPU form" in result.output


def test_the_gelu_form_is_the_default_where_it_was_measured_faster() -> None:
    """AVX2 without AVX-512 and an FP32 file only (Zen 3: 8327 against 8829 ms, SAM ViT-B); not on AVX-512, on
    other architectures, or for INT8/FP16/BF16 files, where it was not measured."""
    from vitdeploy.cpu_features import CpuFeatures
    from vitdeploy.precisions import Precision
    from vitdeploy.runtime.forms.openvino_gelu import keep_gelu_apart

    avx2 = CpuFeatures("AMD EPYC", "x86_64", frozenset({"avx2", "fma"}))
    zen4 = CpuFeatures("AMD EPYC", "x86_64", frozenset({"avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16"}))
    arm = CpuFeatures("Neoverse", "aarch64", frozenset({"asimd"}))
    assert keep_gelu_apart(avx2, Precision.FP32)
    assert not any(keep_gelu_apart(avx2, p) for p in (Precision.INT8, Precision.FP16, Precision.BF16))
    assert not keep_gelu_apart(zen4, Precision.FP32) and not keep_gelu_apart(arm, Precision.FP32)


def test_the_gelu_benchmark_times_the_exported_gelu_pattern(tmp_path: Path) -> None:
    """benchmarks/bench_openvino_gelu.py builds the MLP layer as torch.onnx exports nn.GELU (the form finds its GELU)
    and reports each pair's ratio."""
    from tests.conftest import load_benchmark

    bench = load_benchmark("bench_openvino_gelu")
    bench.layer_model(16, 8, 32, tmp_path / "layer.onnx")
    line = bench.alternate(tmp_path / "layer.onnx", None, pairs=2, threads=1, repeat=1)
    assert line.startswith("1 GELU(s) apart; apart ") and line.endswith(" of 2 below 1"), line
    line = bench.stock(tmp_path / "layer.onnx", tmp_path / "layer.onnx", None, pairs=2, threads=1)
    assert line.startswith("layer.onnx ") and "layer.onnx / layer.onnx per pair: median " in line, line


def test_the_gelu_form_is_asked_of_openvino_only(encoders: dict[str, Path]) -> None:
    assert open_runner(encoders["generic"], runtime="openvino", gelu_apart=True).gelus_apart == 3
    with pytest.raises(InputError, match="gelu_apart is an OpenVINO setting: leave it out for 'generic.onnx' on onnxruntime"):
        open_runner(encoders["generic"], runtime="onnxruntime", gelu_apart=True)


def test_fewer_threads_than_cores_are_not_pinned(encoders: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Pinned, two 1-thread processes (two Ray workers on 2 cores) share the first core: pinning is off below all cores."""
    import vitdeploy.cpu_features as features

    monkeypatch.setattr(features, "available_cores", lambda: 4)
    one = OpenVinoRunner(encoders["generic"], threads=1)
    assert one.compiled.get_property("ENABLE_CPU_PINNING") is False
    assert one.compiled.get_property("INFERENCE_NUM_THREADS") == 1
    assert "ENABLE_CPU_PINNING" not in cpu_config(4) and "ENABLE_CPU_PINNING" not in cpu_config(None)  # OpenVINO's default


def test_sam_decoder_matches_the_official_model(tiny_sam_artifacts) -> None:
    report = _validate(tiny_sam_artifacts.decoder, inputs=4)
    assert report.tolerance.name == "fp32" and len(report.parity) >= 8  # masks and scores of every input set


def test_timm_vit_matches_timm(tmp_path: Path) -> None:
    recipe = tmp_path / "tiny_vit.toml"
    recipe.write_text(TINY_TIMM_RECIPE)
    path = export_from_recipe(str(recipe), tmp_path / "vit.onnx", random_weights=True, seed=2, dynamic_batch=True).path
    _validate(path)
    runner = OpenVinoRunner(path, threads=2)
    assert runner.input_shapes()["image"] == ["?", 3, 32, 32]
    out = runner.run({"image": np.zeros((3, 3, 32, 32), np.float32)})["logits"]  # the dynamic batch at 3
    assert out.shape == (3, 10)


def test_hiera_matches_timm(tmp_path: Path) -> None:
    from tests.families.test_timm_hiera import export_tiny

    _validate(export_tiny(tmp_path, "sam2_hiera", "features"))


@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_calibrated_files_hold_their_tolerance_on_openvino(encoders: dict[str, Path], precision: str,
                                                           tmp_path: Path) -> None:
    """vitdeploy's FP16 (FP32 islands) and INT8 (Q/DQ) files, calibrated from the bundled images, validated on
    OpenVINO against the official FP32 model at their precision's tolerance, on the images calibration held out."""
    from vitdeploy.precision.calibrate import CalibrateOptions, calibrate_onnx
    from vitdeploy.precision.calibration_data import bundled_calibration_dir

    out = tmp_path / f"{precision}.onnx"
    calibrated = calibrate_onnx(encoders["onnxruntime-cpu"], out, CalibrateOptions(
        precision=precision, holdout=4, cache_dir=str(tmp_path / "cache"), threads=2, eager=False))
    held_out = tuple(str(bundled_calibration_dir() / name) for name in calibrated.calibration["held_out"])
    assert len(held_out) == 4
    report = _validate(out, inputs=0, images=held_out)
    assert report.tolerance.name == precision
    assert min(p.cosine for p in report.parity) >= TOLERANCES[precision].cosine_min


def test_sam_predictor_on_openvino_gives_the_onnxruntime_masks(tiny_sam_artifacts) -> None:
    from vitdeploy.runtime.apps.sam.predictor import SamPredictor

    image = sample_image(48, 80, seed=3)
    masks = {}
    for runtime in ("onnxruntime", "openvino"):
        predictor = SamPredictor(tiny_sam_artifacts.encoder, tiny_sam_artifacts.decoder, threads=2, runtime=runtime)
        predictor.set_image(image)
        masks[runtime] = predictor.predict(point_coords=np.array([[30.0, 20.0]]), point_labels=np.array([1]),
                                           multimask_output=True, return_logits=True)
    assert predictor.encoder.name == "openvino-cpu" and predictor.decoder.name == "openvino-cpu"
    (ort_logits, ort_scores, _), (ov_logits, ov_scores, _) = masks["onnxruntime"], masks["openvino"]
    scale = float(np.abs(ort_logits).max())
    assert np.abs(ov_logits - ort_logits).max() <= 1e-4 * scale
    assert np.abs(ov_scores - ort_scores).max() <= 1e-4
    agree = ((ov_logits > 0) == (ort_logits > 0)).mean()
    assert agree >= 0.999, agree


def test_missing_openvino_is_one_line_naming_the_extra(encoders: dict[str, Path], monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "openvino", None)  # import openvino -> ImportError
    with pytest.raises(MissingDependencyError, match=r"vitdeploy\[openvino\]"):
        OpenVinoRunner(encoders["generic"])


def test_openvino_refusals(encoders: dict[str, Path], tmp_path: Path) -> None:
    from vitdeploy.runtime.deploy.loader import open_runner

    with pytest.raises(InputError, match="CPU only"):
        open_runner(encoders["generic"], runtime="openvino", ort_device="cuda")
    with pytest.raises(InputError, match="fused-attention"):
        open_runner(encoders["onnxruntime-cpu"], runtime="openvino", fused_attention=True)
    with pytest.raises(InputError, match="runs ONNX models"):
        open_runner(tmp_path / "model.plan", runtime="openvino")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage that is no protobuf")
    with pytest.raises(InputError):
        OpenVinoRunner(bad)
    unknown_op = tmp_path / "unknown_op.onnx"  # a readable model with an op OpenVINO does not have
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])
    graph = onnx.helper.make_graph([onnx.helper.make_node("NoSuchOp", ["x"], ["y"], domain="com.example")], "g", [x], [y])
    onnx.save(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 18),
                                                           onnx.helper.make_opsetid("com.example", 1)]), unknown_op)
    with pytest.raises(InputError, match=r"cannot load .*--runtime onnxruntime") as refused:
        OpenVinoRunner(unknown_op)
    assert "re-export it" not in str(refused.value)  # the same file again would fail the same way
    runner = OpenVinoRunner(encoders["generic"], threads=1)
    with pytest.raises(InputError, match="refused the inputs"):
        runner.run({"image": np.zeros((1, 3, 32, 32), np.float32)})


def test_cli_validate_benchmark_and_predict_on_openvino(encoders: dict[str, Path], tiny_sam_artifacts,
                                                        tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["validate", str(encoders["generic"]), "--runtime", "openvino", "--random-inputs", "2",
                                 "--runs", "1", "--threads", "2"])
    assert result.exit_code == 0, result.output
    assert "runs on OpenVINO" in result.output and "parity: all comparisons within tolerance" in result.output

    result = runner.invoke(cli, ["benchmark", str(encoders["generic"]), "--no-eager", "--runtime", "onnxruntime",
                                 "--runtime", "openvino", "--runs", "2", "--warmup", "1", "--threads", "2"])
    assert result.exit_code == 0, result.output
    assert "onnxruntime-cpu fp32 (generic.onnx)" in result.output and "openvino-cpu fp32 (generic.onnx)" in result.output

    from PIL import Image

    picture = tmp_path / "pic.png"
    Image.fromarray(sample_image(48, 80, seed=1)).save(picture)
    masks = {}
    for runtime in ("onnxruntime", "openvino"):
        out = tmp_path / f"mask_{runtime}.png"
        result = runner.invoke(cli, ["predict", "-e", str(tiny_sam_artifacts.encoder), "-d", str(tiny_sam_artifacts.decoder),
                                     "-i", str(picture), "--point", "30,20", "-o", str(out), "--runtime", runtime])
        assert result.exit_code == 0, result.output
        masks[runtime] = np.asarray(Image.open(out)) > 0
    assert (masks["onnxruntime"] == masks["openvino"]).mean() >= 0.999

    result = runner.invoke(cli, ["validate", str(encoders["generic"]), "--runtime", "openvino", "--device", "cuda"])
    assert result.exit_code == 1 and result.output.count("\n") == 1 and "CPU only" in result.output, result.output


def test_int8_weights_follow_the_cpu(encoders: dict[str, Path], tmp_path: Path) -> None:
    """7-bit weights exactly where OpenVINO's u8 x s8 kernels saturate (no VNNI/AMX), as asked when forced; the
    7-bit graph on OpenVINO computes what ONNX Runtime computes for the same re-quantized weights."""
    import onnx

    from vitdeploy.cpu_features import cpu_features
    from vitdeploy.precision.calibrate import CalibrateOptions, calibrate_onnx
    from vitdeploy.runtime.backends.openvino_runner import seven_bit_weight_graph
    from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner

    out = tmp_path / "int8.onnx"
    calibrate_onnx(encoders["generic"], out, CalibrateOptions(precision="int8", holdout=4, cache_dir=str(tmp_path / "c"),
                                                              threads=2, eager=False))
    auto = OpenVinoRunner(out, threads=2)
    assert auto.int8_weights.startswith("7-bit") == cpu_features().u8s8_saturates, auto.int8_weights
    assert "INT8" in auto.provider
    forced = OpenVinoRunner(out, threads=2, seven_bit_weights=True)
    assert forced.int8_weights.startswith("7-bit")
    assert OpenVinoRunner(encoders["generic"]).int8_weights is None  # an FP32 file

    graph, count = seven_bit_weight_graph(out)
    model = onnx.load_from_string(graph.getvalue())
    dequantized = {n.input[0] for n in model.graph.node if n.op_type == "DequantizeLinear"}
    weights = [onnx.numpy_helper.to_array(i) for i in model.graph.initializer
               if i.data_type == onnx.TensorProto.INT8 and i.name in dequantized]
    assert count == len(weights) > 0 and all(np.abs(w).max() <= 63 for w in weights)
    seven = tmp_path / "int7.onnx"
    onnx.save(model, str(seven))
    x = np.random.default_rng(7).standard_normal((1, 3, 64, 64)).astype(np.float32)
    reference = OnnxRuntimeRunner(seven, threads=2).run({"image": x})["image_embeddings"]
    got = forced.run({"image": x})["image_embeddings"]
    assert np.abs(got - reference).max() <= 2e-3 * np.abs(reference).max()


def _matrix_engine(policy: str = "bf16") -> bool:
    """Whether OpenVINO itself has kernels for ``policy`` (``bf16``, ``fp16``) here: its CPU plugin's optimization
    capabilities (``VITDEPLOY_CPU_MASK`` changes vitdeploy's decisions, not OpenVINO's kernels)."""
    import openvino

    return policy.upper() in openvino.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


@pytest.mark.parametrize("policy", ["bf16", "fp16"])
def test_reduced_inference_holds_its_budget_against_the_official_model(encoders: dict[str, Path], policy: str) -> None:
    """--inference-precision bf16/fp16: the FP32 file's layers in BF16/FP16 where OpenVINO has the kernels for this
    CPU (else it runs what it has and the runner says so), judged by the policy's named budget against the official
    eager model on random inputs and images. Where the kernels ran, the numbers are not FP32's (the reduced
    arithmetic was shown, not assumed)."""
    from vitdeploy.runtime_facts import PROVEN_POLICIES

    images = tuple(str(p) for p in sorted(bundled_calibration_dir().glob("*.jpg"))[:2])
    report = validate_model(encoders["generic"], ValidateOptions(runtime="openvino", inference_precision=policy, runs=0,
                                                                 random_inputs=2, images=images, threads=2))
    assert report.tolerance.name == policy
    assert report, report.to_dict()
    hint = PROVEN_POLICIES[policy]["openvino_precision"]
    runner = OpenVinoRunner.from_options(encoders["generic"], RunnerOptions(threads=1, policy=policy))
    if runner.inference_precision == hint:
        assert f"inference precision {hint}" in runner.provider and runner.warnings == []
        x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
        fp32 = OpenVinoRunner(encoders["generic"], threads=1).run({"image": x})["image_embeddings"]
        gap = compare(fp32, runner.run({"image": x})["image_embeddings"]).rel_l2
        assert gap > 1e-5, f"{hint} read back, FP32's numbers (rel. L2 {gap:.2e})"
    else:
        if policy == "bf16":  # (an FP16 hint may read back bf16 where OpenVINO has BF16 kernels only)
            assert not _matrix_engine(policy), runner.provider
        assert f"not the {hint} asked for" in runner.warnings[0], runner.warnings
        assert all(unit.upper().replace("_", "-") in runner.warnings[0] for unit in PROVEN_POLICIES[policy]["units"]), \
            runner.warnings


@pytest.mark.parametrize("policy", ["bf16", "fp16"])
def test_sam_predictor_runs_the_encoder_in_the_policy_and_the_decoder_as_written(tiny_sam_artifacts,
                                                                                 policy: str) -> None:
    from vitdeploy.runtime.apps.sam.predictor import SamPredictor

    from vitdeploy.runtime import OpenOptions
    from vitdeploy.runtime_facts import PROVEN_POLICIES

    image = sample_image(48, 80, seed=3)
    # Where OpenVINO has BF16/FP16 kernels the CPU has AVX-512 (or is an Arm CPU), so GELUs are never kept apart
    # there; a VITDEPLOY_CPU_MASK that hides AVX-512 from vitdeploy (an AVX2-only CPU) cannot take those kernels from
    # OpenVINO, so the form such a CPU would use is asked for instead of a mix no real CPU has.
    gelu_apart = False if _matrix_engine(policy) else None
    out, runs = {}, {}
    for asked in ("file", policy):
        predictor = SamPredictor(tiny_sam_artifacts.encoder, tiny_sam_artifacts.decoder, options=OpenOptions(
            runtime="openvino", threads=2, policy=asked, gelu_apart=gelu_apart))
        predictor.set_image(image)
        out[asked] = predictor.predict(point_coords=np.array([[30.0, 20.0]]), point_labels=np.array([1]),
                                       multimask_output=True, return_logits=True)
        runs[asked] = (predictor.encoder.inference_precision, predictor.decoder.inference_precision)
    hint = PROVEN_POLICIES[policy]["openvino_precision"]
    assert runs["file"] == ("f32", "f32") and runs[policy][1] == "f32", runs
    if _matrix_engine(policy) and policy == "bf16":
        assert runs[policy][0] == hint, runs
    (fp32_logits, _, _), (reduced_logits, _, _) = out["file"], out[policy]
    result = compare(fp32_logits, reduced_logits, policy, label="mask logits")
    # the whole budget; measured bf16: cosine 0.999945, rel L2 0.0105 (AMX Xeon)
    assert result, result.summary()
    masks = compare_masks(fp32_logits, reduced_logits, policy, label=f"{policy} encoder masks")
    assert masks, masks.summary()


def test_bf16_is_refused_where_a_runtime_cannot_run_it(encoders: dict[str, Path], tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["validate", str(encoders["generic"]), "--inference-precision", "bf16", "--runs", "0"])
    assert result.exit_code == 1 and result.output.count("\n") == 1 and "OpenVINO setting" in result.output, result.output
    with pytest.raises(InputError, match="runs the precision it was built in"):
        open_runner(tmp_path / "missing.plan", precision="bf16")
    result = runner.invoke(cli, ["validate", str(encoders["generic"]), "--runtime", "openvino", "--inference-precision",
                                 "bf16", "--random-inputs", "1", "--runs", "0", "--threads", "2"])
    assert result.exit_code == 0 and "tolerance 'bf16'" in result.output, result.output


def test_a_compiled_model_is_kept_in_the_cache_folder_and_loaded_from_it(encoders: dict[str, Path], tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenVINO's model cache (its documented CACHE_DIR) under VITDEPLOY_CACHE_DIR: the first load writes a blob,
    the second reads it and computes the same numbers; 'none' turns the cache off; an unwritable folder is no error."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("VITDEPLOY_CACHE_DIR", str(cache))
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
    first = OpenVinoRunner(encoders["generic"], threads=1)
    blobs = sorted(p.name for p in first.compile_cache.iterdir())
    assert first.compile_cache.is_relative_to(cache / "openvino") and blobs, blobs
    second = OpenVinoRunner(encoders["generic"], threads=1)
    assert sorted(p.name for p in second.compile_cache.iterdir()) == blobs  # read, not written again
    want, got = first.run({"image": x}), second.run({"image": x})
    assert all(np.array_equal(want[k], got[k]) for k in want)
    monkeypatch.setenv("VITDEPLOY_CACHE_DIR", "none")
    assert OpenVinoRunner(encoders["generic"], threads=1).compile_cache is None
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache folder would go")
    monkeypatch.setenv("VITDEPLOY_CACHE_DIR", str(blocked))
    assert OpenVinoRunner(encoders["generic"], threads=1).compile_cache is None


def test_each_inference_precision_has_its_own_cache_folder(encoders: dict[str, Path], tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenVINO keys a cached blob by the model and the device, not by the precision hint (its CPU plugin's
    CACHING_PROPERTIES name FULL_DEVICE_NAME alone): each precision compiles into a folder of its own."""
    import openvino as ov

    cache = tmp_path / "cache"
    monkeypatch.setenv("VITDEPLOY_CACHE_DIR", str(cache))
    folders = {hint: OpenVinoRunner(encoders["generic"], threads=1, inference_precision=hint).compile_cache
               for hint in ("f32", "bf16", "f16")}
    assert len(set(folders.values())) == 3 and all(folder.name == hint for hint, folder in folders.items()), folders
    assert all(any(folder.iterdir()) for folder in folders.values())
    assert "INFERENCE_PRECISION_HINT" not in ov.Core().get_property("CPU", "CACHING_PROPERTIES")


@pytest.mark.parametrize("policy", ["bf16", "fp16"])
def test_a_cached_model_computes_in_the_precision_asked_in_either_order(encoders: dict[str, Path], tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        policy: str) -> None:
    """Where the CPU has the policy's units, a model compiled and cached at one precision is never what another
    precision loads: f32 then the reduced precision, and the reduced one then f32, each give what the same
    precision gives with no cache (with one folder for all, an f16 compile loaded the f32 blob and the reverse on an
    Intel Xeon with AVX512-FP16)."""
    from vitdeploy.runtime_facts import PROVEN_POLICIES

    if not _matrix_engine(policy):
        pytest.skip(f"OpenVINO has no {policy.upper()} kernels for this CPU (none of "
                    f"{', '.join(PROVEN_POLICIES[policy]['units'])}): it runs '{policy}' as FP32, so the two precisions "
                    "cannot be told apart")
    hint = PROVEN_POLICIES[policy]["openvino_precision"]
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
    monkeypatch.setenv("VITDEPLOY_CACHE_DIR", "none")
    alone = {h: OpenVinoRunner(encoders["generic"], threads=1, inference_precision=h).run({"image": x})
             for h in ("f32", hint)}
    name = next(iter(alone["f32"]))
    gap = compare(alone["f32"][name], alone[hint][name]).rel_l2
    assert gap > 1e-5, f"'{hint}' computed FP32's numbers with no cache (rel. L2 {gap:.2e}): no {policy} arithmetic"
    for order in (("f32", hint), (hint, "f32")):
        monkeypatch.setenv("VITDEPLOY_CACHE_DIR", str(tmp_path / "-then-".join(order)))
        for h in order:  # the second compile finds the first one's cache
            got = OpenVinoRunner(encoders["generic"], threads=1, inference_precision=h).run({"image": x})
            assert np.array_equal(got[name], alone[h][name]), f"{h} after {order[0]}: not what {h} computes"
