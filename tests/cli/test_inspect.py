"""``vitdeploy inspect``: ONNX files (FP32 export, FP16 calibrated) and engines through their sidecar, no TensorRT."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import onnx
from click.testing import CliRunner

from tests.sam_tiny import TinySamArtifacts
from vitdeploy.cli import cli
from vitdeploy.engine.sidecar import make_sidecar, write_sidecar

pytest_plugins = ["tests.sam_tiny_fixtures"]


def _inspect(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["inspect", *args])
    return result.exit_code, result.output


def test_an_fp32_export_shows_io_metadata_and_op_counts(tiny_sam_artifacts: TinySamArtifacts) -> None:
    code, text = _inspect(str(tiny_sam_artifacts.encoder))
    assert code == 0, text
    model = onnx.load(str(tiny_sam_artifacts.encoder), load_external_data=False)
    assert f"nodes: {len(model.graph.node)} (" in text
    assert "image: float32 [1, 3, 64, 64]" in text and "precision: fp32" in text
    assert "random weights (seed" in text and "sam_image_encoder" in text
    code, raw = _inspect(str(tiny_sam_artifacts.encoder), "--json")
    info = json.loads(raw)
    counts = {}
    for node in model.graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    assert info["op_counts"] == counts and info["graph_precision"] == "fp32"
    assert info["inputs"][0]["dims"] == [1, 3, 64, 64]


def test_a_decoder_shows_its_symbolic_axis(tiny_sam_artifacts: TinySamArtifacts) -> None:
    code, text = _inspect(str(tiny_sam_artifacts.decoder))
    assert code == 0 and "point_coords: float32 [1, num_points, 2]" in text, text


def test_an_fp16_file_shows_its_islands(tmp_path, tiny_sam_artifacts: TinySamArtifacts) -> None:
    from vitdeploy.precision.half_precision import rewrite_to_half
    from vitdeploy.precision.report import precision_metadata, read_metadata, stamp_metadata

    model = onnx.load(str(tiny_sam_artifacts.encoder))
    keep = [n.name for n in model.graph.node if n.op_type == "LayerNormalization"]
    converted = rewrite_to_half(model, keep)
    stamp_metadata(converted, precision_metadata(read_metadata(model), precision="fp16", method="test", image_count=3,
                                                 kept={k: "test" for k in keep}, tool="t", calibration_source="x"))
    path = tmp_path / "m.fp16.onnx"
    onnx.save(converted, str(path))
    info = json.loads(_inspect(str(path), "--json")[1])
    assert info["precision"] == "fp16" == info["graph_precision"]
    assert info["precision_detail"]["nodes_kept_in_higher_precision"] == len(keep) > 0
    assert info["precision_detail"]["casts"]["to_fp32"] > 0 and "float16" in info["precision_detail"]["initializers_by_type"]


def test_an_engine_is_read_through_its_sidecar_and_its_hash_checked(tmp_path) -> None:
    plan_bytes = np.random.default_rng(0).integers(0, 255, 4096, dtype=np.uint8).tobytes()
    plan = tmp_path / "m.plan"
    plan.write_bytes(plan_bytes)
    write_sidecar(plan, make_sidecar(
        plan_file="m.plan", plan_size=len(plan_bytes), plan_sha256=hashlib.sha256(plan_bytes).hexdigest(),
        onnx_file="m.onnx", onnx_sha256="ab" * 32, external_data={}, metadata={"family": "sam_image_encoder", "variant": "vit_b"},
        precision="fp16", network="strongly_typed", tensorrt_version="10.13.0.35",
        gpu={"name": "NVIDIA L4", "compute_capability": "8.9", "index": 0},
        profiles=[{"image": {"min": [1, 3, 64, 64], "opt": [2, 3, 64, 64], "max": [4, 3, 64, 64]}}],
        io={"inputs": [{"name": "image", "dtype": "float32", "shape": [-1, 3, 64, 64]}], "outputs": []},
        build_options={}, build_seconds=1.0))
    code, text = _inspect(str(plan))
    assert code == 0, text
    assert "TensorRT 10.13.0.35" in text and "NVIDIA L4" in text and "precision: fp16" in text
    assert "profile 0: image min [1, 3, 64, 64] opt [2, 3, 64, 64] max [4, 3, 64, 64]" in text
    assert "matches the sidecar's SHA-256" in text
    plan.write_bytes(plan_bytes[:-1] + b"\x00" if plan_bytes[-1] else plan_bytes[:-1] + b"\x01")
    code, text = _inspect(str(plan))  # a damaged artifact is not reported healthy: listed, then exit 1
    assert code == 1 and "does NOT match" in text and "PROBLEM: the plan does not match the SHA-256" in text, text
    assert f"error: '{plan}' is damaged: the plan does not match" in text, text


def test_other_files_get_one_line_errors(tmp_path) -> None:
    missing = _inspect(str(tmp_path / "nope.onnx"))
    assert missing[0] == 1 and "not found" in missing[1]
    text_file = tmp_path / "notes.txt"
    text_file.write_text("hello")
    other = _inspect(str(text_file))
    assert other[0] == 1 and "neither an ONNX file nor a TensorRT engine" in other[1], other
    orphan = tmp_path / "m.plan"
    orphan.write_bytes(b"x")
    no_sidecar = _inspect(str(orphan))
    assert no_sidecar[0] == 1 and "has no sidecar" in no_sidecar[1], no_sidecar
