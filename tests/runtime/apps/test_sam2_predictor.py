"""vitdeploy.runtime.Sam2ImagePredictor (NumPy + ONNX Runtime) against the official sam2 SAM2ImagePredictor, tiny seeded
SAM 2.1: the same calls, the same masks, scores and low-resolution logits."""

from __future__ import annotations

import urllib.request

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.sam2_tiny import PAIR_SEED, TINY_SAM2_RECIPE, sam2_tiny_pair
from tests.sam_tiny import TinySamArtifacts, sample_image
from vitdeploy.errors import InputError
from vitdeploy.validation.masks import compare_masks
from vitdeploy.parity import TOLERANCES, compare

pytest.importorskip("sam2", reason="the official sam2 package is not installed (scripts/test.sh installs it)")
pytest_plugins = ["tests.sam_tiny_fixtures"]

SEED = PAIR_SEED
FP32 = TOLERANCES["fp32"]
IMAGES = {"wide": (90, 120), "tall": (300, 200)}
PROMPTS: dict[str, dict[str, Any]] = {
    "one_click": dict(point_coords=np.array([[60.0, 40.0]]), point_labels=np.array([1])),
    "two_clicks_single": dict(point_coords=np.array([[30.0, 20.0], [80.0, 60.0]]), point_labels=np.array([1, 0]),
                              multimask_output=False),
    "box": dict(box=np.array([10.0, 8.0, 100.0, 70.0]), multimask_output=False),
    "box_click_logits": dict(box=np.array([5.0, 5.0, 90.0, 60.0]), point_coords=np.array([[40.0, 30.0]]),
                             point_labels=np.array([1]), return_logits=True),
    "normalized": dict(point_coords=np.array([[0.5, 0.25]]), point_labels=np.array([1]), normalize_coords=False),
    "two_boxes": dict(box=np.array([[10.0, 8.0, 60.0, 50.0], [40.0, 20.0, 110.0, 80.0]]), multimask_output=False),
}


def official_model(seed: int = SEED):
    import tomllib

    from vitdeploy.models.sam2 import Sam2Arch, load_sam2

    return load_sam2(Sam2Arch.from_dict(tomllib.loads(TINY_SAM2_RECIPE)["architecture"]), random_seed=seed)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return sam2_tiny_pair(tmp_path_factory)


@pytest.fixture(scope="module")
def predictors(files: tuple[Path, Path]):
    from sam2.sam2_image_predictor import SAM2ImagePredictor

    from vitdeploy.runtime.apps.sam2.image_predictor import Sam2ImagePredictor

    return SAM2ImagePredictor(official_model()), Sam2ImagePredictor(*files, threads=2, runtime="onnxruntime")


def check_same(theirs: tuple, ours: tuple, label: str, logits: bool = False) -> None:
    assert ours[0].shape == theirs[0].shape and ours[0].dtype == np.float32, (ours[0].shape, theirs[0].shape)
    if logits:
        close = compare(theirs[0], ours[0], FP32, label=f"{label}/mask logits")
        assert close, close.summary()
    else:
        agreement = compare_masks(theirs[0] > 0.5, ours[0] > 0.5, "fp32", label=f"{label}/masks")
        assert agreement, agreement.summary()
    for name, a, b in (("scores", theirs[1], ours[1]), ("low_res_logits", theirs[2], ours[2])):
        close = compare(a, b, FP32, label=f"{label}/{name}")
        assert close, close.summary()


@pytest.mark.parametrize("image", list(IMAGES))
def test_predict_matches_the_official_predictor(predictors, image: str) -> None:
    official, ours = predictors
    picture = sample_image(*IMAGES[image], seed=11)
    with torch.no_grad():
        official.set_image(picture)
    ours.set_image(picture)
    embed = compare(official.get_image_embedding().numpy(), ours.get_image_embedding(), FP32, label="image_embed")
    assert embed, embed.summary()
    for name, prompt in PROMPTS.items():
        with torch.no_grad():
            theirs = official.predict(**prompt)
        check_same(theirs, ours.predict(**prompt), f"{image}/{name}", logits=prompt.get("return_logits", False))
    # a second round with the best low-resolution mask as the mask prompt, as the official notebook does
    with torch.no_grad():
        masks, scores, low = official.predict(**PROMPTS["one_click"])
        best = low[np.argmax(scores)][None]
        theirs = official.predict(point_coords=np.array([[60.0, 40.0], [20.0, 15.0]]), point_labels=np.array([1, 0]),
                                  mask_input=best, multimask_output=False)
    check_same(theirs, ours.predict(point_coords=np.array([[60.0, 40.0], [20.0, 15.0]]), point_labels=np.array([1, 0]),
                                    mask_input=best, multimask_output=False), f"{image}/mask_prompt")


def test_predict_batch_matches(predictors) -> None:
    official, ours = predictors
    pictures = [sample_image(*IMAGES["wide"], seed=1), sample_image(*IMAGES["tall"], seed=2)]
    boxes = [np.array([10.0, 8.0, 100.0, 70.0]), np.array([20.0, 30.0, 150.0, 250.0])]
    with torch.no_grad():
        official.set_image_batch(pictures)
        theirs = official.predict_batch(box_batch=boxes, multimask_output=True)
    ours.set_image_batch(pictures)
    mine = ours.predict_batch(box_batch=boxes, multimask_output=True)
    for k in range(2):
        check_same((theirs[0][k], theirs[1][k], theirs[2][k]), (mine[0][k], mine[1][k], mine[2][k]), f"batch/{k}")


def test_wrong_files_and_calls_are_refused(files: tuple[Path, Path], tiny_sam_artifacts: TinySamArtifacts,
                                           tmp_path: Path) -> None:
    from vitdeploy.pipeline import export_from_recipe
    from vitdeploy.runtime.apps.sam2.image_predictor import Sam2ImagePredictor

    enc, dec = files
    with pytest.raises(InputError, match="SAM 1 file: use vitdeploy.runtime.SamPredictor"):
        Sam2ImagePredictor(tiny_sam_artifacts.encoder, dec, runtime="onnxruntime")
    (tmp_path / "dec.toml").write_text(TINY_SAM2_RECIPE.replace("sam2_image_encoder", "sam2_mask_decoder"))
    other = export_from_recipe(str(tmp_path / "dec.toml"), tmp_path / "other.onnx", random_weights=True, seed=SEED + 1).path
    with pytest.raises(InputError, match="two different SAM 2 models .*random_seed 3 vs 4"):
        Sam2ImagePredictor(enc, other, runtime="onnxruntime")
    predictor = Sam2ImagePredictor(enc, dec, runtime="onnxruntime")
    with pytest.raises(InputError, match="must be set with set_image"):
        predictor.predict(point_coords=np.array([[1.0, 1.0]]), point_labels=np.array([1]))
    predictor.set_image(sample_image(40, 40))
    with pytest.raises(InputError, match="point_labels must be supplied"):
        predictor.predict(point_coords=np.array([[1.0, 1.0]]))
    with pytest.raises(InputError, match="use predict_batch"):
        predictor.set_image_batch([sample_image(40, 40)])
        predictor.predict(box=np.array([1.0, 1.0, 5.0, 5.0]))


def test_predict_verb_takes_sam2_files(files: tuple[Path, Path], tmp_path: Path) -> None:
    """``vitdeploy predict`` on SAM 2 files writes the best mask Sam2ImagePredictor gives; SAM 1 embeddings are refused."""
    from PIL import Image

    from tests.cli_helpers import assert_user_error, run
    from vitdeploy.runtime.apps.sam2.image_predictor import Sam2ImagePredictor

    enc, dec = files
    picture = sample_image(90, 120, seed=21)
    Image.fromarray(picture).save(tmp_path / "photo.png")
    code, output = run("predict", "-e", str(enc), "-d", str(dec), "-i", str(tmp_path / "photo.png"), "--point", "60,40",
                       "-o", str(tmp_path / "mask.png"), "--runtime", "onnxruntime", "--threads", "1")
    assert code == 0, output
    predictor = Sam2ImagePredictor(enc, dec, runtime="onnxruntime", threads=1)
    predictor.set_image(picture)
    masks, scores, _ = predictor.predict(point_coords=np.array([[60.0, 40.0]]), point_labels=np.array([1]))
    written = np.asarray(Image.open(tmp_path / "mask.png")) > 127
    np.testing.assert_array_equal(written, masks[int(np.argmax(scores))] > 0.5)
    code, output = run("predict", "-e", str(enc), "-d", str(dec), "-i", str(tmp_path / "photo.png"), "--point", "60,40",
                       "-o", str(tmp_path / "m2.png"), "--save-embedding", str(tmp_path / "e.npz"), "--runtime", "onnxruntime")
    assert_user_error(code, output, "SAM 1 embeddings")
    assert not (tmp_path / "m2.png").exists() and not (tmp_path / "e.npz").exists()


def test_serve_answers_prompts_as_the_official_predictor(files: tuple[Path, Path], predictors) -> None:
    """``vitdeploy serve``'s service on SAM 2 files, over real HTTP on 127.0.0.1: the image is encoded once (its three
    feature arrays cached), each prompt's masks and scores are the official predictor's; the embedding route gives each
    feature array by name (for the page's in-browser decoder, which /healthz describes); too many clicks for the
    decoder get a 400."""
    from tests.runtime.apps.test_sam_service import Client, decode_rle, png_bytes
    from vitdeploy.metadata import read_onnx_metadata
    from vitdeploy.runtime.apps.serving.server import Server
    from vitdeploy.runtime.apps.serving.service import SamService

    official, _ = predictors
    picture = sample_image(*IMAGES["tall"], seed=12)
    server = Server(SamService(*files, runtime="onnxruntime", threads=1), "127.0.0.1", 0).start()
    try:
        client = Client(server.port)
        status, _, created = client("POST", "/v1/embeddings", png_bytes(picture))
        assert status == 200 and (created["height"], created["width"]) == picture.shape[:2], created
        key = created["id"]
        assert client("POST", "/v1/embeddings", png_bytes(picture))[2]["cached"] is True
        with torch.no_grad():
            official.set_image(picture)
        for name in ("one_click", "two_clicks_single", "box"):
            prompt = PROMPTS[name]
            body = {"multimask_output": prompt.get("multimask_output", True)}
            if "point_coords" in prompt:
                body.update(points=prompt["point_coords"].tolist(), labels=prompt["point_labels"].tolist())
            if "box" in prompt:
                body["box"] = prompt["box"].tolist()
            status, _, answer = client("POST", f"/v1/embeddings/{key}/masks", body)
            assert status == 200, answer
            (result,) = answer["results"]
            with torch.no_grad():
                masks, scores, _ = official.predict(**prompt)
            np.testing.assert_allclose(result["scores"], scores, atol=1e-4)
            for k, rle in enumerate(result["masks"]):
                agreement = compare_masks(masks[k] > 0.5, decode_rle(rle), "fp32", label=f"served {name}/{k}")
                assert agreement, agreement.summary()
        status, _, answer = client("GET", f"/v1/embeddings/{key}/embedding")
        assert status == 404 and "ask for one with ?feature=NAME" in answer["error"], answer
        with urllib.request.urlopen(f"{client.base}/v1/embeddings/{key}/embedding?feature=high_res_feats_0") as got:
            shape = tuple(int(d) for d in got.headers["X-Embedding-Shape"].split(","))
            feature = np.frombuffer(got.read(), "<f4").reshape(shape)
        with torch.no_grad():
            theirs = official._features["high_res_feats"][0].numpy()
        close = compare(theirs, feature, FP32, label="the served high_res_feats_0")
        assert close, close.summary()
        health = client("GET", "/healthz")[2]
        assert health["browser_decoder"]["model"] == "sam2" and health["browser_decoder"]["features"] == [
            "image_embed", "high_res_feats_0", "high_res_feats_1"], health
        assert health["variant"] == read_onnx_metadata(files[0])["variant"], health
        too_many = health["max_points"] + 1
        status, _, answer = client("POST", f"/v1/embeddings/{key}/masks",
                                   {"points": [[10, 10]] * too_many, "labels": [1] * too_many})
        assert status == 400 and f"at most {health['max_points']}" in answer["error"], answer
        assert client("GET", "/healthz")[0] == 200  # and it stays up
    finally:
        server.stop()
