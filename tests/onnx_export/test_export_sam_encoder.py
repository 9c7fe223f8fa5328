"""ONNX export of the rewritten encoder: parity on ONNX Runtime vs the official module, clean graphs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from tests.conftest import TINY_ARCHS, tiny_encoder
from vitdeploy.metadata import read_onnx_metadata
from vitdeploy.models.sam_encoder import official_encoder_at_size
from vitdeploy.onnx_export.hygiene import BANNED_OPS, check_graph_hygiene
from vitdeploy.onnx_export.sam_encoder import export_sam_image_encoder, sam_encoder_metadata
from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner
from vitdeploy.parity import TOLERANCES, compare

FP32 = TOLERANCES["fp32"]  # cosine >= 0.99999, relative L2 <= 1e-4

EXPORTS = {
    # name: (tiny arch, export size, dynamic batch)
    "padded": ("padded_windows", None, False),
    "resized_dynamic": ("padded_windows", 48, True),
    "even_larger": ("even_windows", 96, False),
    "global": ("all_global", None, False),
}


def _export(arch_name: str, size: int | None, dynamic: bool, path: Path):
    encoder = tiny_encoder(arch_name)
    arch = TINY_ARCHS[arch_name]
    s = size or arch.img_size
    meta = sam_encoder_metadata(variant=arch_name, input_size=s, pixel_mean=(1.0, 2.0, 3.0), pixel_std=(4.0, 5.0, 6.0),
                                architecture=arch.to_dict(), random_seed=0, dynamic_batch=dynamic)
    result = export_sam_image_encoder(encoder, path, metadata=meta, input_size=size, dynamic_batch=dynamic)
    reference = official_encoder_at_size(encoder, s) if size else encoder
    return result, reference, s


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("exports")
    return {name: _export(*spec, root / f"{name}.onnx") for name, spec in EXPORTS.items()}


@pytest.mark.parametrize("name", list(EXPORTS))
def test_onnxruntime_matches_official_on_two_inputs(exported, name: str) -> None:
    result, reference, size = exported[name]
    runner = OnnxRuntimeRunner(result.path, threads=2)
    outputs = []
    for seed in (11, 12):
        x = np.random.default_rng(seed).standard_normal((1, 3, size, size)).astype(np.float32)
        with torch.no_grad():
            ref = reference(torch.from_numpy(x)).numpy()
        out = runner.run({"image": x})["image_embeddings"]
        parity = compare(ref, out, FP32, label=f"{name}/seed{seed}")
        assert parity, parity.summary()
        outputs.append(out)
    assert not np.allclose(outputs[0], outputs[1]), "two inputs gave the same output: the test would not see a bug"


def test_dynamic_batch_runs_any_batch(exported) -> None:
    result, reference, size = exported["resized_dynamic"]
    assert result.input_shapes["image"] == ["batch", 3, size, size]
    runner = OnnxRuntimeRunner(result.path, threads=2)
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 3, size, size)).astype(np.float32)
        with torch.no_grad():
            ref = reference(torch.from_numpy(x)).numpy()
        parity = compare(ref, runner.run({"image": x})["image_embeddings"], FP32, label=f"batch{batch}")
        assert parity, parity.summary()


@pytest.mark.parametrize("name", list(EXPORTS))
def test_graph_is_clean_and_checked(exported, name: str) -> None:
    result = exported[name][0]
    model = onnx.load(str(result.path))
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version >= 17
    ops = {n.op_type for n in model.graph.node}
    assert not ops & BANNED_OPS, f"banned ops in graph: {ops & BANNED_OPS}"
    assert result.hygiene, result.hygiene.problems


def test_metadata_is_stamped(exported) -> None:
    result, _, size = exported["resized_dynamic"]
    meta = read_onnx_metadata(str(result.path))
    assert meta["family"] == "sam_image_encoder"
    assert meta["input_size"] == [size, size]
    assert meta["pixel_mean"] == [1.0, 2.0, 3.0] and meta["pixel_std"] == [4.0, 5.0, 6.0]
    assert meta["random_weights"] is True and meta["random_seed"] == 0
    assert meta["precision"] == "fp32" and meta["dynamic_batch"] is True
    assert {"vitdeploy", "torch", "onnx"} <= set(meta["tool_versions"])


def test_tool_versions_are_read_without_importing_the_tools() -> None:
    """The versions an export records come from the distributions' metadata where a tool is not imported yet
    (importing segment_anything and timm only to read their versions slowed every export process by about 1 s), and
    name the same releases as the imported modules do."""
    import subprocess
    import sys

    probe = ("import json, sys; from vitdeploy.metadata import tool_versions; v = tool_versions(); print(json.dumps("
             "[v, sorted(m for m in ('timm', 'segment_anything', 'onnxruntime') if m in sys.modules)]))")
    versions, imported = json.loads(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                                                   check=True).stdout)
    assert imported == [], f"tool_versions imported {imported}"
    import onnxruntime
    import timm
    import torch

    assert versions["timm"] == timm.__version__ and versions["onnxruntime"] == onnxruntime.__version__
    assert versions["torch"].split("+")[0] == torch.__version__.split("+")[0]  # a wheel's metadata may drop "+cu130"
    assert versions["segment_anything"] != "unknown"  # the module has no __version__; its distribution has one


def test_reexport_is_byte_identical(exported, tmp_path: Path) -> None:
    first = exported["padded"][0].path
    again = _export("padded_windows", None, False, tmp_path / "again.onnx")[0].path
    assert first.read_bytes() == again.read_bytes()


def test_hygiene_check_catches_the_naive_export(tmp_path: Path) -> None:
    """The official module traced as-is holds the nodes the check exists for."""
    official = tiny_encoder()
    path = tmp_path / "naive.onnx"
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        torch.onnx.export(official, (x,), str(path), dynamo=True, opset_version=18, verbose=False).save(str(path))
    model = onnx.shape_inference.infer_shapes(onnx.load(str(path)))
    report = check_graph_hygiene(model)
    assert not report
    assert any("Einsum" in p for p in report.problems), report.problems


def test_hygiene_flags_shape_arithmetic_and_dynamic_dims() -> None:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [
            helper.make_node("Shape", ["x"], ["s"], name="shape0"),
            helper.make_node("Gather", ["s", "i"], ["g"], name="gather0", axis=0),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("g", TensorProto.INT64, [])],
        [helper.make_tensor("i", TensorProto.INT64, [], [0])],
    )
    report = check_graph_hygiene(helper.make_model(graph))
    text = " ".join(report.problems)
    assert "Shape" in text and "Gather on a shape" in text and "non-static" in text
    assert check_graph_hygiene(helper.make_model(graph), {"dim_params": {"n"}}, allowed_ops=frozenset({"Shape", "Gather"}))


@pytest.mark.slow
def test_full_size_vit_b_architecture_exports_clean(tmp_path: Path) -> None:
    """The real vit_b recipe (random weights) exports to a clean graph; node counts go to the report."""
    from vitdeploy.pipeline import export_from_recipe

    result = export_from_recipe("sam_vit_b", tmp_path / "vit_b.onnx", random_weights=True, seed=0)
    counts = result.hygiene.op_counts
    assert result.hygiene and result.input_shapes["image"] == [1, 3, 1024, 1024]
    assert result.output_shapes["image_embeddings"] == [1, 256, 64, 64]
    assert counts["Softmax"] == 12 and counts.get("Einsum", 0) == 0 and counts.get("Shape", 0) == 0
    report = json.loads(json.dumps(result.to_dict()))
    assert report["hygiene"]["op_counts"] == counts


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["sam_vit_l", "sam_vit_h"])
def test_large_recipes_export_clean(recipe: str, tmp_path: Path) -> None:
    """vit_l (1.2 GB) and vit_h (2.5 GB, external data) exports: ~1-2 min and up to ~9 GB RAM each."""
    import os

    if os.environ.get("VITDEPLOY_ALL_RECIPES") != "1":
        pytest.skip("exports 1.2-2.5 GB of weights (~2 min, ~9 GB RAM each): set VITDEPLOY_ALL_RECIPES=1 to run")
    from vitdeploy.pipeline import export_from_recipe

    result = export_from_recipe(recipe, tmp_path / f"{recipe}.onnx", random_weights=True, seed=0)
    assert result.hygiene, result.hygiene.problems
    if recipe == "sam_vit_h":
        assert result.external_data is not None and result.external_data.stat().st_size > 2**31


def test_architecture_read_off_the_module_matches_the_recipe() -> None:
    from vitdeploy.models.recipes import load_recipe
    from vitdeploy.models.sam_encoder import SamEncoderArch, build_sam_image_encoder

    for name, arch in TINY_ARCHS.items():
        assert SamEncoderArch.from_module(tiny_encoder(name)) == arch, name
    vit_b = SamEncoderArch.from_recipe(load_recipe("sam_vit_b"))
    assert SamEncoderArch.from_module(build_sam_image_encoder(vit_b)) == vit_b


def test_an_export_names_no_path_of_the_machine_that_made_it(exported) -> None:
    """torch.onnx records a Python stack trace per node, with absolute paths (the checkout, the venv): the same
    export then differed in bytes between two checkouts and told where it was made. vitdeploy drops them and
    keeps each node's module names."""
    import sys

    path = exported["padded"][0].path
    data = path.read_bytes()
    for place in {str(Path(__file__).resolve().parents[2]), sys.prefix, str(Path(torch.__file__).parent)}:
        assert place.encode() not in data, place
    keys = {p.key for node in onnx.load(str(path)).graph.node for p in node.metadata_props}
    assert "pkg.torch.onnx.stack_trace" not in keys
    assert "pkg.torch.onnx.name_scopes" in keys  # the layer a node comes from is still there
