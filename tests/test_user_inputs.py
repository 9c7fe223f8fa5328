"""Inputs as users give them: EXIF orientation, 16-bit grayscale, one box per prompt, -o paths that cannot be written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from click.testing import CliRunner
from PIL import Image

from vitdeploy.cli import cli
from vitdeploy.precision.calibration_data import read_calibration_image
from vitdeploy.runtime.processing.images import read_image_rgb

ORIENTATION = 0x0112
ROTATED_90_CW = 6  # EXIF: the stored pixels must be turned 90 degrees clockwise to be upright


def _sideways_jpeg(path):
    stored = np.zeros((20, 40, 3), np.uint8)
    stored[:, :10] = 255  # left edge of the stored (sideways) picture is white
    exif = Image.Exif()
    exif[ORIENTATION] = ROTATED_90_CW
    Image.fromarray(stored).save(path, exif=exif, quality=95)
    return path


def test_exif_orientation_is_applied_for_predict_and_calibration(tmp_path):
    path = _sideways_jpeg(tmp_path / "phone.jpg")
    picture = read_image_rgb(path)
    assert picture.shape == (40, 20, 3)  # portrait, as displayed
    assert picture[:10].mean() > 200 and picture[15:].mean() < 50  # the white edge is now on top
    calib = read_calibration_image(path, 3)
    assert not isinstance(calib, str) and calib.shape == (40, 20, 3)


def test_16_bit_grayscale_is_scaled_not_clipped_to_white(tmp_path):
    ramp = np.linspace(1000, 3000, 64 * 32).reshape(32, 64).astype(np.uint16)  # a 12-bit-ish scan
    path = tmp_path / "scan16.png"
    Image.fromarray(ramp).save(path)
    assert Image.open(path).mode.startswith("I")
    notes: list[str] = []
    picture = read_image_rgb(path, notes)
    assert picture.shape == (32, 64, 3) and picture.dtype == np.uint8
    assert picture.min() == 0 and picture.max() == 255
    np.testing.assert_array_equal(picture[..., 0], picture[..., 2])
    assert len(np.unique(picture)) > 200  # the ramp survives
    assert len(notes) == 1 and "1000..3000" in notes[0] and "8 bits" in notes[0]


def test_two_boxes_are_refused_not_silently_dropped(tmp_path):
    result = CliRunner().invoke(cli, ["predict", "-e", "e.onnx", "-d", "d.onnx", "-i", "x.png", "-o", str(tmp_path / "m.png"),
                                      "--box", "1,2,30,40", "--box", "5,6,70,80"])
    assert result.exit_code == 2
    assert "2 boxes given" in result.output and "one --box" in result.output


def test_output_paths_that_cannot_be_written_are_refused_up_front(tmp_path):
    import pytest

    from vitdeploy.errors import InputError
    from vitdeploy.fileio import check_output_path

    with pytest.raises(InputError, match="cannot create files in '/proc'"):
        check_output_path("/proc/m.onnx")
    plain = tmp_path / "a_file"
    plain.write_text("x")
    with pytest.raises(InputError, match="is a file, not a directory"):
        check_output_path(plain / "sub" / "m.onnx")
    with pytest.raises(InputError, match="does not exist"):
        check_output_path(tmp_path / "missing" / "m.onnx")
    assert check_output_path(tmp_path / "m.onnx") == tmp_path / "m.onnx"
    assert [p.name for p in tmp_path.iterdir()] == ["a_file"]  # the probe is gone


def test_an_empty_onnx_file_gets_a_clear_error_in_every_verb(tmp_path):
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    for args in (["validate", str(empty)], ["benchmark", str(empty)], ["calibrate", str(empty), "-p", "fp16", "-o", str(tmp_path / "o.onnx")]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 1, (args, result.output)
        assert "is empty (0 bytes), not an ONNX model" in result.output, (args, result.output)


def test_a_recipe_value_of_the_wrong_type_names_the_key(tmp_path):
    from importlib.resources import files

    text = files("vitdeploy._recipes").joinpath("sam_tiny.toml").read_text()
    for good, bad, words in (("depth = 4", 'depth = "four"', "architecture.depth = 'four' must be an integer"),
                             ("qkv_bias = true", "qkv_bias = 1", "architecture.qkv_bias = 1 must be true or false"),
                             ("global_attn_indexes = [1, 3]", 'global_attn_indexes = ["1"]', "must be a list of integers")):
        recipe = tmp_path / "bad.toml"
        recipe.write_text(text.replace(good, bad))
        result = CliRunner().invoke(cli, ["export", "--recipe", str(recipe), "--random-weights", "-o", str(tmp_path / "m.onnx")])
        assert result.exit_code == 1 and words in result.output, result.output
        assert "a vitdeploy bug" not in result.output and not (tmp_path / "m.onnx").exists()


def test_predict_help_does_not_promise_pytorch_threads():
    text = CliRunner().invoke(cli, ["predict", "--help"]).output
    threads = text[text.index("--threads"):].split("\n  -")[0]
    assert "ONNX Runtime" in threads and "PyTorch" not in threads


def test_an_export_removes_what_a_killed_export_left_behind(tmp_path):
    import subprocess
    import os

    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = tmp_path / f".vitdeploy-export-{gone.pid}-abc"
    stale.mkdir()
    (stale / "raw.onnx").write_bytes(b"partial")
    running = tmp_path / f".vitdeploy-export-{os.getpid()}-xyz"  # an export still running: kept
    running.mkdir()
    result = CliRunner().invoke(cli, ["export", "--recipe", "sam_tiny", "--random-weights", "-o", str(tmp_path / "t.onnx")])
    assert result.exit_code == 0, result.output
    assert not stale.exists() and running.is_dir() and (tmp_path / "t.onnx").is_file()


def test_a_missing_external_weights_file_is_named_by_validate_benchmark_and_predict(tmp_path):
    from vitdeploy.models.sam_encoder import SamEncoderArch, load_sam_image_encoder
    from vitdeploy.onnx_export.sam_encoder import export_sam_image_encoder

    arch = SamEncoderArch(img_size=64, embed_dim=32, depth=2, num_heads=2, out_chans=16, window_size=2,
                          global_attn_indexes=(1,))
    model = tmp_path / "ext.onnx"
    result = export_sam_image_encoder(load_sam_image_encoder(arch, random_seed=0), model, external_data=True)
    result.external_data.unlink()
    from vitdeploy.precision.calibration_data import bundled_calibration_dir

    image = str(sorted(bundled_calibration_dir().glob("*.jpg"))[0])
    for args in (["validate", str(model)], ["benchmark", str(model)],
                 ["predict", "-e", str(model), "-d", str(model), "-i", image, "--point", "1,1", "-o", str(tmp_path / "m.png")]):
        out = CliRunner().invoke(cli, args)
        assert out.exit_code == 1, (args, out.output)
        assert "keeps its weights in 'ext.onnx.data', which is missing" in out.output, (args, out.output)


def test_device_cuda_without_a_gpu_says_so_first_for_every_target(tmp_path):
    import onnxruntime as ort
    import pytest

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this ONNX Runtime has CUDA: the no-GPU message does not apply")
    for target in ("generic", "onnxruntime-cpu"):
        model = tmp_path / f"{target}.onnx"
        made = CliRunner().invoke(cli, ["export", "--recipe", "sam_tiny", "--random-weights", "--target", target, "-o", str(model)])
        assert made.exit_code == 0, made.output
        out = CliRunner().invoke(cli, ["validate", str(model), "--device", "cuda"])
        assert out.exit_code == 1 and "needs ONNX Runtime's CUDAExecutionProvider" in out.output, out.output
        assert "export" not in out.output.split("error:")[1]


def test_random_bytes_are_called_corrupt_and_a_pickle_with_code_is_called_that(tmp_path):
    import os

    import pytest
    import torch

    from vitdeploy.errors import CheckpointError
    from vitdeploy.models.checkpoints import load_state_dict_file

    noise = tmp_path / "noise.pth"
    noise.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    with pytest.raises(CheckpointError, match="is corrupt or not a PyTorch file") as corrupt:
        load_state_dict_file(noise)
    assert "run code" not in str(corrupt.value)
    evil = tmp_path / "evil.pth"
    torch.save({"w": torch.zeros(2), "f": os.getcwd}, evil)
    with pytest.raises(CheckpointError, match="could run code"):
        load_state_dict_file(evil)


def test_validate_refuses_a_checkpoint_for_a_random_weights_export(tmp_path):
    import torch

    model = tmp_path / "tiny.onnx"
    made = CliRunner().invoke(cli, ["export", "--recipe", "sam_tiny", "--random-weights", "-o", str(model)])
    assert made.exit_code == 0, made.output
    unrelated = tmp_path / "other.pth"
    torch.save({"w": torch.zeros(3)}, unrelated)
    out = CliRunner().invoke(cli, ["validate", str(model), "-c", str(unrelated)])
    assert out.exit_code == 1 and "exported with random weights (seed 0)" in out.output, out.output
    assert "FAIL" not in out.output and "cosine" not in out.output


def test_an_existing_output_is_refused_before_any_work_and_replaced_with_force(tmp_path):
    out = tmp_path / "t.onnx"
    out.write_bytes(b"precious")
    args = ["export", "--recipe", "sam_tiny", "--random-weights", "-o", str(out)]
    refused = CliRunner().invoke(cli, args)
    assert refused.exit_code == 1 and "already exists: pass --force" in refused.output, refused.output
    assert out.read_bytes() == b"precious" and sorted(p.name for p in tmp_path.iterdir()) == ["t.onnx"]
    report = tmp_path / "r.json"
    report.write_text("{}")
    refused = CliRunner().invoke(cli, ["doctor", "--report", str(report)])
    assert refused.exit_code == 1 and f"'{report}' already exists" in refused.output, refused.output
    replaced = CliRunner().invoke(cli, [*args, "--force"])
    assert replaced.exit_code == 0, replaced.output
    assert out.read_bytes()[:8] != b"precious" and out.stat().st_size > 1000


ERRORS_BEFORE_TORCH = [
    (["export", "-r", "sam_tiny", "--random-weights", "-o", "/proc/x.onnx"], "cannot create files in '/proc'"),
    (["export", "-r", "sam_tiny", "-c", "{tmp}/missing.pth", "-o", "{tmp}/x.onnx"], "checkpoint '{tmp}/missing.pth' not found"),
    (["export", "-r", "no_such_recipe", "--random-weights", "-o", "{tmp}/x.onnx"], "recipe 'no_such_recipe' not found"),
    (["validate", "{tmp}/missing.onnx"], "ONNX file '{tmp}/missing.onnx' not found"),
    (["benchmark", "{tmp}/missing.onnx"], "ONNX file '{tmp}/missing.onnx' not found"),
    (["calibrate", "{tmp}/missing.onnx", "-p", "fp16", "-o", "{tmp}/o.onnx"], "ONNX file '{tmp}/missing.onnx' not found"),
    (["build-engine", "{tmp}/missing.onnx", "-o", "{tmp}/x.plan"], "ONNX file '{tmp}/missing.onnx' not found"),
    (["inspect", "{tmp}/missing.onnx"], "ONNX file '{tmp}/missing.onnx' not found"),
    (["export", "-r", "sam_tiny", "-c", "{tmp}/noise.pth", "-o", "{tmp}/x.onnx"], "is corrupt or not a PyTorch file"),
    (["export", "-r", "sam_tiny", "-c", "{tmp}/empty.pth", "-o", "{tmp}/x.onnx"], "is empty (0 bytes)"),
    (["export", "-r", "sam_tiny", "-c", "{tmp}/noise.safetensors", "-o", "{tmp}/x.onnx"], "not a safetensors file"),
    (["export", "-r", "{tmp}/bad.toml", "--random-weights", "-o", "{tmp}/x.onnx"], "architecture.depth = 'four' must be an integer"),
    (["export", "-r", "sam_tiny", "--random-weights", "--input-size", "250", "-o", "{tmp}/x.onnx"],
     "--input-size 250 is not a multiple of the patch size 16: use 240 or 256"),
    (["export", "-r", "sam_tiny_decoder", "--random-weights", "--input-size", "250", "-o", "{tmp}/x.onnx"],
     "not a multiple of the encoder patch size"),
    (["export", "-r", "sam_tiny_decoder", "--random-weights", "--batch", "2", "-o", "{tmp}/x.onnx"],
     "--batch/--dynamic-batch do not apply to the mask decoder"),
    (["validate", "{tmp}/tiny.onnx", "--load-inputs", "{tmp}/missing.npz"], "input file '{tmp}/missing.npz' not found"),
    (["validate", "{tmp}/tiny.onnx", "--images", "{tmp}/no_such_photos"], "no_such_photos"),
    (["validate", "{tmp}/tiny.onnx", "-c", "{tmp}/noise.pth"], "is corrupt or not a PyTorch file"),
]


def test_errors_a_user_makes_are_answered_before_torch_is_imported(tmp_path):
    """They took 4-15 s on 2 cores (torch and friends imported first); now they answer in a fraction of a second.
    Checked by what is imported (a fact), not by a timing (a flaky one)."""
    import json
    import subprocess
    import sys

    from importlib.resources import files

    noise = np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes()
    (tmp_path / "noise.pth").write_bytes(noise)
    (tmp_path / "noise.safetensors").write_bytes(noise)
    (tmp_path / "empty.pth").write_bytes(b"")
    recipe = files("vitdeploy._recipes").joinpath("sam_tiny.toml").read_text()
    (tmp_path / "bad.toml").write_text(recipe.replace("depth = 4", 'depth = "four"'))
    made = CliRunner().invoke(cli, ["export", "-r", "sam_tiny", "--random-weights", "-o", str(tmp_path / "tiny.onnx")])
    assert made.exit_code == 0, made.output
    cases = [([a.format(tmp=tmp_path) for a in args], needle.format(tmp=tmp_path)) for args, needle in ERRORS_BEFORE_TORCH]
    code = ("import json, sys; from click.testing import CliRunner; from vitdeploy.cli import cli\n"
            "out = []\n"
            "for args, needle in json.loads(sys.argv[1]):\n"
            "    r = CliRunner().invoke(cli, args)\n"
            "    out.append([args[0], r.exit_code, needle in r.output, r.output.strip()[:200], 'torch' in sys.modules])\n"
            "print(json.dumps(out))")
    done = subprocess.run([sys.executable, "-c", code, json.dumps(cases)], capture_output=True, text=True, check=True)
    for verb, exit_code, named, first_line, torch_loaded in json.loads(done.stdout.strip().splitlines()[-1]):
        assert exit_code == 1 and named, (verb, first_line)
        assert not torch_loaded, (verb, "imported torch before answering", first_line)


def test_sam_only_export_options_are_refused_for_timm_not_dropped(tmp_path):
    """--target and --layernorm2d shape SAM graphs; on a timm recipe they are an error before any work, not ignored."""
    for option, value in (("--layernorm2d", "native"), ("--layernorm2d", "matmul"), ("--target", "tensorrt")):
        out = CliRunner().invoke(cli, ["export", "-r", "timm_deit_small_patch16_224", "--random-weights", option, value,
                                       "-o", str(tmp_path / "m.onnx")])
        assert out.exit_code == 1 and f"drop {option}" in out.output, (option, out.output)
        assert not (tmp_path / "m.onnx").exists()


def test_the_checkpoint_sniff_accepts_every_format_torch_and_safetensors_write(tmp_path):
    """The torch-free first-bytes check must not refuse a real checkpoint: zip (torch.save's default), the legacy
    pickle format, and safetensors."""
    import torch
    from safetensors.torch import save_file

    from vitdeploy.fileio import require_checkpoint_file
    from vitdeploy.models.checkpoints import load_state_dict_file

    state = {"w": torch.arange(6.0).reshape(2, 3)}
    torch.save(state, tmp_path / "zip.pth")
    torch.save(state, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    save_file(state, str(tmp_path / "s.safetensors"))
    for name in ("zip.pth", "legacy.pt", "s.safetensors"):
        require_checkpoint_file(tmp_path / name)
        torch.testing.assert_close(load_state_dict_file(tmp_path / name)["w"], state["w"])


def test_a_missing_model_file_is_named_by_every_verb_that_opens_one(tmp_path):
    """A model path with a typo is one line naming it (predict said 'unexpected FileNotFoundError ... a vitdeploy bug':
    found by scripts/runtime_check.py, run on aarch64 and x86-64 alike)."""
    image = str(Path(__file__).parents[1] / "calibration" / "images" / "calib_00_landscape.jpg")
    missing = str(tmp_path / "none.onnx")
    for args in (["predict", "-e", missing, "-d", missing, "-i", image, "--point", "1,1", "-o", str(tmp_path / "m.png")],
                 ["segment-all", "-e", missing, "-d", missing, "-i", image, "-o", str(tmp_path / "a.json")],
                 ["embed", "-e", missing, "--images", str(Path(image).parent), "--out-dir", str(tmp_path / "job")],
                 ["track", "-e", missing, "-d", missing, "-m", missing, "-a", missing, "-i", str(tmp_path),
                  "--point", "0:1:5,5", "-o", str(tmp_path / "t")],
                 ["inspect", missing], ["validate", missing], ["benchmark", missing]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 1 and "none.onnx" in result.output and "not found" in result.output, (args, result.output)
        assert "unexpected" not in result.output and "Traceback" not in result.output, (args, result.output)
    assert not any(p.name != "none.onnx" for p in tmp_path.iterdir() if p.is_file())
