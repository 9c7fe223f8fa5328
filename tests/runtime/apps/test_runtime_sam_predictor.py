"""vitdeploy.runtime.SamPredictor (ONNX Runtime, NumPy only) vs the official segment_anything.SamPredictor."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.sam_tiny import SEED, TinySamArtifacts, sample_image, tiny_official_sam
from vitdeploy.errors import InputError
from vitdeploy.runtime import SamPredictor
from vitdeploy.runtime.backends.base import Runner
from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner
from vitdeploy.validation.masks import compare_masks
from vitdeploy.parity import TOLERANCES, compare

FP32 = TOLERANCES["fp32"]  # relative L2 <= 1e-4 among others

PROMPTS: dict[str, dict[str, Any]] = {
    "points": dict(point_coords=np.array([[12.0, 20.0], [60.0, 33.0]]), point_labels=np.array([1, 0])),
    "one_point": dict(point_coords=np.array([[30.0, 25.0]]), point_labels=np.array([1])),
    "box": dict(box=np.array([6.0, 5.0, 70.0, 40.0])),
    "points_box": dict(point_coords=np.array([[40.0, 22.0], [10.0, 40.0]]), point_labels=np.array([1, 0]),
                       box=np.array([3.0, 2.0, 66.0, 44.0])),
}
IMAGES = {"wide_upscaled": (48, 80), "tall_downscaled": (90, 70)}

pytest_plugins = ["tests.sam_tiny_fixtures"]  # the session fixture tiny_sam_artifacts, shared by every file


@pytest.fixture(scope="module")
def predictors(tiny_sam_artifacts: TinySamArtifacts):
    from segment_anything import SamPredictor as OfficialPredictor

    ours = SamPredictor(tiny_sam_artifacts.encoder, tiny_sam_artifacts.decoder, threads=2, runtime="onnxruntime")
    return OfficialPredictor(tiny_official_sam(SEED)), ours


def _check_same(ref: tuple, out: tuple, label: str) -> None:
    masks = compare_masks(ref[0], out[0], "fp32", label=f"{label}/masks")
    assert masks, masks.summary()
    for name, r, o in (("low_res_logits", ref[2], out[2]), ("scores", ref[1], out[1])):
        result = compare(r, o, FP32, label=f"{label}/{name}")
        assert result, result.summary()
    assert out[0].dtype == np.bool_ and out[0].shape == ref[0].shape


@pytest.mark.parametrize("image", list(IMAGES))
@pytest.mark.parametrize("prompt", list(PROMPTS))
@pytest.mark.parametrize("multimask", [True, False])
def test_masks_match_official_predictor(predictors, image: str, prompt: str, multimask: bool) -> None:
    official, ours = predictors
    picture = sample_image(*IMAGES[image], seed=3)
    official.set_image(picture)
    ours.set_image(picture)
    ref = official.predict(multimask_output=multimask, **PROMPTS[prompt])
    out = ours.predict(multimask_output=multimask, **PROMPTS[prompt])
    assert out[0].shape == (3 if multimask else 1, *IMAGES[image])
    _check_same(ref, out, f"{image}/{prompt}/multimask={multimask}")
    # Masks with structure, not all-on or all-off: the comparison could not pass by accident.
    assert 0.01 < float(ref[0].mean()) < 0.99


def test_mask_prompt_iteration_logits_and_bgr_match_official(predictors) -> None:
    official, ours = predictors
    picture = sample_image(48, 80, seed=4)
    official.set_image(picture[..., ::-1].copy(), image_format="BGR")
    ours.set_image(picture[..., ::-1].copy(), image_format="BGR")
    emb = compare(official.get_image_embedding(), ours.get_image_embedding(), FP32, label="embedding")
    assert emb, emb.summary()
    first = official.predict(multimask_output=True, **PROMPTS["points"])
    best = first[2][int(np.argmax(first[1]))][None]
    ref = official.predict(mask_input=best, multimask_output=False, return_logits=True, **PROMPTS["points"])
    out = ours.predict(mask_input=best, multimask_output=False, return_logits=True, **PROMPTS["points"])
    assert out[0].dtype == np.float32
    upscaled = compare(ref[0], out[0], FP32, label="upscaled logits")
    assert upscaled, upscaled.summary()
    _check_same((ref[0] > 0, ref[1], ref[2]), (out[0] > 0, out[1], out[2]), "mask prompt")


def test_reset_image_and_predict_before_set_image(tiny_sam_artifacts: TinySamArtifacts) -> None:
    predictor = SamPredictor(tiny_sam_artifacts.encoder, tiny_sam_artifacts.decoder, threads=1, runtime="onnxruntime")
    with pytest.raises(InputError, match="call set_image"):
        predictor.predict(**PROMPTS["box"])
    with pytest.raises(InputError, match="call set_image"):
        predictor.get_image_embedding()
    predictor.set_image(sample_image(20, 30))
    assert predictor.is_image_set and predictor.get_image_embedding().shape == (1, 16, 8, 8)
    predictor.reset_image()
    with pytest.raises(InputError, match="call set_image"):
        predictor.predict(**PROMPTS["box"])


@pytest.mark.parametrize("image,match", [
    (np.zeros((20, 30, 3), dtype=np.float32), "uint8"),
    (np.zeros((20, 30), dtype=np.uint8), "HxWx3"),
    (np.zeros((20, 30, 4), dtype=np.uint8), "HxWx3"),
    ([[1, 2, 3]], "HxWx3"),
    (np.zeros((0, 30, 3), dtype=np.uint8), "empty"),
])
def test_bad_images_are_refused(predictors, image, match: str) -> None:
    _, ours = predictors
    with pytest.raises(InputError, match=match):
        ours.set_image(image)
    with pytest.raises(InputError, match="RGB' or 'BGR"):
        ours.set_image(sample_image(8, 8), image_format="HSV")


@pytest.mark.parametrize("kwargs,match", [
    (dict(point_coords=np.array([[81.0, 10.0]]), point_labels=np.array([1])), r"point \(81, 10\) is outside the 80x48 image"),
    (dict(point_coords=np.array([[-1.0, 10.0]]), point_labels=np.array([1])), "outside the 80x48 image"),
    (dict(box=np.array([0.0, 0.0, 90.0, 40.0])), "box corner .* outside"),
    (dict(box=np.array([50.0, 0.0, 10.0, 40.0])), "x0 <= x1"),
    (dict(box=np.array([1.0, 2.0, 3.0])), "4 numbers"),
    (dict(point_coords=np.array([[1.0, 2.0]])), "without point_labels"),
    (dict(point_labels=np.array([1])), "without point_coords"),
    (dict(point_coords=np.array([[1.0, 2.0]]), point_labels=np.array([2])), "1 .foreground. or 0"),
    (dict(point_coords=np.array([[1.0, 2.0]]), point_labels=np.array([1, 0])), "2 labels for 1 points"),
    (dict(point_coords=np.array([1.0, 2.0]), point_labels=np.array([1])), r"\(N, 2\)"),
    (dict(point_coords=np.array([[np.nan, 2.0]]), point_labels=np.array([1])), "NaN"),
    (dict(), "no prompt"),
    (dict(box=np.array([1.0, 2.0, 3.0, 4.0]), mask_input=np.zeros((1, 16, 16))), r"shape \(1, 32, 32\)"),
])
def test_bad_prompts_are_refused(predictors, kwargs: dict, match: str) -> None:
    _, ours = predictors
    ours.set_image(sample_image(48, 80))
    with pytest.raises(InputError, match=match):
        ours.predict(**kwargs)


class _Relabelled(Runner):
    """A Runner that reports other metadata (an artifact of another variant/seed), running the same file."""

    def __init__(self, inner: OnnxRuntimeRunner, **changes: Any):
        self.inner, self.name, self.backend, self.warnings = inner, inner.name, inner.backend, []
        self.input_names, self.output_names = inner.input_names, inner.output_names
        self.metadata = {**inner.metadata, **changes}

    def input_metadata(self):
        return self.inner.input_metadata()

    def output_metadata(self):
        return self.inner.output_metadata()

    def _run(self, feeds):
        return self.inner.run(feeds)


@pytest.mark.parametrize("side,changes,match", [
    ("decoder", {"variant": "vit_b"}, "variant tiny vs vit_b"),
    ("decoder", {"input_size": [1024, 1024]}, r"input size \[64, 64\] vs \[1024, 1024\]"),
    ("decoder", {"embed_dim": 256}, "embedding channels 16 vs 256"),
    ("decoder", {"random_seed": SEED + 1}, f"random seed {SEED} vs {SEED + 1}"),
    ("decoder", {"random_weights": False, "checkpoint": "sam.pth"}, "random weights in one"),
    ("encoder", {"family": "timm_vit"}, "not a SAM image encoder"),
    ("decoder", {"family": "sam_image_encoder"}, "not a SAM mask decoder"),
])
def test_mismatched_artifacts_are_refused(tiny_sam_artifacts: TinySamArtifacts, side: str, changes: dict, match: str) -> None:
    enc = OnnxRuntimeRunner(tiny_sam_artifacts.encoder, threads=1)
    dec = OnnxRuntimeRunner(tiny_sam_artifacts.decoder, threads=1)
    if side == "decoder":
        dec = _Relabelled(dec, **changes)
    else:
        enc = _Relabelled(enc, **changes)
    with pytest.raises(InputError, match=match):
        SamPredictor(enc, dec)


def test_weight_check_can_be_turned_off_and_trimmed_decoders_say_what_they_lack(tiny_sam_artifacts: TinySamArtifacts) -> None:
    enc = OnnxRuntimeRunner(tiny_sam_artifacts.encoder, threads=1)
    dec = _Relabelled(OnnxRuntimeRunner(tiny_sam_artifacts.decoder, threads=1), random_seed=99, mask_output_indices=[0])
    predictor = SamPredictor(enc, dec, check_weights=False)
    predictor.set_image(sample_image(48, 80))
    with pytest.raises(InputError, match="without the multimask outputs"):
        predictor.predict(multimask_output=True, **PROMPTS["box"])


NO_TORCH_SCRIPT = """
import sys
for name in ("torch", "torchvision", "segment_anything", "timm"):
    sys.modules[name] = None  # any import of them now raises ImportError
import json
import numpy as np
from vitdeploy.runtime import SamPredictor
enc, dec, image, out = sys.argv[1:5]
predictor = SamPredictor(enc, dec, threads=1, runtime="onnxruntime")
predictor.set_image(np.load(image))
masks, scores, low = predictor.predict(point_coords=np.array([[12.0, 20.0], [60.0, 33.0]]), point_labels=np.array([1, 0]))
np.savez(out, masks=masks, scores=scores, low=low)
loaded = sorted(n for n, m in sys.modules.items() if m is not None and n.split(".")[0] in ("torch", "torchvision"))
print(json.dumps({"torch_modules": loaded}))
"""


def test_runtime_runs_where_torch_cannot_be_imported(tiny_sam_artifacts: TinySamArtifacts, predictors, tmp_path: Path) -> None:
    official, _ = predictors
    picture = sample_image(48, 80, seed=3)
    np.save(tmp_path / "image.npy", picture)
    proc = subprocess.run(
        [sys.executable, "-c", NO_TORCH_SCRIPT, str(tiny_sam_artifacts.encoder), str(tiny_sam_artifacts.decoder),
         str(tmp_path / "image.npy"), str(tmp_path / "out.npz")],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"torch_modules": []}
    got = np.load(tmp_path / "out.npz")
    official.set_image(picture)
    ref = official.predict(**PROMPTS["points"])
    _check_same(ref, (got["masks"], got["scores"], got["low"]), "no-torch subprocess")


def test_postprocess_matches_official_postprocess_masks() -> None:
    """MaskUpscaler == Sam.postprocess_masks (F.interpolate, crop, F.interpolate) for up- and down-scaling."""
    from vitdeploy.runtime.processing.postprocess import MaskUpscaler, bilinear_matrix
    from vitdeploy.runtime.processing.preprocess import preprocess_shape

    sam = tiny_official_sam()
    gen = torch.Generator().manual_seed(0)
    for original in [(48, 80), (90, 70), (64, 64), (7, 200), (300, 41)]:
        low = torch.randn(1, 3, 32, 32, generator=gen)
        resized = preprocess_shape(*original, 64)
        with torch.no_grad():
            ref = sam.postprocess_masks(low, resized, original)[0].numpy()
        out = MaskUpscaler.for_image((32, 32), 64, original)(low[0].numpy())
        result = compare(ref, out, FP32, label=f"upscale to {original}")
        assert result, result.summary()
    for n_in, n_out in [(5, 7), (7, 5), (256, 1024), (1024, 300), (1, 9), (9, 1)]:
        x = torch.randn(1, 1, n_in, 2, generator=gen)
        ref = torch.nn.functional.interpolate(x, (n_out, 2), mode="bilinear", align_corners=False)[0, 0].numpy()
        assert np.abs(bilinear_matrix(n_in, n_out) @ x[0, 0].numpy() - ref).max() < 1e-5


def test_set_image_embedding_from_elsewhere(predictors) -> None:
    """An embedding computed elsewhere (here: by the official encoder) gives the official masks."""
    official, ours = predictors
    official.set_image(sample_image(90, 70, seed=5))
    ours.set_image_embedding(official.get_image_embedding().numpy(), (90, 70))
    _check_same(official.predict(**PROMPTS["points_box"]), ours.predict(**PROMPTS["points_box"]), "set_image_embedding")
    with pytest.raises(InputError, match=r"uses \(1, 16, 8, 8\)"):
        ours.set_image_embedding(np.zeros((1, 16, 4, 4), dtype=np.float32), (90, 70))
    with pytest.raises(InputError, match="positive"):
        ours.set_image_embedding(np.zeros((1, 16, 8, 8), dtype=np.float32), (0, 70))
