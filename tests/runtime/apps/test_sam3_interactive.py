"""SAM 3's clicks and boxes end to end, torch-free, against the official ``sam3`` package: the official example's
calls (``Sam3Processor.set_image`` then ``Sam3Image.predict_inst``/``predict_inst_batch``) on the official
``Sam3Image`` with its ``SAM3InteractiveImagePredictor``, and the SAM 2-style predictor
(``SAM3InteractiveImagePredictor.set_image``/``predict``) -- tiny seeded models (``sam3_tiny``, ``sam3_tiny_detector``,
``sam3_tiny_text``, ``sam3_tiny_interactive``), the bundled images, clicks, boxes, a mask prompt and a batch.

Two named reference-side shims, neither changing a value: the official predictor's feature sizes are the full model's
(``_bb_feat_sizes`` = 288/144/72, hard-coded) and are set to the tiny model's; its small-hole clean-up
(``max_hole_area=256``) labels connected components with scikit-image on a CPU, not installed here (the official
then skips the step with a warning), so SciPy's 8-connected ``ndimage.label`` stands in for ``skimage.measure.label``
(8-connected by default in 2-D) -- the clean-up's own arithmetic (which regions, which value) stays the official's.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.sam3_fixtures import SEED, sam3_tiny_files, sam3_tiny_interactive_file
from vitdeploy.errors import InputError

pytest.importorskip("sam3", reason="the official sam3 package is not installed (scripts/test.sh installs it)")
pytest.importorskip("scipy", reason="the masks' small-hole clean-up needs SciPy (the sam3 extra)")

#: Masks: IoU at the original size; scores: absolute; low-resolution logits: cosine.
MASK_IOU_MIN, SCORE_ATOL, LOGITS_COSINE_MIN = 0.99, 1e-4, 0.9999
IMAGES = ("calib_00_landscape.jpg", "calib_06_shapes.jpg")
TINY_FEATURE_SIZES = [(32, 32), (16, 16), (8, 8)]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, Path]:
    return (*sam3_tiny_files(tmp_path_factory), sam3_tiny_interactive_file(tmp_path_factory))


@contextmanager
def scipy_connected_components():
    """The shim for the official clean-up's connected components on a CPU (see the module docstring)."""
    from scipy import ndimage
    from sam3.perflib import connected_components as official_cc

    def single(values: torch.Tensor):
        labels, count = ndimage.label(values.cpu().numpy(), structure=np.ones((3, 3), bool))
        areas = np.bincount(labels.ravel())[labels] * (labels > 0)
        return torch.from_numpy(labels), torch.from_numpy(areas)

    kept = official_cc.connected_components_cpu_single
    official_cc.connected_components_cpu_single = single
    try:
        yield
    finally:
        official_cc.connected_components_cpu_single = kept


@pytest.fixture(scope="module")
def official():
    """The official ``Sam3Image`` with ``inst_interactive_predictor`` (the tracker's SAM heads) and its
    ``Sam3Processor``, with the exports' weights."""
    from sam3.model.sam1_task_predictor import SAM3InteractiveImagePredictor
    from sam3.model.sam3_image_processor import Sam3Processor as OfficialProcessor

    from vitdeploy.models.recipes import load_recipe
    from vitdeploy.models.sam3_vision_encoder import Sam3VisionArch, load_sam3_vision_parts
    from vitdeploy.models.sam3_detector import Sam3DetectorArch, load_sam3_detector

    parts = load_sam3_vision_parts(Sam3VisionArch.from_dict(load_recipe("sam3_tiny").architecture), random_seed=SEED)
    model = load_sam3_detector(Sam3DetectorArch.from_dict(load_recipe("sam3_tiny_detector").architecture),
                               random_seed=SEED)
    model.backbone = parts.backbone
    model.inst_interactive_predictor = SAM3InteractiveImagePredictor(parts.heads).eval()
    model.inst_interactive_predictor._bb_feat_sizes = TINY_FEATURE_SIZES  # the shim: the tiny model's sizes
    return OfficialProcessor(model.eval(), resolution=112, device="cpu")


def ours(files):
    from vitdeploy.runtime.apps.sam3.processor import Sam3ImageModel, Sam3Processor

    vision, text, detector, interactive = files
    return Sam3Processor(Sam3ImageModel(vision, text, detector, interactive=interactive, runtime="onnxruntime"))


def image(name: str) -> np.ndarray:
    from vitdeploy.precision.calibration_data import bundled_calibration_dir
    from vitdeploy.runtime.processing.images import read_image_rgb

    return read_image_rgb(bundled_calibration_dir() / name)


def as_tensor(picture: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(picture).permute(2, 0, 1).contiguous()


def prompts(picture: np.ndarray) -> dict[str, dict]:
    """The official example's prompts, placed in the image: one click, a click and a background click, a box, a box
    and a click, three boxes at once (a batch of prompt sets)."""
    h, w = picture.shape[:2]
    click, other = np.array([[0.45 * w, 0.55 * h]]), np.array([[0.7 * w, 0.3 * h]])
    box = np.array([0.2 * w, 0.25 * h, 0.7 * w, 0.8 * h])
    return {
        "one click, multimask": dict(point_coords=click, point_labels=np.array([1]), multimask_output=True),
        "two clicks, single mask": dict(point_coords=np.concatenate([click, other]), point_labels=np.array([1, 0]),
                                        multimask_output=False),
        "a box": dict(box=box[None], multimask_output=False),
        "a box and a click": dict(point_coords=click, point_labels=np.array([0]), box=box, multimask_output=False),
        "three boxes": dict(box=np.stack([box, box * 0.5, box * 0.8]), multimask_output=False),
        "logits": dict(point_coords=click, point_labels=np.array([1]), multimask_output=True, return_logits=True),
    }


def iou(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(bool), b.astype(bool)
    union = (a | b).sum()
    return float((a & b).sum() / union) if union else 1.0


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def assert_same(want, got, logits: bool = False) -> None:
    (wm, ws, wl), (gm, gs, gl) = want, got
    assert gm.shape == wm.shape and gs.shape == ws.shape and gl.shape == wl.shape
    np.testing.assert_allclose(gs, ws, atol=SCORE_ATOL)
    assert cosine(wl, gl) >= LOGITS_COSINE_MIN
    if logits:
        assert cosine(wm, gm) >= LOGITS_COSINE_MIN
    else:
        for w, g in zip(wm.reshape(-1, *wm.shape[-2:]), gm.reshape(-1, *gm.shape[-2:])):
            assert iou(w, g) >= MASK_IOU_MIN


@pytest.mark.parametrize("name", IMAGES)
def test_predict_inst_is_the_officials_for_clicks_boxes_and_batches_of_boxes(files, official, name: str) -> None:
    """``state = processor.set_image(image)``; ``model.predict_inst(state, ...)``: masks IoU >= 0.99, scores within
    1e-4, low-resolution logits cosine >= 0.9999, every prompt of the official example; then the last multimask
    logits of the best mask as the next call's ``mask_input``."""
    picture = image(name)
    processor = ours(files)
    state = processor.set_image(picture)
    with torch.inference_mode(), scipy_connected_components():
        official_state = official.set_image(as_tensor(picture))
        for kwargs in prompts(picture).values():
            want = official.model.predict_inst(official_state, **kwargs)
            got = processor.model.predict_inst(state, **kwargs)
            assert_same(want, got, logits=kwargs.get("return_logits", False))
        masks, scores, logits = got
        follow = dict(point_coords=np.array([[0.5 * picture.shape[1], 0.5 * picture.shape[0]]]), point_labels=np.array([1]),
                      mask_input=logits[np.argmax(scores)][None], multimask_output=False)
        assert_same(official.model.predict_inst(official_state, **follow), processor.model.predict_inst(state, **follow))


@pytest.mark.parametrize("policy", ["bf16", "fp16"])
def test_reduced_click_masks_are_no_further_from_fp32_than_the_officials_own_bf16(files, official, policy: str) -> None:
    """The click masks at a reduced policy, judged against the official's published practice: the vision encoder
    and the interactive decoder on OpenVINO at ``policy`` where each family is proven for it, every prompt of the
    official example on both images; the scores and low-resolution logits (pooled relative L2) and the masks (mean
    IoU deficit) against the official in FP32 within the margin (twice) of the official BF16 autocast's own."""
    from vitdeploy.runtime.apps.sam3.processor import Sam3ImageModel, Sam3Processor
    from vitdeploy.runtime_facts import official_precision
    from tests.sam3_fixtures import at_proven_policy, openvino_runs, pooled_rel_l2

    if not openvino_runs(files[0], policy):
        pytest.skip(f"OpenVINO does not run {policy} on this CPU (it reads back another inference precision)")
    margin = official_precision("sam3_interactive_decoder").margin
    vision, interactive = at_proven_policy((files[0], files[3]), policy)
    processor = Sam3Processor(Sam3ImageModel(vision, interactive=interactive))
    runs: dict[str, list] = {"fp32": [], "official": [], "deployed": []}
    with torch.inference_mode(), scipy_connected_components():
        for name in IMAGES:
            picture = image(name)
            state = processor.set_image(picture)
            official_state = official.set_image(as_tensor(picture))
            with torch.autocast("cpu", dtype=torch.bfloat16):
                autocast_state = official.set_image(as_tensor(picture))
            for kwargs in prompts(picture).values():
                if kwargs.get("return_logits"):
                    continue
                runs["fp32"].append(official.model.predict_inst(official_state, **kwargs))
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    runs["official"].append(official.model.predict_inst(autocast_state, **kwargs))
                runs["deployed"].append(processor.model.predict_inst(state, **kwargs))
    for index, what in ((1, "scores"), (2, "low-resolution logits")):
        own, ours_ = (pooled_rel_l2([r[index] for r in runs["fp32"]], [np.asarray(r[index], np.float32) for r in runs[k]])
                      for k in ("official", "deployed"))
        assert own > 1e-4 and ours_ <= margin * own, (what, own, ours_)
    deficit = {k: 1 - np.mean([iou(w, g) for want, got in zip(runs["fp32"], runs[k])
                               for w, g in zip(want[0].reshape(-1, *want[0].shape[-2:]),
                                               np.asarray(got[0]).reshape(-1, *want[0].shape[-2:]))])
               for k in ("official", "deployed")}
    assert deficit["deployed"] <= margin * deficit["official"], deficit


def test_predict_inst_batch_is_the_officials(files, official) -> None:
    """``set_image_batch`` of two images, then one prompt set per image (a click; a box)."""
    from PIL import Image

    pictures = [image(n) for n in IMAGES]
    points = [np.array([[[0.4 * p.shape[1], 0.5 * p.shape[0]]]]) for p in pictures]
    labels = [np.array([[1]]), np.array([[1]])]
    boxes = [None, np.array([0.1 * pictures[1].shape[1], 0.2 * pictures[1].shape[0], 0.6 * pictures[1].shape[1],
                             0.9 * pictures[1].shape[0]])]
    processor = ours(files)
    state = processor.set_image_batch(pictures)
    with torch.inference_mode(), scipy_connected_components():
        official_state = official.set_image_batch([Image.fromarray(p) for p in pictures])
        want = official.model.predict_inst_batch(official_state, points, labels, box_batch=boxes, multimask_output=True)
    got = processor.model.predict_inst_batch(state, points, labels, box_batch=boxes, multimask_output=True)
    for w, g in zip(zip(*want), zip(*got)):
        assert_same(w, g)


def test_the_sam2_style_predictor_is_the_officials(files, official) -> None:
    """``SAM3InteractiveImagePredictor.set_image`` (its own transform: a float antialiased resize) then ``predict``:
    our :class:`Sam3InteractivePredictor` on the vision encoder and interactive decoder files."""
    from sam3.model.sam3_tracker_base import Sam3TrackerBase

    from vitdeploy.runtime import Sam3InteractivePredictor

    predictor = official.model.inst_interactive_predictor
    heads = predictor.model
    heads.backbone, heads.compile_all_components = official.model.backbone, False  # what forward_image reads
    picture = image(IMAGES[0])
    ours_predictor = Sam3InteractivePredictor(files[0], files[3], runtime="onnxruntime")
    ours_predictor.set_image(picture)
    with torch.inference_mode(), scipy_connected_components():
        heads.forward_image = Sam3TrackerBase.forward_image.__get__(heads)
        heads._maybe_clone = Sam3TrackerBase._maybe_clone.__get__(heads)
        try:
            predictor.set_image(picture)
            for kwargs in prompts(picture).values():
                assert_same(predictor.predict(**kwargs), ours_predictor.predict(**kwargs),
                            logits=kwargs.get("return_logits", False))
        finally:
            predictor.reset_predictor()
            del heads.forward_image, heads._maybe_clone, heads.backbone


def test_serve_answers_clicks_as_the_official_predictor(files, official) -> None:
    """``vitdeploy serve``'s service on the vision encoder and interactive decoder, over real HTTP on 127.0.0.1: the
    image encoded once, each prompt's masks and scores the official ``SAM3InteractiveImagePredictor``'s."""
    from sam3.model.sam3_tracker_base import Sam3TrackerBase

    from tests.runtime.apps.test_sam_service import Client, decode_rle, png_bytes
    from vitdeploy.runtime.apps.serving.server import Server
    from vitdeploy.runtime.apps.serving.service import SamService

    predictor = official.model.inst_interactive_predictor
    heads = predictor.model
    heads.backbone, heads.compile_all_components = official.model.backbone, False  # what forward_image reads
    picture = image(IMAGES[1])
    server = Server(SamService(files[0], files[3], runtime="onnxruntime", threads=1), "127.0.0.1", 0).start()
    try:
        client = Client(server.port)
        status, _, created = client("POST", "/v1/embeddings", png_bytes(picture))
        assert status == 200, created
        with torch.inference_mode(), scipy_connected_components():
            heads.forward_image = Sam3TrackerBase.forward_image.__get__(heads)
            heads._maybe_clone = Sam3TrackerBase._maybe_clone.__get__(heads)
            predictor.set_image(picture)
            for name, kwargs in prompts(picture).items():
                if kwargs.get("return_logits") or np.ndim(kwargs.get("box")) == 2:
                    continue  # the service answers masks, one prompt set each
                body = {"multimask_output": kwargs["multimask_output"]}
                if "point_coords" in kwargs:
                    body.update(points=kwargs["point_coords"].tolist(), labels=kwargs["point_labels"].tolist())
                if "box" in kwargs:
                    body["box"] = kwargs["box"].tolist()
                status, _, answer = client("POST", f"/v1/embeddings/{created['id']}/masks", body)
                assert status == 200, (name, answer)
                (result,) = answer["results"]
                masks, scores, _ = predictor.predict(**kwargs)
                np.testing.assert_allclose(result["scores"], scores, atol=SCORE_ATOL)
                for want, rle in zip(masks, result["masks"]):
                    assert iou(want, decode_rle(rle)) >= MASK_IOU_MIN, name
    finally:
        server.stop()
        predictor.reset_predictor()
        heads.__dict__.pop("forward_image", None)
        heads.__dict__.pop("_maybe_clone", None)
        del heads.backbone


def test_small_holes_are_filled_as_the_official_default_asks(files) -> None:
    """``max_hole_area=256`` by default (the official predictor's): background regions of the low-resolution logits of
    at most 256 pixels become foreground (+10) before the upsampling; larger ones stay; 0 turns it off."""
    from vitdeploy.runtime.processing.sam2_transforms import Sam2Transforms

    low = np.full((1, 64, 64), 5.0, np.float32)
    low[0, 10:20, 10:20] = -3.0  # a hole of 100 pixels
    low[0, 30:50, 30:50] = -3.0  # one of 400
    cleaned = Sam2Transforms(112, (127.5,) * 3, (127.5,) * 3, 0.0, max_hole_area=256).postprocess_masks(low, (64, 64))
    assert (cleaned[0, 10:20, 10:20] == 10.0).all() and (cleaned[0, 30:50, 30:50] == -3.0).all()
    kept = Sam2Transforms(112, (127.5,) * 3, (127.5,) * 3, 0.0).postprocess_masks(low, (64, 64))
    np.testing.assert_array_equal(kept, low)


@pytest.mark.parametrize(("hole", "sprinkle"), [(256, 0), (0, 8), (8, 8)])
def test_the_mask_clean_up_is_the_officials(hole: int, sprinkle: int) -> None:
    """Holes and sprinkles removed as the official ``SAM2Transforms.postprocess_masks`` removes them (SciPy's labelling
    on both sides: the module docstring's shim), on logits with small and large holes and blobs, and a ring of 8
    pixels around a 1-pixel hole: both regions are labelled on the decoder's logits, so with both areas 8 the ring
    goes (a sprinkle of 8) and its hole is filled."""
    from sam3.model.utils.sam1_utils import SAM2Transforms as OfficialTransforms

    from vitdeploy.runtime.processing.sam2_transforms import Sam2Transforms

    low = np.full((2, 1, 48, 48), -4.0, np.float32)
    low[0, 0, 5:25, 5:25] = 3.0
    low[0, 0, 10:12, 10:12] = -2.0  # a hole of 4 pixels in a large blob
    low[0, 0, 30:33, 30:33] = 2.0
    low[0, 0, 31, 31] = -1.0  # a ring of 8 around a hole of 1
    low[1, 0, 40:42, 2:4] = 1.5  # a sprinkle of 4
    low[1, 0, 2:30, 2:30] = 6.0
    low[1, 0, 8:28, 8:28] = -6.0  # a hole of 400
    official = OfficialTransforms(resolution=112, mask_threshold=0.0, max_hole_area=hole, max_sprinkle_area=sprinkle)
    with torch.inference_mode(), scipy_connected_components():
        want = official.postprocess_masks(torch.from_numpy(low), (48, 48)).numpy()
    got = Sam2Transforms(112, (127.5,) * 3, (127.5,) * 3, 0.0, hole, sprinkle).postprocess_masks(low, (48, 48))
    np.testing.assert_array_equal(got, want)
    assert not np.array_equal(got, low)  # something was cleaned


def test_wrong_files_and_calls_are_refused_in_one_line(files, tmp_path: Path) -> None:
    from vitdeploy.runtime import Sam3InteractivePredictor
    from vitdeploy.runtime.apps.sam3.processor import Sam3ImageModel, Sam3Processor

    vision, text, detector, interactive = files
    with pytest.raises(InputError, match="not SAM 3's interactive decoder"):
        Sam3InteractivePredictor(vision, detector, runtime="onnxruntime")
    with pytest.raises(InputError, match="not SAM 3's vision encoder"):
        Sam3InteractivePredictor(interactive, interactive, runtime="onnxruntime")
    model = Sam3ImageModel(vision, text, detector, runtime="onnxruntime")
    state = Sam3Processor(model).set_image(image(IMAGES[0]))
    with pytest.raises(InputError, match="interactive decoder"):
        model.predict_inst(state, point_coords=np.array([[10, 10]]), point_labels=np.array([1]))
    with pytest.raises(InputError, match="give text and detector together"):
        Sam3ImageModel(vision, text, runtime="onnxruntime")
    only_clicks = Sam3Processor(Sam3ImageModel(vision, interactive=interactive, runtime="onnxruntime"))
    state = only_clicks.set_image(image(IMAGES[0]))
    masks, _, _ = only_clicks.model.predict_inst(state, point_coords=np.array([[10, 10]]), point_labels=np.array([1]))
    assert masks.shape == (3, *image(IMAGES[0]).shape[:2])
    with pytest.raises(InputError, match="need SAM 3's text encoder and detector"):
        only_clicks.set_text_prompt(state=state, prompt="a dog")
    clicks = ours(files).model
    with pytest.raises(InputError, match="set_image before predict_inst"):
        clicks.predict_inst({}, point_coords=np.array([[10, 10]]), point_labels=np.array([1]))
    with pytest.raises(InputError, match="point_labels"):
        clicks.predict_inst(state, point_coords=np.array([[10, 10]]))


def test_predict_verb_takes_the_vision_encoder_and_interactive_decoder(files, tmp_path: Path) -> None:
    """``vitdeploy predict -e sam3.onnx -d sam3_interactive.onnx`` writes the best mask Sam3InteractivePredictor gives
    for the click (and with ``--record-inputs`` the decoder's inputs for that click); segment-all refuses SAM 3 files in one line (SAM 3 has no automatic mask generator), nothing
    written."""
    from PIL import Image

    from tests.cli_helpers import assert_user_error, run
    from tests.sam_tiny import sample_image
    from vitdeploy.runtime import Sam3InteractivePredictor
    from vitdeploy.runtime.processing.recorded_inputs import load_recorded_inputs

    vision, interactive = files[0], files[3]
    picture = sample_image(90, 120, seed=21)
    Image.fromarray(picture).save(tmp_path / "photo.png")
    code, output = run("predict", "-e", str(vision), "-d", str(interactive), "-i", str(tmp_path / "photo.png"),
                       "--point", "60,40", "-o", str(tmp_path / "mask.png"), "--runtime", "onnxruntime", "--threads", "1",
                       "--record-inputs", str(tmp_path / "decoder_inputs.npz"))
    assert code == 0, output
    assert "recorded 1 of 1 interactive_decoder input set(s)" in output, output
    predictor = Sam3InteractivePredictor(vision, interactive, runtime="onnxruntime", threads=1)
    predictor.set_image(picture)
    masks, scores, _ = predictor.predict(point_coords=np.array([[60.0, 40.0]]), point_labels=np.array([1]))
    written = np.asarray(Image.open(tmp_path / "mask.png")) > 127
    np.testing.assert_array_equal(written, masks[int(np.argmax(scores))] > 0.5)
    (recorded,), meta = load_recorded_inputs(tmp_path / "decoder_inputs.npz")  # the click's decoder inputs
    assert meta["graph"] == "interactive_decoder" and meta["family"] == "sam3_interactive_decoder", meta
    assert sorted(recorded) == sorted(predictor.decoder.input_names)
    np.testing.assert_array_equal(recorded["image_embed"], predictor.get_image_embedding())
    code, output = run("segment-all", "-e", str(vision), "-d", str(interactive), "-i", str(tmp_path / "photo.png"),
                       "-o", str(tmp_path / "all.json"), "--runtime", "onnxruntime")
    assert_user_error(code, output, "SAM 3 has no automatic mask generator", "segment-concept")
    assert not (tmp_path / "all.json").exists()


def test_fp16_of_the_interactive_decoder_holds_on_inputs_recorded_from_clicks(files, tmp_path: Path) -> None:
    """The interactive decoder's inputs recorded while ``predict_inst`` runs on bundled images (a click, two clicks, a
    box with a mask prompt), ``calibrate -p fp16 --feeds`` on them: the held-out sets within the fp16 budget of the
    FP32 file and of the official heads (cosine >= 0.9999)."""
    from tests.cli_helpers import assert_calibrated_within, run
    from vitdeploy.precision.calibration_data import bundled_calibration_dir
    from vitdeploy.runtime.processing.images import read_image_rgb

    processor = ours(files)
    model = processor.model
    recorder = model.record_inputs("interactive_decoder")
    for path in sorted(bundled_calibration_dir().glob("calib_0[0-5]*")):
        picture = read_image_rgb(path)
        state = processor.set_image(picture)
        for kwargs in list(prompts(picture).values())[:4]:
            _, scores, logits = model.predict_inst(state, **kwargs)
        model.predict_inst(state, point_coords=np.array([[20, 30]]), point_labels=np.array([1]),
                           mask_input=logits[int(np.argmax(scores))][None])
    recorder.save(tmp_path / "inputs.npz", {"graph": "interactive_decoder"})
    code, output = run("calibrate", str(files[3]), "-p", "fp16", "--feeds", str(tmp_path / "inputs.npz"), "-o",
                       str(tmp_path / "interactive.fp16.onnx"))
    assert code == 0, output
    assert_calibrated_within(output, "fp16", 0.9999)


def test_openvino_gives_the_same_clicks_as_onnx_runtime(files) -> None:
    """The same files on OpenVINO (FP32): masks IoU >= 0.99, scores within 1e-4, logits cosine >= 0.9999 against ONNX
    Runtime's, for each of the official example's prompts."""
    pytest.importorskip("openvino", reason="OpenVINO is not installed (pip install 'vitdeploy[openvino]')")
    from vitdeploy.runtime import Sam3InteractivePredictor

    picture = image(IMAGES[1])
    runs = {}
    for runtime in ("onnxruntime", "openvino"):
        predictor = Sam3InteractivePredictor(files[0], files[3], runtime=runtime)  # the file's math: FP32
        predictor.set_image(picture)
        runs[runtime] = {what: predictor.predict(**kwargs) for what, kwargs in prompts(picture).items()}
    for what, kwargs in prompts(picture).items():
        assert_same(runs["onnxruntime"][what], runs["openvino"][what], logits=kwargs.get("return_logits", False))


def test_the_interactive_decoder_exports_from_an_official_checkpoint(files, tmp_path: Path) -> None:
    """A user's ``sam3.pt`` keeps the heads under ``tracker.`` among the tracker's other modules and the detector: the
    export from it gives the outputs of the seeded export of the same weights, exactly; heads of another width are
    refused in one line, nothing written."""
    from tests.cli_helpers import assert_user_error, run
    from vitdeploy.families import FAMILIES
    from vitdeploy.models.recipes import load_recipe
    from vitdeploy.models.sam3_interactive_decoder import Sam3InteractiveArch, load_sam3_interactive
    from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner

    arch = Sam3InteractiveArch.from_dict(load_recipe("sam3_tiny_interactive").architecture)
    heads = load_sam3_interactive(arch, random_seed=SEED)
    state = {f"tracker.{k}": v for k, v in heads.state_dict().items()}
    state |= {"tracker.maskmem_tpos_enc": torch.zeros(7, 1, 1, 64), "detector.transformer.decoder.norm.weight": torch.ones(16)}
    torch.save({"model": state}, tmp_path / "sam3.pt")
    out = tmp_path / "from_checkpoint.onnx"
    code, output = run("export", "-r", "sam3_tiny_interactive", "--checkpoint", str(tmp_path / "sam3.pt"), "-o", str(out))
    assert code == 0, output
    seeded, loaded = OnnxRuntimeRunner(files[3], threads=1), OnnxRuntimeRunner(out, threads=1)
    for feeds in FAMILIES["sam3_interactive_decoder"].random_input_sets(seeded.metadata, [], {}, 2, seed=3):
        want, got = seeded.run(feeds.feeds), loaded.run(feeds.feeds)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])
    wide = load_sam3_interactive(Sam3InteractiveArch(img_size=112, patch_size=14, d_model=32), random_seed=SEED)
    torch.save({"model": {f"tracker.{k}": v for k, v in wide.state_dict().items()}}, tmp_path / "wide.pt")
    code, output = run("export", "-r", "sam3_tiny_interactive", "--checkpoint", str(tmp_path / "wide.pt"), "-o",
                       str(tmp_path / "w.onnx"))
    assert_user_error(code, output, "does not fit")
    assert not (tmp_path / "w.onnx").exists()
