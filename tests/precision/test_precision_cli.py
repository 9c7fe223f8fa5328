"""``vitdeploy calibrate``: outputs with metadata that ``validate`` understands, and bad input with clear errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from PIL import Image

from precision_fixtures import calib_cache, tiny_exports  # noqa: F401  (fixtures)
from vitdeploy.cli import cli
from vitdeploy.metadata import read_onnx_metadata
from vitdeploy.precision.calibration_data import bundled_calibration_dir

IMAGES = str(bundled_calibration_dir())


def _run(args: list[str]):
    return CliRunner().invoke(cli, args, catch_exceptions=False)


@pytest.fixture
def fp16_file(tiny_exports, calib_cache, tmp_path) -> Path:
    out = tmp_path / "tiny.fp16.onnx"
    result = _run(["calibrate", str(tiny_exports["matmul"]), "-p", "fp16", "-o", str(out), "-i", IMAGES,
                   "--cache-dir", str(calib_cache), "--report", str(tmp_path / "r.json")])
    assert result.exit_code == 0, result.output
    assert "parity vs FP32 ONNX" in result.output and "parity vs eager official" in result.output
    return out


def test_fp16_cli_writes_metadata_and_validate_accepts_it(fp16_file, tmp_path):
    meta = read_onnx_metadata(str(fp16_file))
    assert meta["precision"] == "fp16" and meta["calibration_images"] == 12
    assert "node_softmax" in meta["higher_precision_nodes"]
    assert (tmp_path / "r.json").is_file()
    result = _run(["validate", str(fp16_file), "--random-inputs", "1", "--runs", "0"])
    assert result.exit_code == 0, result.output
    assert "tolerance 'fp16'" in result.output


def test_int8_cli_with_budget(tiny_exports, calib_cache, tmp_path):
    out = tmp_path / "tiny.int8.onnx"
    result = _run(["calibrate", str(tiny_exports["matmul"]), "-p", "int8", "-o", str(out), "--method", "percentile",
                   "--target-cosine", "0.999", "--cache-dir", str(calib_cache), "--no-eager"])
    assert result.exit_code == 0, result.output
    assert "WARNING: no --images given" in result.output
    assert "most sensitive layers" in result.output
    meta = read_onnx_metadata(str(out))
    assert meta["precision"] == "int8" and meta["calibration_method"].startswith("percentile")
    assert any(n.op_type == "QuantizeLinear" for n in onnx.load(str(out)).graph.node)


def _assert_user_error(result, *needles: str) -> None:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    line = result.output.strip().splitlines()[-1]
    assert line.startswith("error: ")
    for needle in needles:
        assert needle in line, line


def test_bad_inputs(tiny_exports, calib_cache, fp16_file, tmp_path):
    model = str(tiny_exports["matmul"])
    out = tmp_path / "never.onnx"
    empty = tmp_path / "empty"
    empty.mkdir()
    _assert_user_error(_run(["calibrate", model, "-p", "int8", "-o", str(out), "-i", str(empty)]), "holds no images")
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    for i in range(8):
        (corrupt / f"c{i}.png").write_bytes(b"\x89PNG\r\n\x1a\n garbage")
    _assert_user_error(_run(["calibrate", model, "-p", "int8", "-o", str(out), "-i", str(corrupt), "--no-cache"]),
                       "0 usable calibration image", "cannot be decoded")
    gray = tmp_path / "gray"
    gray.mkdir()
    for i in range(8):
        Image.fromarray(np.full((40, 50), 30 * i, np.uint8)).save(gray / f"g{i}.png")
    _assert_user_error(_run(["calibrate", model, "-p", "fp16", "-o", str(out), "-i", str(gray), "--no-cache"]),
                       "1 channel(s)", "convert it to RGB")
    _assert_user_error(_run(["calibrate", str(fp16_file), "-p", "int8", "-o", str(out), "-i", IMAGES]),
                       "already fp16")
    not_onnx = tmp_path / "x.onnx"
    not_onnx.write_bytes(b"this is not a protobuf \x00\xff")
    _assert_user_error(_run(["calibrate", str(not_onnx), "-p", "fp16", "-o", str(out)]), "not")
    _assert_user_error(_run(["calibrate", str(tmp_path / "missing.onnx"), "-p", "fp16", "-o", str(out)]), "not found")
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".never")]
    usage = _run(["calibrate", model, "-p", "fp8", "-o", str(out)])
    assert usage.exit_code == 2


def test_external_data_models_convert_and_models_past_protobufs_limit_take_the_large_path(tmp_path, calib_cache, monkeypatch):
    """Weights in a .data file are read for the passes; a model "over" the single-message limit (lowered here so
    a tiny model is one) is never serialized whole: it converts to the same graph and is written with external data."""
    from precision_fixtures import MEAN, STD, TINY
    from vitdeploy.models.sam_encoder import load_sam_image_encoder
    from vitdeploy.onnx_export.sam_encoder import export_sam_image_encoder, sam_encoder_metadata
    from vitdeploy.precision import model_io

    model = tmp_path / "ext.onnx"
    meta = sam_encoder_metadata(variant="tiny", input_size=TINY.img_size, pixel_mean=MEAN, pixel_std=STD,
                                architecture=TINY.to_dict(), random_seed=0)
    result = export_sam_image_encoder(load_sam_image_encoder(TINY, random_seed=0), model, metadata=meta, external_data=True)
    assert result.external_data is not None and result.external_data.is_file()
    common = ["-i", IMAGES, "--cache-dir", str(calib_cache), "--no-eager"]
    small = {p: tmp_path / f"small.{p}.onnx" for p in ("fp16", "int8")}
    for precision, out in small.items():
        converted = _run(["calibrate", str(model), "-p", precision, "-o", str(out), *common])
        assert converted.exit_code == 0, converted.output
        assert not Path(str(out) + ".data").exists()
    assert any(n.op_type == "QuantizeLinear" for n in onnx.load(str(small["int8"])).graph.node)

    size = model_io.inline_weight_bytes(onnx.load(str(model)))
    monkeypatch.setattr(model_io, "SINGLE_MESSAGE_MAX_BYTES", size // 4)

    for precision, reference in small.items():
        out = tmp_path / f"large.{precision}.onnx"
        converted = _run(["calibrate", str(model), "-p", precision, "-o", str(out), *common])
        assert converted.exit_code == 0, converted.output
        assert Path(str(out) + ".data").is_file() and "weights in large." in converted.output
        got, want = onnx.load(str(out)), onnx.load(str(reference))
        assert [(n.op_type, n.name) for n in got.graph.node] == [(n.op_type, n.name) for n in want.graph.node]
        for a, b in zip(got.graph.initializer, want.graph.initializer):
            np.testing.assert_array_equal(onnx.numpy_helper.to_array(a), onnx.numpy_helper.to_array(b))


def test_no_holdout_warns_that_parity_is_measured_on_the_calibration_images(tiny_exports, calib_cache, tmp_path):
    out = tmp_path / "h0.int8.onnx"
    result = _run(["calibrate", str(tiny_exports["matmul"]), "-p", "int8", "-o", str(out), "-i", IMAGES,
                   "--cache-dir", str(calib_cache), "--holdout", "0", "--max-images", "1", "--min-images", "1", "--no-eager"])
    assert result.exit_code == 0, result.output
    assert "warning: no images held out (--holdout 0)" in result.output and "flatters INT8" in result.output
    parity = next(line for line in result.output.splitlines() if line.startswith("parity vs FP32 ONNX"))
    assert "on the calibration images: none held out" in parity, parity  # the figure itself says what it is
    assert "pre-processing before quantization" not in result.output  # ORT's advice is not for our graphs
    time_line = next(line for line in result.output.splitlines() if line.startswith("time: "))
    assert all(step in time_line for step in ("load model", "load images", "measure and convert", "write"))
