"""``vitdeploy export`` / ``validate`` end to end, and every bad input: one line, exit 1, nothing left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from tests.cli_helpers import assert_user_error, run
from vitdeploy.cli import cli


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("cli")
    recipe = root / "tiny.toml"
    from tests.conftest import TINY_RECIPE

    recipe.write_text(TINY_RECIPE)
    out = root / "tiny.onnx"
    code, output = run("export", "-r", str(recipe), "--random-weights", "--seed", "7", "-o", str(out),
                       "--report", str(root / "export.json"))
    assert code == 0, output
    assert "RANDOM WEIGHTS" in output
    return recipe, out


def test_export_report_and_validate_pass(exported: tuple[Path, Path], tmp_path: Path) -> None:
    recipe, model = exported
    report = json.loads((model.parent / "export.json").read_text())
    assert report["hygiene"]["clean"] and report["hygiene"]["op_counts"]["Softmax"] == 3
    images = tmp_path / "imgs"
    images.mkdir()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (40, 70, 3), dtype=np.uint8)).save(images / "a.png")
    code, output = run("validate", str(model), "--images", str(images), "--runs", "2", "--report", str(tmp_path / "v.json"))
    assert code == 0, output
    data = json.loads((tmp_path / "v.json").read_text())
    assert data["passed"] and len(data["parity"]) == 3  # two random inputs and one image
    assert all(p["cosine"] >= 0.99999 and p["rel_l2"] <= 1e-4 for p in data["parity"])
    assert [lat["label"] for lat in data["latency"]] == ["torch-eager-cpu", "onnxruntime-cpu"]
    # No --threads: every core this process may use (2 on CI; the test ran on 16 on the GPU machine).
    assert data["environment"]["threads"] == len(os.sched_getaffinity(0)) and "torch" in data["environment"]["versions"]


def test_validate_fails_with_exit_1_when_parity_fails(exported: tuple[Path, Path], tmp_path: Path) -> None:
    """A model whose metadata claims other weights than it holds must fail, not pass quietly."""
    _, model = exported
    proto = onnx.load(str(model))
    for prop in proto.metadata_props:
        if prop.key == "vitdeploy.random_seed":
            prop.value = "8"
    lying = tmp_path / "lying.onnx"
    onnx.save(proto, str(lying))
    code, output = run("validate", str(lying), "--runs", "0")
    assert_user_error(code, output, "exceed the 'fp32' tolerances")
    assert "FAIL" in output


def test_checkpoint_export_needs_the_same_checkpoint_to_validate(tiny_recipe: Path, tiny_checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "ck.onnx"
    code, output = run("export", "-r", str(tiny_recipe), "-c", str(tiny_checkpoint), "-o", str(out))
    assert code == 0, output
    assert "RANDOM" not in output
    assert_user_error(*run("validate", str(out), "--runs", "0"), "pass it with --checkpoint")
    other = tmp_path / "other.pth"
    state = torch.load(tiny_checkpoint, weights_only=True)
    state["image_encoder.pos_embed"] = state["image_encoder.pos_embed"] + 1
    torch.save(state, other)
    assert_user_error(*run("validate", str(out), "-c", str(other), "--runs", "0"), "not the one this model was exported from")
    code, output = run("validate", str(out), "-c", str(tiny_checkpoint), "--runs", "0")
    assert code == 0, output


def _corrupt(tmp_path: Path, ckpt: Path) -> Path:
    path = tmp_path / "corrupt.pth"
    path.write_bytes(ckpt.read_bytes()[:300])
    return path


class _Evil:
    def __reduce__(self):
        return (print, ("pwned",))


def _evil(tmp_path: Path, _: Path) -> Path:
    path = tmp_path / "evil.pth"
    torch.save({"x": _Evil()}, path)
    return path


@pytest.mark.parametrize(
    ("make_checkpoint", "needle"),
    [
        (lambda tmp, ck: tmp / "missing.pth", "not found"),
        (_corrupt, "corrupt"),
        (_evil, "could run code"),
    ],
    ids=["missing", "corrupt", "pickle"],
)
def test_bad_checkpoints(tiny_recipe: Path, tiny_checkpoint: Path, tmp_path: Path, make_checkpoint, needle: str) -> None:
    ckpt = make_checkpoint(tmp_path, tiny_checkpoint)
    out = tmp_path / "o.onnx"
    code, output = run("export", "-r", str(tiny_recipe), "-c", str(ckpt), "-o", str(out))
    assert_user_error(code, output, needle)
    assert "pwned" not in output
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_checkpoint_of_another_variant(tiny_checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "o.onnx"
    code, output = run("export", "-r", "sam_vit_b", "-c", str(tiny_checkpoint), "-o", str(out))
    assert_user_error(code, output, "does not fit recipe 'sam_vit_b'", "embed_dim 32", "--recipe")
    assert not out.exists()


def test_input_size_not_multiple_of_patch(tiny_recipe: Path, tmp_path: Path) -> None:
    out = tmp_path / "o.onnx"
    code, output = run("export", "-r", str(tiny_recipe), "--random-weights", "--input-size", "50", "-o", str(out))
    assert_user_error(code, output, "not a multiple of the patch size 8", "use 48 or 56")
    assert not out.exists()


def test_output_in_missing_directory(tiny_recipe: Path, tmp_path: Path) -> None:
    out = tmp_path / "no" / "such" / "dir" / "o.onnx"
    assert_user_error(*run("export", "-r", str(tiny_recipe), "--random-weights", "-o", str(out)), "does not exist")
    assert not (tmp_path / "no").exists()


def test_weights_must_be_chosen(tiny_recipe: Path, tmp_path: Path) -> None:
    assert_user_error(*run("export", "-r", str(tiny_recipe), "-o", str(tmp_path / "o.onnx")), "--random-weights")


def test_unreadable_image_and_missing_model(exported: tuple[Path, Path], tmp_path: Path) -> None:
    _, model = exported
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not a png at all")
    assert_user_error(*run("validate", str(model), "--images", str(bad), "--runs", "0"), "cannot be decoded")
    assert_user_error(*run("validate", str(tmp_path / "none.onnx")), "not found")


def test_verbose_shows_the_traceback(tiny_recipe: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["export", "-r", str(tiny_recipe), "-c", str(tmp_path / "x.pth"),
                                      "-o", str(tmp_path / "o.onnx"), "--verbose"])
    assert result.exit_code == 1
    assert "Traceback" in result.output and "CheckpointError" in result.output


def test_usage_error_is_exit_2() -> None:
    assert run("export", "--input-size", "abc", "-o", "x.onnx")[0] == 2


def test_python_dash_m_entry_point() -> None:
    proc = subprocess.run([sys.executable, "-m", "vitdeploy", "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "export" in proc.stdout and "validate" in proc.stdout


def test_old_option_name_still_works_and_must_agree(tiny_recipe: Path, tmp_path: Path) -> None:
    """``--image-size`` was the option's name: it still sets the input size (with a note), and a second,
    different ``--input-size`` beside it is refused before anything is exported."""
    out = tmp_path / "old.onnx"
    code, output = run("export", "-r", str(tiny_recipe), "--random-weights", "--image-size", "48", "-o", str(out))
    assert code == 0, output
    assert "--image-size is now called --input-size" in output
    assert onnx.load(str(out)).graph.input[0].type.tensor_type.shape.dim[-1].dim_value == 48
    code, output = run("export", "-r", str(tiny_recipe), "--random-weights", "--image-size", "48", "--input-size", "56",
                       "-o", str(tmp_path / "both.onnx"))
    assert code == 1 and "--input-size 56 and --image-size 48 disagree" in output
    assert not (tmp_path / "both.onnx").exists()


def test_several_recipes_in_one_run_read_the_checkpoint_once_and_write_what_separate_runs_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``-r A -o a -r B -o b -c sam.pth``: both parts of one official SAM checkpoint, the file read once, the second part's
    file byte for byte what its own run writes; the report lists both."""
    from tests.sam_tiny import DECODER_RECIPE, ENCODER_RECIPE, tiny_official_sam
    from vitdeploy.models import checkpoints

    (tmp_path / "enc.toml").write_text(ENCODER_RECIPE)
    (tmp_path / "dec.toml").write_text(DECODER_RECIPE)
    torch.save(tiny_official_sam(seed=4).state_dict(), tmp_path / "sam.pth")
    source = ["-c", str(tmp_path / "sam.pth")]
    code, output = run("export", "-r", str(tmp_path / "dec.toml"), *source, "-o", str(tmp_path / "dec1.onnx"))
    assert code == 0, output
    reads = []
    real_read = checkpoints._read
    monkeypatch.setattr(checkpoints, "_read", lambda path: reads.append(path) or real_read(path))
    code, output = run("export", "-r", str(tmp_path / "enc.toml"), "-o", str(tmp_path / "enc2.onnx"),
                       "-r", str(tmp_path / "dec.toml"), "-o", str(tmp_path / "dec2.onnx"), *source,
                       "--report", str(tmp_path / "both.json"))
    assert code == 0, output
    assert len(reads) == 1, reads
    # the decoder is the part filled from the dict read for the encoder: byte for byte its own run's file
    assert (tmp_path / "dec2.onnx").read_bytes() == (tmp_path / "dec1.onnx").read_bytes()
    report = json.loads((tmp_path / "both.json").read_text())
    assert [Path(e["path"]).name for e in report["exports"]] == ["enc2.onnx", "dec2.onnx"]


def test_several_recipes_are_all_or_nothing(tmp_path: Path, tiny_recipe: Path, tiny_checkpoint: Path) -> None:
    """A count that does not pair, or one output twice, is refused before any work; a later part that fails (here a
    ViT-B decoder the tiny checkpoint cannot fill) takes the files the earlier parts wrote with it."""
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    assert_user_error(*run("export", "-r", str(tiny_recipe), "-r", "sam_vit_b_decoder", "-o", str(a), "--random-weights"),
                      "2 recipe(s) and 1 output(s)", "one -o per -r")
    assert_user_error(*run("export", "-r", str(tiny_recipe), "-o", str(a), "-r", str(tiny_recipe), "-o", str(a),
                           "--random-weights"), "the same -o file")
    code, output = run("export", "-r", str(tiny_recipe), "-o", str(a), "-r", "sam_vit_b_decoder", "-o", str(b),
                       "-c", str(tiny_checkpoint))
    assert code == 1 and "wrote" not in output, output
    assert sorted(p.name for p in tmp_path.iterdir()) == [tiny_checkpoint.name, tiny_recipe.name], output
