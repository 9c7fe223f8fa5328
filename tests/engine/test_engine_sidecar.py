"""The engine sidecar: written atomically, read back with every problem named, and the plan checked against it.

These run the real sidecar code on real files; the plan bytes are arbitrary because nothing here
deserializes them (TensorRT does that in tests/engine/test_engine_tensorrt.py, on a GPU).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from vitdeploy.engine.sidecar import SIDECAR_SCHEMA, make_sidecar, read_plan_checked, read_sidecar, sidecar_path, write_sidecar
from vitdeploy.errors import EngineError, InputError

PLAN_BYTES = bytes(range(256)) * 40


def _sidecar(plan: bytes = PLAN_BYTES, **overrides: object) -> dict:
    fields = dict(
        plan_file="m.plan", plan_size=len(plan), plan_sha256=hashlib.sha256(plan).hexdigest(),
        onnx_file="m.onnx", onnx_sha256="ab" * 32, external_data={}, metadata={"family": "sam_image_encoder", "precision": "fp16"},
        precision="fp16", network="strongly_typed", tensorrt_version="10.13.0.35",
        gpu={"name": "NVIDIA L4", "compute_capability": "8.9", "index": 0},
        profiles=[], io={"inputs": [{"name": "image", "dtype": "float32", "shape": [1, 3, 64, 64]}], "outputs": []},
        build_options={"version_compatible": False, "hardware_compatibility": "none"}, build_seconds=12.3456,
    )
    fields.update(overrides)
    return make_sidecar(**fields)  # type: ignore[arg-type]


@pytest.fixture
def plan(tmp_path: Path) -> Path:
    path = tmp_path / "m.plan"
    path.write_bytes(PLAN_BYTES)
    write_sidecar(path, _sidecar())
    return path


def test_roundtrip_keeps_every_section_and_names_the_file(plan: Path) -> None:
    assert sidecar_path(plan).name == "m.plan.json"
    data = read_sidecar(plan)
    assert data["schema"] == SIDECAR_SCHEMA
    assert data["plan"] == {"file": "m.plan", "size_bytes": len(PLAN_BYTES), "sha256": hashlib.sha256(PLAN_BYTES).hexdigest()}
    assert data["tensorrt"]["version"] == "10.13.0.35" and data["gpu"]["compute_capability"] == "8.9"
    assert data["metadata"]["family"] == "sam_image_encoder" and data["precision"] == "fp16"
    assert data["build_seconds"] == 12.346
    assert not list(plan.parent.glob(".*tmp")), "atomic write left a temporary file"
    assert read_plan_checked(plan, data) == PLAN_BYTES


def test_truncated_plan_is_named_as_truncated(plan: Path) -> None:
    plan.write_bytes(PLAN_BYTES[:1000])
    with pytest.raises(EngineError, match=r"m\.plan' is 1000 bytes but its sidecar records 10240: the plan is truncated"):
        read_plan_checked(plan, read_sidecar(plan))


def test_same_size_different_plan_fails_the_hash(plan: Path) -> None:
    plan.write_bytes(bytes(reversed(PLAN_BYTES)))
    with pytest.raises(EngineError, match="does not match the SHA-256"):
        read_plan_checked(plan, read_sidecar(plan))


def test_missing_plan_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not found"):
        read_plan_checked(tmp_path / "none.plan", _sidecar())


def test_missing_sidecar(tmp_path: Path) -> None:
    lone = tmp_path / "lone.plan"
    lone.write_bytes(PLAN_BYTES)
    with pytest.raises(EngineError, match=r"'lone\.plan' has no sidecar 'lone\.plan\.json'.*vitdeploy build-engine"):
        read_sidecar(lone)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "is not valid JSON"),
        (json.dumps({"schema": "other/9"}), "has schema 'other/9', expected 'vitdeploy.engine-sidecar/1'"),
        (json.dumps([1, 2]), "has schema 'list'"),
        (json.dumps({"schema": SIDECAR_SCHEMA, "plan": {"sha256": "x"}, "tensorrt": {}, "gpu": {}}),
         "lacks plan.size_bytes, tensorrt.version, gpu.compute_capability"),
    ],
)
def test_malformed_sidecar(plan: Path, content: str, message: str) -> None:
    sidecar_path(plan).write_text(content)
    with pytest.raises(EngineError, match=message):
        read_sidecar(plan)
