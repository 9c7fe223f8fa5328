"""SAM 3's detector (geometry encoder, fusion encoder, decoder with presence token and box bias, dot-product scoring,
segmentation head) rewritten, exported and proven equal to the official ``sam3`` package's
``Sam3Image.forward_grounding``, on the tiny seeded recipe ``sam3_tiny_detector``."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from tests.cli_helpers import assert_calibrated_within, assert_user_error, run
from tests.sam3_fixtures import SEED, sam3_tiny_files
from vitdeploy.metadata import metadata_of
from vitdeploy.models.recipes import RECIPE_DIR
from vitdeploy.parity import TOLERANCES, compare
from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner

pytest.importorskip("sam3", reason="the official sam3 package is not installed (scripts/test.sh installs it)")

FP32 = TOLERANCES["fp32"]
RECIPE = "sam3_tiny_detector"
OUTPUTS = ("pred_logits", "pred_boxes", "pred_masks", "presence_logit")


def arch():
    from vitdeploy.models.sam3_detector import Sam3DetectorArch

    return Sam3DetectorArch.from_dict(tomllib.loads((RECIPE_DIR / f"{RECIPE}.toml").read_text())["architecture"])


@pytest.fixture(scope="module")
def official():
    """The official detector (``Sam3Image`` without backbone) behind ``forward_grounding``, the export's weights."""
    from vitdeploy.models.sam3_detector import build_position_encoding, load_sam3_detector
    from vitdeploy.rewrites.sam3_detector import Sam3Detector

    a = arch()
    return Sam3Detector(load_sam3_detector(a, random_seed=SEED), build_position_encoding(a.d_model)).eval()


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sam3_tiny_files(tmp_path_factory)[2]


def feeds(boxes: int, seed: int, batch: int = 1) -> dict[str, np.ndarray]:
    from vitdeploy.families import FAMILIES

    a = arch()
    return FAMILIES["sam3_detector"].example_feeds(a.grid, a.d_model, batch, boxes, seed)


def reference(official, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    from vitdeploy.rewrites.sam3_detector import INPUT_NAMES

    with torch.inference_mode():
        return [t.numpy() for t in official(*(torch.from_numpy(inputs[name]) for name in INPUT_NAMES))]


def assert_fp32(want: list[np.ndarray], got: list[np.ndarray], what: str) -> None:
    for name, w, g in zip(OUTPUTS, want, got):
        result = compare(w, g, FP32, f"{what}/{name}")
        assert result.passed, result.summary()


def test_the_rewrite_computes_the_official_forward_grounding(official) -> None:
    """Two images in one batch, each with its own text length and number of exemplar boxes (positive and negative,
    the rest of the slots padding): every output within the fp32 budget of the official, both sides padded alike."""
    from vitdeploy.models.sam3_detector import build_position_encoding
    from vitdeploy.rewrites.sam3_detector import INPUT_NAMES, rewrite_sam3_detector

    a = arch()
    ours = rewrite_sam3_detector(official.detector, build_position_encoding(a.d_model), a.grid)
    inputs = feeds(boxes=4, seed=11, batch=2)
    assert inputs["box_padding"].any() and not inputs["box_padding"].all(axis=1).any()
    with torch.inference_mode():
        got = [t.numpy() for t in ours(*(torch.from_numpy(inputs[name]) for name in INPUT_NAMES))]
    assert_fp32(reference(official, inputs), got, "eager")


@pytest.mark.parametrize("valid", [0, 1, 3], ids=["text-only", "one-box", "three-boxes"])
def test_padded_box_slots_give_the_official_answer_without_them(official, exported: Path, valid: int) -> None:
    """The static layout's claim: the file's 8 slots (``max_boxes``), ``valid`` of them real, against the official
    given only the real boxes (none: ``Sam3Image._get_dummy_prompt``, as a text prompt alone runs)."""
    inputs = feeds(boxes=8, seed=20 + valid)
    inputs["box_padding"][:] = np.arange(8)[None, :] >= valid
    unpadded = {**inputs, "boxes": inputs["boxes"][:, :valid], "box_labels": inputs["box_labels"][:, :valid],
                "box_padding": inputs["box_padding"][:, :valid]}
    got = OnnxRuntimeRunner(exported).run(inputs)
    assert_fp32(reference(official, unpadded), [got[name] for name in OUTPUTS], f"{valid} boxes in 8 slots")


def test_the_file_has_max_boxes_slots_and_one_or_all_of_them_match(official, exported: Path) -> None:
    """The box slots are fixed (the recipe's ``max_boxes``, recorded in the metadata); 1 and 8 real boxes both match
    the official."""
    model = onnx.load(str(exported), load_external_data=False)
    dims = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    assert dims["boxes"] == [1, 8, 4] and dims["box_padding"] == [1, 8] and dims["text_padding"] == [1, 32]
    assert metadata_of(model)["max_boxes"] == 8
    runner = OnnxRuntimeRunner(exported)
    for count in (1, 8):
        inputs = feeds(boxes=8, seed=30 + count)
        inputs["box_padding"][:] = np.arange(8)[None, :] >= count
        got = runner.run(inputs)
        assert_fp32(reference(official, inputs), [got[name] for name in OUTPUTS], f"{count} boxes")


def test_validate_passes_on_the_file(exported: Path) -> None:
    code, output = run("validate", str(exported), "--runs", "1")
    assert code == 0, output
    assert "parity: all comparisons within tolerance" in output and "prompt0/pred_masks" in output


def test_options_the_detector_does_not_have_are_refused(tmp_path: Path) -> None:
    out = tmp_path / "d.onnx"
    code, output = run("export", "-r", RECIPE, "--random-weights", "--dynamic-batch", "-o", str(out))
    assert_user_error(code, output, "--dynamic-batch does not apply to SAM 3's detector")
    code, output = run("export", "-r", RECIPE, "--random-weights", "--input-size", "84", "-o", str(out))
    assert_user_error(code, output, "--input-size does not apply to SAM 3's detector")
    bad = tmp_path / "bad.toml"
    bad.write_text((RECIPE_DIR / f"{RECIPE}.toml").read_text().replace("max_boxes = 8", "max_boxes = 0"))
    code, output = run("export", "-r", str(bad), "--random-weights", "-o", str(out))
    assert_user_error(code, output, "[detector] max_boxes must be 1 to 256, got 0")
    assert not out.exists()


def test_the_exporter_refuses_a_dynamic_axis_the_code_fixes(tmp_path: Path) -> None:
    """``torch.onnx.export`` falls back to the example's size when traced code specializes a dynamic axis: the
    exporter says so instead of writing a file that takes one size."""
    from vitdeploy.errors import ExportError
    from vitdeploy.onnx_export.exporter import export_onnx

    class FixesTheCount(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * len(x)  # len() makes the count a Python int

    out = tmp_path / "fixed.onnx"
    with pytest.raises(ExportError, match=r"fixed axis 0 \('count'\) of input 'x' to 3"):
        export_onnx(FixesTheCount().eval(), (torch.ones(3, 2),), out, input_names=["x"], output_names=["y"], metadata={},
                    dynamic_axes={"x": {0: "count"}})
    assert not out.exists()


@pytest.mark.parametrize("grid", [8, 72], ids=["tiny-grid", "full-grid"])
def test_box_pooling_by_sampling_is_torchvisions_roi_align(grid: int) -> None:
    """The pooling without RoiAlign (TensorRT-RTX has none) against ``torchvision.ops.roi_align`` as the official
    geometry encoder calls it: random boxes, the whole map, a box thinner than one cell, one at the far corner."""
    import torchvision

    from vitdeploy.rewrites.sam3_detector import roi_align_by_sampling

    gen = torch.Generator().manual_seed(grid)
    features = torch.randn(2, 16, grid, grid, generator=gen)
    centers, sizes = torch.rand(2, 6, 2, generator=gen) * grid, torch.rand(2, 6, 2, generator=gen) * grid
    boxes = torch.cat([(centers - sizes / 2).clamp(0, grid), (centers + sizes / 2).clamp(0, grid)], dim=-1)
    boxes[0, :3] = torch.tensor([[0.0, 0.0, grid, grid], [3.0, 3.0, 3.2, 3.1], [grid - 0.5, grid - 0.5, grid, grid]])
    rows = torch.cat([torch.arange(2.0).reshape(2, 1, 1).expand(2, 6, 1), boxes], dim=-1).reshape(-1, 5)
    result = compare(torchvision.ops.roi_align(features, rows, 7), roi_align_by_sampling(features, boxes, 7), FP32,
                     "roi_align")
    assert result.passed and result.max_abs < 1e-6, result.summary()


def test_fp16_of_the_detector_holds_on_inputs_recorded_from_the_bundled_images(tmp_path_factory) -> None:
    """FP16 through the detector: its inputs recorded while Sam3Processor runs the tiny model on bundled images (a
    text prompt, then an exemplar box), ``calibrate -p fp16 --feeds`` on them; the held-out sets within the fp16
    budget of the FP32 file and of the official eager detector (cosine >= 0.9999)."""
    from vitdeploy.precision.calibration_data import bundled_calibration_dir
    from vitdeploy.runtime.apps.sam3.processor import Sam3ImageModel, Sam3Processor
    from vitdeploy.runtime.processing.images import read_image_rgb

    files = sam3_tiny_files(tmp_path_factory)
    model = Sam3ImageModel(*files, runtime="onnxruntime")
    recorder = model.record_inputs("detector")
    processor = Sam3Processor(model)
    for path in sorted(bundled_calibration_dir().glob("calib_0[0-5]*")):
        state = processor.set_image(read_image_rgb(path))
        processor.set_text_prompt(state=state, prompt="a shape")
        processor.add_geometric_prompt([0.4, 0.5, 0.3, 0.4], True, state)
    folder = tmp_path_factory.mktemp("sam3_fp16")
    recorder.save(folder / "inputs.npz", {"graph": "detector"})
    code, output = run("calibrate", str(files[2]), "-p", "fp16", "--feeds", str(folder / "inputs.npz"), "-o",
                       str(folder / "detector.fp16.onnx"))
    assert code == 0, output
    assert_calibrated_within(output, "fp16", 0.9999)


def test_a_full_size_detector_is_probed_on_its_first_fusion_and_decoder_layers(exported: Path, tmp_path: Path) -> None:
    """The full-size detector (137 MB) is probed on the first fusion-encoder layer and the first decoder layer, cut
    from the real graph by the exporter's scopes (here the tiny file, as if it were large): fed what the whole graph
    computes at the layers' inputs, the part gives what the whole graph computes at their outputs."""
    import onnxruntime as ort

    from tests.runtime.deploy.test_probe import _with_intermediates
    from vitdeploy.metadata import read_onnx_metadata
    from vitdeploy.runtime.deploy.graph_part import probe_part

    part = probe_part(exported, read_onnx_metadata(exported), tmp_path, whole_below=0)
    assert part.what == "fusion_layers.0, decoder_layers.0 of 4 blocks, at the file's shapes", part.what  # 2 + 2
    outputs = [o.name for o in onnx.load(str(part.path)).graph.output]
    whole = ort.InferenceSession(str(_with_intermediates(exported, list(part.feeds) + outputs, tmp_path / "full.onnx")),
                                 providers=["CPUExecutionProvider"])
    got = dict(zip([o.name for o in whole.get_outputs()], whole.run(None, feeds(boxes=8, seed=3))))
    cut = ort.InferenceSession(str(part.path), providers=["CPUExecutionProvider"])
    for name, value in zip(outputs, cut.run(outputs, {name: got[name] for name in part.feeds})):
        np.testing.assert_allclose(value, got[name], rtol=0, atol=1e-5 * float(np.abs(got[name]).max()), err_msg=name)
