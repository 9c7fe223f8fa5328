"""SAM 3's video tracker graphs (memory encoder, memory attention) against the official ``sam3`` tracker: the module
vitdeploy builds is the official builder's at full size, the one rewrite that is not SAM 2's changes no number, and
each exported graph equals the official module in FP32 (tiny seeded model, every parameter perturbed; full size in
``benchmarks/bench_sam3_tracker.py``), from seeded weights and from a checkpoint laid out as ``sam3.pt``."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import torch

from tests.cli_helpers import assert_user_error, run
from tests.family_exports import family_export
from vitdeploy.parity import TOLERANCES

pytest.importorskip("sam3", reason="the official sam3 package is not installed (scripts/test.sh installs it)")

FP32 = TOLERANCES["fp32"]
#: float32 agreement of the downsampler with its plain enlarging resize and the official antialiased one (measured
#: 5.7e-7 at 112 px, 5.0e-7 at 1008 px; the resize alone 6e-8)
RESIZE_REL_MAX = 1e-6


def tiny_arch(name: str = "sam3_tiny_memory_attention"):
    from vitdeploy.models.recipes import load_recipe
    from vitdeploy.models.sam3_tracker import Sam3TrackerArch

    return Sam3TrackerArch.from_dict(load_recipe(name).architecture)


def test_the_full_size_tracker_is_the_official_builders() -> None:
    """``build_sam3_tracker`` at the default sizes against ``sam3.model_builder.build_tracker`` (with the same named
    shim: its position encoding's precomputation, on "cuda" in the builder, left to the first call): the same
    parameters and buffers by name and shape, the same memory encoder and memory attention module by module, the same
    tracking settings."""
    import sam3.model.position_encoding as position_encoding
    from sam3.model_builder import build_tracker

    from vitdeploy.models.sam3_tracker import Sam3TrackerArch, build_sam3_tracker

    original = position_encoding.PositionEmbeddingSine.__init__

    def shim(self, *args, precompute_resolution=None, **kwargs):
        original(self, *args, precompute_resolution=None, **kwargs)

    with mock.patch.object(position_encoding.PositionEmbeddingSine, "__init__", shim):
        official = build_tracker(apply_temporal_disambiguation=False)
    ours = build_sam3_tracker(Sam3TrackerArch())
    theirs, mine = official.state_dict(), ours.state_dict()
    assert sorted(mine) == sorted(theirs)
    assert all(mine[key].shape == theirs[key].shape for key in mine)
    assert repr(ours.transformer) == repr(official.transformer)
    assert repr(ours.maskmem_backbone) == repr(official.maskmem_backbone)
    for name in ("num_maskmem", "max_obj_ptrs_in_encoder", "max_cond_frames_in_attn", "multimask_output_in_sam",
                 "multimask_min_pt_num", "multimask_max_pt_num", "multimask_output_for_tracking", "image_size",
                 "backbone_stride", "mem_dim", "hidden_dim", "memory_temporal_stride_for_eval", "use_memory_selection",
                 "sam_mask_decoder_extra_args", "sigmoid_scale_for_mem_enc", "sigmoid_bias_for_mem_enc"):
        assert getattr(ours, name) == getattr(official, name), name


@pytest.mark.parametrize("size", [112, 1008])
def test_the_plain_enlarging_resize_gives_the_official_downsamplers_numbers(size: int) -> None:
    """TensorRT-RTX parses no antialiased Resize; enlarging, antialiasing changes nothing but float32 rounding. The
    whole downsampler (resize, four convolutions, LayerNorm2d, GELU, projection) on a mask of the tiny and the full
    model's image size."""
    from vitdeploy.models.sam3_tracker import Sam3TrackerArch, load_sam3_tracker
    from vitdeploy.rewrites.sam3_tracker import EnlargingMaskDownSampler

    arch = tiny_arch() if size == 112 else Sam3TrackerArch(attention_layers=1)
    official = load_sam3_tracker(arch, random_seed=3).maskmem_backbone.mask_downsampler
    mask = 20.0 * torch.sigmoid(4.0 * torch.randn(1, 1, size, size, generator=torch.Generator().manual_seed(0))) - 10.0
    with torch.no_grad():
        want, got = official(mask), EnlargingMaskDownSampler(official)(mask)
    assert float((got - want).norm() / want.norm()) < RESIZE_REL_MAX


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The two tiny tracker files (tests/family_exports.py, shared by the run)."""
    return {part: family_export(tmp_path_factory, f"sam3_memory_{part}")[0] for part in ("encoder", "attention")}


@pytest.mark.parametrize("part", ["encoder", "attention"])
def test_each_graph_equals_the_official_tracker_in_fp32(files: dict[str, Path], part: str) -> None:
    """``vitdeploy validate`` against the official module (the references run ``_encode_new_memory`` and
    ``transformer.encoder`` themselves): every output of 6 seeded inputs (present and absent objects, sigmoid and
    clicked masks; banks with prompted and recent frames, present and absent pointers at signed distances, a masked
    slot of each kind) within FP32's budget."""
    from vitdeploy.validation.validate_model import ValidateOptions, validate_model

    report = validate_model(files[part], ValidateOptions(runtime="onnxruntime", runs=0, random_inputs=6, threads=2))
    assert report and len(report.parity) >= 6
    for result in report.parity:
        assert result.cosine >= FP32.cosine_min and result.rel_l2 <= FP32.rel_l2_max, result.label


def test_the_memory_attention_file_carries_the_tracker_settings(files: dict[str, Path]) -> None:
    """What the video runtime tracks with, as SAM 2's files record it, read from the official tracker: SAM 3's
    fixed behaviour where SAM 2 has a config flag."""
    from vitdeploy.metadata import read_onnx_metadata

    meta = read_onnx_metadata(files["attention"])
    assert meta["family"] == "sam3_memory_attention" and meta["tracker"]["num_maskmem"] == 7
    assert meta["frame_slots"] == 6 + 4 and meta["pointer_slots"] == 16
    settings = meta["tracker"]
    assert settings["max_cond_frames_in_attn"] == 4 and settings["multimask_output_for_tracking"] is True
    assert settings["binarize_mask_from_pts_for_mem_enc"] is True and settings["soft_no_obj_ptr"] is False
    assert len(settings["no_mem_embed"]) == tiny_arch().d_model


def test_a_checkpoint_laid_out_as_sam3_pt_exports_and_validates(tmp_path: Path) -> None:
    """The official ``sam3.pt`` keeps the tracker under ``tracker.`` beside the detector: a checkpoint made so (seeded
    weights, detector keys beside them) exports, and the reference rebuilt from it agrees; a checkpoint of another
    size is refused in one line, nothing written."""
    from vitdeploy.models.sam3_tracker import load_sam3_tracker

    tracker = load_sam3_tracker(tiny_arch(), random_seed=11)
    state = {f"tracker.{k}": v for k, v in tracker.state_dict().items()}
    state["detector.backbone.vision_backbone.trunk.pos_embed"] = torch.zeros(1, 4, 8)
    checkpoint = tmp_path / "sam3.pt"
    torch.save({"model": state}, checkpoint)
    out = tmp_path / "encoder.onnx"
    code, output = run("export", "-r", "sam3_tiny_memory_encoder", "--checkpoint", str(checkpoint), "-o", str(out))
    assert code == 0, output
    code, output = run("validate", str(out), "--checkpoint", str(checkpoint), "--random-inputs", "2", "--runs", "0")
    assert code == 0 and "within tolerance" in output, output

    wrong = tmp_path / "other.pt"
    torch.save({"model": {k: (v[:1] if v.ndim else v) for k, v in state.items()}}, wrong)
    refused = tmp_path / "refused.onnx"
    code, output = run("export", "-r", "sam3_tiny_memory_encoder", "--checkpoint", str(wrong), "-o", str(refused))
    assert_user_error(code, output)
    assert not refused.exists()


def test_a_sam2_recipe_key_is_refused_before_torch_builds_anything(tmp_path: Path) -> None:
    recipe = tmp_path / "bad.toml"
    recipe.write_text('[model]\nfamily = "sam3_memory_attention"\nvariant = "x"\n\n[architecture]\n'
                      'config = "configs/sam2.1/sam2.1_hiera_t.yaml"\n')
    code, output = run("export", "-r", str(recipe), "--random-weights", "-o", str(tmp_path / "x.onnx"))
    assert_user_error(code, output)
    assert "config" in output and not (tmp_path / "x.onnx").exists()


def test_the_graphs_run_the_bank_as_the_official_for_every_slot_count(files: dict[str, Path]) -> None:
    """The bank's lengths are dynamic: 1 to the recipe's frame slots and pointer slots, the graph on ONNX Runtime
    against the official memory attention on the entries in use."""
    from vitdeploy.families import FAMILIES
    from vitdeploy.metadata import read_onnx_metadata
    from vitdeploy.parity import compare
    from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner

    meta = read_onnx_metadata(files["attention"])
    family = FAMILIES["sam3_memory_attention"]
    official = family.eager_reference(meta, None)
    runner = OnnxRuntimeRunner(files["attention"], threads=2)
    for frames, pointers in ((1, 1), (2, 5), (meta["frame_slots"], meta["pointer_slots"])):
        feeds = family._banks(meta, frames, pointers, 1, seed=frames)[0].feeds
        with torch.no_grad():
            want = official(*(torch.from_numpy(feeds[n]) for n in meta["input_names"])).numpy()
        got = runner.run(feeds)["pix_feat_with_mem"]
        assert compare(want, np.asarray(got), "fp32", label=f"{frames} frames, {pointers} pointers").passed
