"""The contract every registered model family keeps, tested over ``vitdeploy.families.FAMILIES`` the way timm's
tests run over ``list_models()``: export through the library call behind ``vitdeploy export``, graph hygiene,
metadata (complete, consistent with the graph, readable by the family), parity against the official eager
model rebuilt from that metadata (``validate``), ``inspect``, and the same numbers on every ONNX runtime
installed here.

A new family fails :func:`test_every_family_has_a_tiny_recipe` until it gets a tiny recipe below, and then
runs every test here. The recipes are tiny configurations of the official models (seconds to export),
every code path of the family kept.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.family_exports import SEED, TINY_RECIPES, family_export
from vitdeploy.families import FAMILIES
from vitdeploy.metadata import REQUIRED_KEYS, metadata_problems, read_onnx_metadata
from vitdeploy.onnx_export.exporter import ExportResult
from vitdeploy.onnx_export.hygiene import check_graph_hygiene
from vitdeploy.runtime.deploy.loader import open_runner
from vitdeploy.runtime.backends.registry import ONNX_RUNTIMES, RUNTIMES
from vitdeploy.parity import compare
from vitdeploy.validation.validate_model import ValidateOptions, validate_model


def test_every_family_has_a_tiny_recipe() -> None:
    assert set(TINY_RECIPES) == set(FAMILIES), "give each registered family a tiny recipe here"


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def exported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, ExportResult]:
    """The family's tiny export (tests/family_exports.py: made once per run, shared with TensorRT for RTX's tests)."""
    name = request.param
    if name.startswith("sam2"):
        pytest.importorskip("sam2", reason="the official sam2 package is not installed (scripts/test.sh installs it)")
    if name.startswith("sam3"):
        pytest.importorskip("sam3", reason="the official sam3 package is not installed (scripts/test.sh installs it)")
    path, result = family_export(tmp_path_factory, name)
    return name, path, result


def test_export_leaves_one_file_under_its_name(exported: tuple[str, Path, ExportResult]) -> None:
    _, path, _ = exported
    assert sorted(p.name for p in path.parent.iterdir() if p.suffix != ".toml") == [path.name]


def test_graph_is_hygiene_clean(exported: tuple[str, Path, ExportResult]) -> None:
    """The written file, checked again on its own: static shapes but for the symbolic axes its inputs declare, and no
    banned op (Shape, Range, Einsum, ...); the shapes the export reported are the file's."""
    _, path, result = exported
    model = onnx.shape_inference.infer_shapes(onnx.load(path), strict_mode=True)
    declared = {d.dim_param for i in model.graph.input for d in i.type.tensor_type.shape.dim if d.dim_param}
    report = check_graph_hygiene(model, {"dim_params": declared})
    assert report, report.to_dict()
    assert list(result.input_shapes) == [i.name for i in model.graph.input]
    assert list(result.output_shapes) == [o.name for o in model.graph.output]


def test_metadata_is_complete_and_agrees_with_the_graph(exported: tuple[str, Path, ExportResult]) -> None:
    name, path, _ = exported
    meta = read_onnx_metadata(path)
    assert meta["family"] == name
    assert set(REQUIRED_KEYS) <= set(meta), sorted(set(REQUIRED_KEYS) - set(meta))
    assert meta["random_weights"] is True and meta["random_seed"] == SEED
    with open_runner(path) as runner:
        assert metadata_problems(meta, runner.input_shapes(), runner.output_names) == []
    assert FAMILIES[name].metadata_problems(meta, for_reference=True) == []
    assert set(FAMILIES[name].required_metadata) <= set(meta)


def test_parity_against_the_official_model(exported: tuple[str, Path, ExportResult]) -> None:
    """``validate``: the official eager model rebuilt from the file's metadata alone, fp32 tolerance, two inputs."""
    _, path, _ = exported
    report = validate_model(path, ValidateOptions(runs=0, random_inputs=2, threads=2))
    assert report, report.to_dict()


def test_inspect_names_the_family_and_its_role(exported: tuple[str, Path, ExportResult]) -> None:
    from vitdeploy.artifact_info import describe, inspect_artifact

    name, path, _ = exported
    info = inspect_artifact(path)
    assert info["metadata"]["family"] == name
    lines = describe(info)
    assert any(name in line for line in lines)
    assert FAMILIES[name].role and f"  role: {FAMILIES[name].role}" in lines, "say what a file of this family is for"


@pytest.mark.parametrize("runtime", [r for r in ONNX_RUNTIMES if r != "onnxruntime"])
def test_every_onnx_runtime_computes_the_same(exported: tuple[str, Path], runtime: str) -> None:
    """Each other runtime that opens ONNX files gives ONNX Runtime's numbers (fp32 tolerance) on the family's inputs."""
    name, path, _ = exported
    entry = RUNTIMES[runtime]
    if not entry.installed():
        pytest.skip(f"{runtime} is not installed ({entry.install})")
    with open_runner(path) as reference, open_runner(path, runtime=runtime) as other:
        assert other.input_names == reference.input_names and other.output_names == reference.output_names
        inputs = FAMILIES[name].random_input_sets(reference.metadata, reference.input_names, reference.input_shapes(), 1)
        want, got = reference.run(inputs[0].feeds), other.run(inputs[0].feeds)
        for key in reference.output_names:
            result = compare(np.asarray(want[key]), np.asarray(got[key]), "fp32", label=f"{name} {runtime} {key}")
            assert result, result.summary()


def test_every_family_says_which_model_and_part_it_is() -> None:
    """Applications compose parts by (model, part): each family names both, no two families the same pair, and a
    file's metadata finds its family's pair (nothing for a file without a known family)."""
    from vitdeploy.families import FAMILIES, family_of_part, model_part

    pairs = [(family.model, family.part) for family in FAMILIES.values()]
    assert all(model and part for model, part in pairs) and len(set(pairs)) == len(pairs), pairs
    assert all(family.title for family in FAMILIES.values())
    for family in FAMILIES.values():
        assert model_part({"family": family.name}) == (family.model, family.part)
        assert family_of_part(family.model, family.part) is family
    assert model_part({}) == ("", "") and model_part({"family": "unknown"}) == ("", "") and model_part({"family": 3}) == ("", "")
