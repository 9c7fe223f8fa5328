"""Decoder ONNX export: parity on ONNX Runtime vs the official modules for several point counts, a clean
graph whose only dynamic dimension is the point count, and no shape-tensor inputs (TensorRT)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch

from tests.sam_tiny import SEED, TinySamArtifacts, tiny_decoder
from vitdeploy.metadata import read_onnx_metadata
from vitdeploy.onnx_export.hygiene import check_graph_hygiene
from vitdeploy.onnx_export.sam_decoder import INPUT_NAMES, OUTPUT_NAMES
from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner
from vitdeploy.models.sam_decoder import OfficialDecoderReference
from vitdeploy.parity import TOLERANCES, compare

FP32 = TOLERANCES["fp32"]

#: ONNX ops and the input positions that are shapes/sizes/indices-of-shape (TensorRT shape tensors).
SHAPE_OPERANDS = {"Reshape": (1,), "Expand": (1,), "Tile": (1,), "Slice": (1, 2, 3, 4), "Resize": (1, 2, 3),
                  "ConstantOfShape": (0,), "Range": (0, 1, 2), "Pad": (1,), "Squeeze": (1,), "Unsqueeze": (1,),
                  "TopK": (1,), "OneHot": (1,)}

pytest_plugins = ["tests.sam_tiny_fixtures"]  # the session fixture tiny_sam_artifacts, shared by every file


def _feeds(points: int, box: bool, mask: bool, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    coords = rng.uniform(0, 64, (points, 2))
    labels = rng.integers(0, 2, points).astype(np.float64)
    if box:
        coords = np.concatenate([coords, [[5.0, 7.0], [50.0, 41.0]]])
        labels = np.concatenate([labels, [2.0, 3.0]])
    else:
        coords = np.concatenate([coords, np.zeros((1, 2))])
        labels = np.concatenate([labels, [-1.0]])
    return {
        "image_embeddings": rng.standard_normal((1, 16, 8, 8)).astype(np.float32),
        "point_coords": coords[None].astype(np.float32),
        "point_labels": labels[None].astype(np.float32),
        "mask_input": (3 * rng.standard_normal((1, 1, 32, 32))).astype(np.float32),
        "has_mask_input": np.array([1.0 if mask else 0.0], dtype=np.float32),
    }


@pytest.mark.parametrize("points,box,mask", [(1, False, False), (2, False, True), (0, True, False), (6, True, True)])
def test_onnxruntime_matches_official_for_any_point_count(tiny_sam_artifacts: TinySamArtifacts, points: int, box: bool,
                                                          mask: bool) -> None:
    official = tiny_decoder(SEED)
    reference = OfficialDecoderReference(official.prompt_encoder, official.mask_decoder, (0, 4))
    runner = OnnxRuntimeRunner(tiny_sam_artifacts.decoder, threads=2)
    for seed in (11, 12):
        feeds = _feeds(points, box, mask, seed)
        with torch.no_grad():
            ref = reference(*(torch.from_numpy(feeds[n]) for n in INPUT_NAMES))
        out = runner.run(feeds)
        for name, ref_value in zip(OUTPUT_NAMES, ref):
            result = compare(ref_value, out[name], FP32, label=f"{points}pts/box={box}/mask={mask}/{name}")
            assert result, result.summary()


def test_graph_is_clean_with_only_the_point_count_dynamic(tiny_sam_artifacts: TinySamArtifacts) -> None:
    model = onnx.shape_inference.infer_shapes(onnx.load(str(tiny_sam_artifacts.decoder)), strict_mode=True)
    assert check_graph_hygiene(model, {"dim_params": {"num_points"}})
    strict = check_graph_hygiene(model)  # without the allowance, the point axis is the only complaint
    assert strict.problems and all("num_points" in p for p in strict.problems), strict.problems
    dims = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in model.graph.input}
    assert dims == {"image_embeddings": [1, 16, 8, 8], "point_coords": [1, "num_points", 2], "point_labels": [1, "num_points"],
                    "mask_input": [1, 1, 32, 32], "has_mask_input": [1]}
    outs = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in model.graph.output}
    assert outs == {"low_res_masks": [1, 4, 32, 32], "iou_predictions": [1, 4]}


def test_no_graph_input_reaches_a_shape_operand(tiny_sam_artifacts: TinySamArtifacts) -> None:
    """TensorRT: no input is a shape tensor (the official export's float orig_im_size fails to parse)."""
    model = onnx.load(str(tiny_sam_artifacts.decoder))
    assert all(v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT for v in model.graph.input)
    derived = {v.name for v in model.graph.input}
    for node in model.graph.node:  # topological order
        for position in SHAPE_OPERANDS.get(node.op_type, ()):
            if position < len(node.input):
                assert node.input[position] not in derived, f"{node.op_type} {node.name} takes a shape from a graph input"
        if any(i in derived for i in node.input):
            derived.update(node.output)


def test_metadata_describes_the_contract(tiny_sam_artifacts: TinySamArtifacts) -> None:
    meta = read_onnx_metadata(str(tiny_sam_artifacts.decoder))
    assert meta["family"] == "sam_mask_decoder" and meta["variant"] == "tiny"
    assert meta["input_size"] == [64, 64] and meta["image_embedding_size"] == [8, 8] and meta["embed_dim"] == 16
    assert meta["mask_output_indices"] == [0, 1, 2, 3] and meta["random_seed"] == SEED
    assert meta["shape_profile"]["point_coords"] == {"min": [1, 1, 2], "opt": [1, 2, 2], "max": [1, 8, 2]}
    assert meta["input_names"] == INPUT_NAMES and meta["output_names"] == OUTPUT_NAMES


def test_decoder_export_prints_no_warning(tmp_path) -> None:
    """torch's 'axis name num_points will not be used' UserWarning reached every user's terminal; it is benign
    (the axis keeps its name, see above), so the export silences exactly that one."""
    import warnings

    from vitdeploy.pipeline import export_from_recipe

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        export_from_recipe("sam_tiny_decoder", tmp_path / "d.onnx", random_weights=True, seed=SEED)
    assert [str(w.message)[:80] for w in caught if issubclass(w.category, UserWarning)] == []
