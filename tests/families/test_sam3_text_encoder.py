"""SAM 3's text encoder and CLIP tokenizer, torch-free at run time, proven equal to the official ``sam3`` package:
``SimpleTokenizer`` token for token, ``VETextEncoder.forward`` on the strings themselves (tiny seeded recipe)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tests.cli_helpers import assert_user_error, run
from vitdeploy.parity import TOLERANCES, compare
from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner

pytest.importorskip("sam3", reason="the official sam3 package is not installed (scripts/test.sh installs it)")

FP32 = TOLERANCES["fp32"]
SEED = 9
RECIPE = "sam3_tiny_text"
PROMPTS = ["yellow school bus", "a person", "Dog", "  red   CAR &amp; tree ", "café crème brûlée", "3 cats",
           "日本語のテキスト", "it's the dog's ball", "🙂 emoji!!", "e-mail @home #1", "word " * 40, ""]


def vocab() -> Path:
    from vitdeploy.errors import InputError
    from vitdeploy.runtime.processing.clip_tokenizer import default_vocab

    try:
        return default_vocab()
    except InputError as exc:
        pytest.skip(f"CLIP's vocabulary is not installed ({exc}; scripts/test.sh installs open_clip_torch)")


def official(seed: int = SEED, tokenizer=None):
    import tomllib

    from vitdeploy.models.recipes import RECIPE_DIR
    from vitdeploy.models.sam3_text_encoder import Sam3TextArch, load_sam3_text

    arch = Sam3TextArch.from_dict(tomllib.loads((RECIPE_DIR / f"{RECIPE}.toml").read_text())["architecture"])
    model = load_sam3_text(arch, random_seed=seed)
    model.tokenizer = tokenizer
    return model


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sam3_text") / "text.onnx"
    code, output = run("export", "-r", RECIPE, "--random-weights", "--seed", str(SEED), "--dynamic-batch", "-o", str(out))
    assert code == 0, output
    return out


def test_the_tokenizer_is_the_official_one_token_for_token() -> None:
    """Cleaning (ftfy, HTML entities, whitespace, case), CLIP's pattern, byte-level BPE, framing, the cut at 32."""
    from sam3.model.tokenizer_ve import SimpleTokenizer

    from vitdeploy.runtime.processing.clip_tokenizer import ClipTokenizer

    path = vocab()
    want = SimpleTokenizer(bpe_path=str(path))(PROMPTS, context_length=32).numpy()
    ours = ClipTokenizer(path)
    np.testing.assert_array_equal(ours(PROMPTS), want)
    assert ours.count("word " * 40) == 42 and ours.count("") == 2  # what a caller refuses before the cut


def test_text_features_are_the_official_encoders_on_the_strings(exported: Path) -> None:
    """The official ``VETextEncoder.forward(strings)`` (its own tokenizer) against ClipTokenizer + the exported graph on
    ONNX Runtime, several prompts in one batch (a dynamic batch): both outputs, fp32 budget; the padding mask is
    ``tokens == 0`` as the official ``text_attention_mask``."""
    from sam3.model.tokenizer_ve import SimpleTokenizer

    from vitdeploy.runtime.processing.clip_tokenizer import ClipTokenizer

    path = vocab()
    model = official(tokenizer=SimpleTokenizer(bpe_path=str(path)))
    texts = PROMPTS[:4] + [PROMPTS[-2]]
    with torch.no_grad():
        mask, memory, embeds = model(texts, device=torch.device("cpu"))
    tokens = ClipTokenizer(path)(texts)
    runner = OnnxRuntimeRunner(exported, threads=2)
    got = runner.run({"tokens": tokens})
    np.testing.assert_array_equal(tokens == 0, mask.numpy())
    for name, reference in (("text_memory", memory.transpose(0, 1)), ("text_embeds", embeds.transpose(0, 1))):
        result = compare(reference.numpy(), got[name], FP32, label=name)
        assert result, result.summary()
    assert got["text_memory"].shape == (5, 32, 16)


def test_an_official_checkpoint_loads_and_a_wrong_one_is_refused(exported: Path, tmp_path: Path) -> None:
    state = {f"detector.backbone.language_backbone.{k}": v for k, v in official().state_dict().items()}
    state["detector.backbone.vision_backbone.trunk.pos_embed"] = torch.zeros(1, 17, 32)  # the rest is ignored
    torch.save({"model": state}, tmp_path / "sam3.pt")
    out = tmp_path / "from_checkpoint.onnx"
    code, output = run("export", "-r", RECIPE, "--checkpoint", str(tmp_path / "sam3.pt"), "--dynamic-batch", "-o", str(out))
    assert code == 0, output
    tokens = np.array([[49406, 320, 1125, 49407] + [0] * 28], np.int64)
    a = OnnxRuntimeRunner(exported, threads=1).run({"tokens": tokens})
    b = OnnxRuntimeRunner(out, threads=1).run({"tokens": tokens})
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
    del state["detector.backbone.language_backbone.resizer.bias"]
    torch.save({"model": state}, tmp_path / "other.pt")
    code, output = run("export", "-r", RECIPE, "--checkpoint", str(tmp_path / "other.pt"), "-o", str(tmp_path / "o.onnx"))
    assert_user_error(code, output, "does not fit", "resizer.bias")
    assert not (tmp_path / "o.onnx").exists()


def test_a_bad_vocabulary_and_a_text_encoder_with_images_are_refused(exported: Path, tmp_path: Path) -> None:
    from vitdeploy.errors import InputError
    from vitdeploy.runtime.processing.clip_tokenizer import ClipTokenizer

    (tmp_path / "vocab.txt.gz").write_bytes(b"not gzip")
    with pytest.raises(InputError, match="not CLIP's vocabulary"):
        ClipTokenizer(tmp_path / "vocab.txt.gz")
    code, output = run("validate", str(exported), "--images", "calibration/images/calib_00_landscape.jpg", "--runs", "0")
    assert_user_error(code, output, "token ids", "drop --images")
