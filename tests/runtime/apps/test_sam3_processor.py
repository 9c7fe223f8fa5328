"""SAM 3 on images end to end, torch-free, against the official ``sam3`` package's ``Sam3Processor`` on the official
``Sam3Image`` (tiny seeded models: ``sam3_tiny``, ``sam3_tiny_text``, ``sam3_tiny_detector``; the bundled images;
three text prompts and exemplar boxes).

With random weights the thresholded detections hang on scores near the threshold, so every query is compared before
the threshold first (threshold 0: scores, boxes and mask probabilities of all queries), then the thresholded result
at a threshold between the scores (the same instances, mask IoU).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tests.sam3_fixtures import SEED, official_sam3_processor, sam3_tiny_files
from vitdeploy.errors import InputError
from vitdeploy.runtime.apps.sam3.processor import Sam3ImageModel, Sam3Processor

pytest.importorskip("sam3", reason="the official sam3 package is not installed (scripts/test.sh installs it)")

PROMPTS = ("yellow school bus", "a person", "dog")
#: Every query before the threshold: scores and mask probabilities (cosine), boxes (IoU per query).
COSINE_MIN, BOX_IOU_MIN, MASK_IOU_MIN = 0.9999, 0.99, 0.99
IMAGES = ("calib_00_landscape.jpg", "calib_06_shapes.jpg")


def vocab() -> Path:
    from vitdeploy.runtime.processing.clip_tokenizer import default_vocab

    try:
        return default_vocab()
    except InputError as exc:
        pytest.skip(f"CLIP's vocabulary is not installed ({exc}; scripts/test.sh installs open_clip_torch)")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return sam3_tiny_files(tmp_path_factory)


@pytest.fixture(scope="module")
def official():
    """The official ``Sam3Processor`` on the official ``Sam3Image`` with the exports' weights."""
    return official_sam3_processor(vocab())


def ours(files, threshold: float = 0.0):
    return Sam3Processor(Sam3ImageModel(*files, runtime="onnxruntime"), confidence_threshold=threshold)


def image(name: str) -> np.ndarray:
    from vitdeploy.precision.calibration_data import bundled_calibration_dir
    from vitdeploy.runtime.processing.images import read_image_rgb

    return read_image_rgb(bundled_calibration_dir() / name)


def official_run(processor, picture: np.ndarray, steps) -> dict:
    from vitdeploy.rewrites.sam3_detector import _pin_memory_shim

    with _pin_memory_shim():
        state = processor.set_image(torch.from_numpy(picture).permute(2, 0, 1).contiguous())
        for call, argument in steps:
            state = call(processor, argument, state)
    return {key: (state[key] if state[key].dtype == torch.bool else state[key].float()).numpy()
            for key in ("scores", "boxes", "masks_logits", "masks")}  # (float: BF16 under autocast)


def our_run(processor, picture: np.ndarray, steps) -> dict:
    state = processor.set_image(picture)
    for call, argument in steps:
        state = call(processor, argument, state)
    return state


def text(processor, prompt, state):
    return processor.set_text_prompt(state=state, prompt=prompt)


def box(processor, spec, state):
    return processor.add_geometric_prompt(spec[0], spec[1], state)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    lo, hi = np.maximum(a[:, :2], b[:, :2]), np.minimum(a[:, 2:], b[:, 2:])
    inter = np.prod(np.clip(hi - lo, 0, None), axis=1)
    area = lambda x: np.prod(x[:, 2:] - x[:, :2], axis=1)  # noqa: E731
    return inter / (area(a) + area(b) - inter)


def mask_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.reshape(len(a), -1), b.reshape(len(b), -1)
    union = (a | b).sum(axis=1)
    return np.where(union > 0, (a & b).sum(axis=1) / np.maximum(union, 1), 1.0)


SCENARIOS = {
    **{f"text:{p}": [(text, p)] for p in PROMPTS},
    "text+positive box": [(text, PROMPTS[0]), (box, ([0.4, 0.5, 0.3, 0.4], True))],
    "boxes only (+ and -)": [(box, ([0.5, 0.5, 0.5, 0.6], True)), (box, ([0.2, 0.25, 0.2, 0.3], False))],
}


@pytest.mark.parametrize("name", IMAGES)
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_query_before_the_threshold_is_the_official(files, official, name: str, scenario: str) -> None:
    """Threshold 0: all queries in query order; scores and mask probabilities cosine >= 0.9999, every box IoU >= 0.99."""
    picture = image(name)
    want = official_run(official, picture, SCENARIOS[scenario])
    got = our_run(ours(files), picture, SCENARIOS[scenario])
    assert got["scores"].shape == want["scores"].shape == (8,)
    assert got["masks"].shape == want["masks"].shape == (8, 1, *picture.shape[:2])
    assert cosine(want["scores"], got["scores"]) >= COSINE_MIN
    assert cosine(want["masks_logits"], got["masks_logits"]) >= COSINE_MIN
    assert box_iou(want["boxes"], got["boxes"]).min() >= BOX_IOU_MIN
    np.testing.assert_allclose(got["scores"], want["scores"], atol=1e-4)


@pytest.mark.parametrize("scenario", ["text:a person", "text+positive box"])
def test_the_thresholded_instances_are_the_officials(files, official, scenario: str) -> None:
    """At a threshold between the scores (their median), the same instances are kept, mask IoU >= 0.99 each; then
    ``set_confidence_threshold`` on the state filters again as the official does."""
    picture = image(IMAGES[0])
    everything = official_run(official, picture, SCENARIOS[scenario])
    ranked = np.sort(everything["scores"])
    threshold = float((ranked[3] + ranked[4]) / 2)  # halfway between two scores: no tie can flip
    official.set_confidence_threshold(threshold)
    try:
        want = official_run(official, picture, SCENARIOS[scenario])
    finally:
        official.set_confidence_threshold(0.0)
    processor = ours(files)
    state = our_run(processor, picture, SCENARIOS[scenario])
    state = processor.set_confidence_threshold(threshold, state)
    assert len(state["scores"]) == len(want["scores"]) == 4
    np.testing.assert_allclose(state["scores"], want["scores"], atol=1e-4)
    assert mask_iou(want["masks"], state["masks"]).min() >= MASK_IOU_MIN
    assert box_iou(want["boxes"], state["boxes"]).min() >= BOX_IOU_MIN


@pytest.mark.parametrize("policy", ["bf16", "fp16"])
def test_a_reduced_deployment_is_no_further_from_fp32_than_the_officials_own_bf16(files, official, policy: str) -> None:
    """What the user receives at a reduced policy, judged against the official's published practice (BF16 autocast
    for the whole run): each file on OpenVINO at ``policy`` where its family is proven for it (else as written), every
    scenario on both images; every query's scores, boxes and mask logits (pooled relative L2) and the masks (mean
    IoU deficit) against the official in FP32 are within the margin (twice) of the official BF16 autocast's own."""
    from vitdeploy.runtime_facts import official_precision
    from tests.sam3_fixtures import at_proven_policy, openvino_runs, pooled_rel_l2

    if not openvino_runs(files[0], policy):
        pytest.skip(f"OpenVINO does not run {policy} on this CPU (it reads back another inference precision)")
    margin = official_precision("sam3_detector").margin
    processor = Sam3Processor(Sam3ImageModel(*at_proven_policy(files, policy)), confidence_threshold=0.0)
    runs: dict[str, list[dict]] = {"fp32": [], "official": [], "deployed": []}
    for name in IMAGES:
        for steps in SCENARIOS.values():
            picture = image(name)
            runs["fp32"].append(official_run(official, picture, steps))
            with torch.autocast("cpu", dtype=torch.bfloat16):
                runs["official"].append(official_run(official, picture, steps))
            runs["deployed"].append(our_run(processor, picture, steps))
    for key in ("scores", "boxes", "masks_logits"):
        own, ours_ = (pooled_rel_l2([r[key] for r in runs["fp32"]], [r[key] for r in runs[k]]) for k in ("official", "deployed"))
        assert own > 1e-4 and ours_ <= margin * own, (key, own, ours_)
    deficit = {k: 1 - np.mean(np.concatenate([mask_iou(w["masks"], g["masks"]) for w, g in zip(runs["fp32"], runs[k])]))
               for k in ("official", "deployed")}
    assert deficit["deployed"] <= margin * deficit["official"], deficit


def test_prompts_reset_and_text_features_are_kept_per_prompt(files) -> None:
    processor = ours(files, threshold=0.5)
    state = processor.set_image(image(IMAGES[1]))
    first = processor.set_text_prompt(state=state, prompt="dog")["scores"].copy()
    calls = []
    run = processor.model.text.run
    processor.model.text.run = lambda feeds: calls.append(1) or run(feeds)
    again = processor.set_text_prompt(state=state, prompt="dog")["scores"]
    assert calls == [] and np.array_equal(first, again)  # the prompt's features were kept
    processor.reset_all_prompts(state)
    assert "masks" not in state and "geometric_prompt" not in state and "backbone_out" in state
    with pytest.raises(InputError, match="call set_image before"):
        processor.set_text_prompt(state={}, prompt="dog")


@pytest.mark.parametrize(("call", "message"), [
    (lambda p, s: p.set_text_prompt(state=s, prompt="   "), "the text prompt is empty"),
    (lambda p, s: p.set_text_prompt(state=s, prompt="word " * 31), "takes 33 tokens but SAM 3's text encoder reads 32"),
    (lambda p, s: p.add_geometric_prompt([0.9, 0.5, 0.4, 0.2], True, s), "is not inside the image"),
    (lambda p, s: p.add_geometric_prompt([0.5, 0.5, 0.0, 0.2], True, s), "is not inside the image"),
    (lambda p, s: p.add_geometric_prompt([0.5, 0.5], True, s), "a box is [center_x, center_y, width, height]"),
], ids=["empty-text", "long-text", "box-outside", "empty-box", "short-box"])
def test_bad_prompts_are_refused_in_one_line_and_the_state_is_kept(files, call, message: str) -> None:
    processor = ours(files, threshold=0.5)
    state = processor.set_image(image(IMAGES[1]))
    processor.set_text_prompt(state=state, prompt="dog")
    before = {k: v.copy() for k, v in state.items() if isinstance(v, np.ndarray)}
    with pytest.raises(InputError, match=message.replace("[", r"\[").replace("]", r"\]")):
        call(processor, state)
    assert all(np.array_equal(before[k], state[k]) for k in before)


def test_more_boxes_than_the_file_takes_are_refused(files) -> None:
    processor = ours(files, threshold=0.5)
    state = processor.set_image(image(IMAGES[1]))
    for i in range(8):  # sam3_tiny_detector: max_boxes = 8
        processor.add_geometric_prompt([0.1 + 0.1 * i, 0.5, 0.1, 0.1], i % 2 == 0, state)
    with pytest.raises(InputError, match="takes at most 8 exemplar boxes"):
        processor.add_geometric_prompt([0.5, 0.5, 0.1, 0.1], True, state)
    assert len(state["geometric_prompt"]["boxes"]) == 8


def test_files_of_another_model_or_in_the_wrong_order_are_refused(files, tmp_path: Path) -> None:
    from vitdeploy.pipeline import export_from_recipe
    from vitdeploy.runtime.apps.sam3.processor import Sam3ImageModel

    vision, text_file, detector = files
    with pytest.raises(InputError, match="the text encoder is SAM 3's detector, not SAM 3's text encoder"):
        Sam3ImageModel(vision, detector, text_file, runtime="onnxruntime")
    other = export_from_recipe("sam3_tiny_text", tmp_path / "other_text.onnx", random_weights=True, seed=SEED + 1).path
    with pytest.raises(InputError, match="two different SAM 3 models"):
        Sam3ImageModel(vision, other, detector, runtime="onnxruntime")


def test_one_concept_prompt_is_the_official_calls_in_one_detector_run(files) -> None:
    """``set_concept_prompt`` (vitdeploy's) leaves the state ``set_text_prompt`` then ``add_geometric_prompt`` per box
    leave, array for array, running the detector once (what ``segment-concept`` and the server call)."""
    picture = image(IMAGES[0])
    for steps, prompt, boxes, labels in (
            (SCENARIOS["text+positive box"], PROMPTS[0], [[0.4, 0.5, 0.3, 0.4]], [True]),
            (SCENARIOS["boxes only (+ and -)"], None, [[0.5, 0.5, 0.5, 0.6], [0.2, 0.25, 0.2, 0.3]], [True, False])):
        want = our_run(ours(files), picture, steps)
        processor = ours(files)
        state = processor.set_image(picture)
        runs = []
        detect = processor.model.detector.run
        processor.model.detector.run = lambda feeds: runs.append(1) or detect(feeds)
        got = processor.set_concept_prompt(state, prompt, boxes, labels)
        assert runs == [1]
        for key in ("scores", "boxes", "masks_logits", "masks"):
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)


@pytest.fixture(scope="module")
def concept_server(files, tmp_path_factory: pytest.TempPathFactory):
    """``vitdeploy serve``'s service with SAM 3's text encoder and detector beside the click pair, on 127.0.0.1."""
    from tests.runtime.apps.test_sam_service import Client
    from tests.sam3_fixtures import sam3_tiny_interactive_file
    from vitdeploy.runtime.apps.serving.server import Server
    from vitdeploy.runtime.apps.serving.service import SamService

    vocab()
    vision, text_file, detector = files
    service = SamService(vision, sam3_tiny_interactive_file(tmp_path_factory), runtime="onnxruntime", threads=1,
                         text_encoder=text_file, detector=detector, concept_cache_size=1)
    server = Server(service, "127.0.0.1", 0).start()
    yield service, Client(server.port)
    server.stop()


def test_serve_answers_concept_prompts_as_the_official_processor(concept_server, official) -> None:
    """Over real HTTP: an image posted once, then a text and a text with an exemplar box (pixels) at a threshold
    between the scores: the instances the official ``Sam3Processor`` keeps, scores within 1e-4, masks (COCO RLE)
    IoU >= 0.99, boxes IoU >= 0.99; the answer validates against /openapi.json; the image's detector features are
    computed once for both prompts, from what its cache entry kept: the image as the detector resizes it (a concept
    server kept every upload's bytes: 12 uploads of 14 MB took 292 MB)."""
    import jsonschema

    from tests.runtime.apps.test_sam_service import decode_rle, png_bytes

    service, client = concept_server
    picture = image(IMAGES[0])
    height, width = picture.shape[:2]
    status, _, created = client("POST", "/v1/embeddings", png_bytes(picture))
    assert status == 200, created
    side = service.concept.model.resolution  # the entry keeps the image as the detector resizes it, not the upload
    kept = service.cache.get(created["id"]).data
    assert isinstance(kept, np.ndarray) and kept.shape == (side, side, 3) and kept.nbytes < len(png_bytes(picture))
    schema = client("GET", "/openapi.json")[2]
    pixel_box = [0.25 * width, 0.3 * height, 0.55 * width, 0.7 * height]  # [0.4, 0.5, 0.3, 0.4] normalized
    runs_before = service.metrics.value("encoder_runs_total")
    for steps, body in ((SCENARIOS["text:a person"], {"text": "a person"}),
                        (SCENARIOS["text+positive box"], {"text": PROMPTS[0], "boxes": [pixel_box]})):
        ranked = np.sort(official_run(official, picture, steps)["scores"])
        threshold = float((ranked[3] + ranked[4]) / 2)
        official.set_confidence_threshold(threshold)
        try:
            want = official_run(official, picture, steps)
        finally:
            official.set_confidence_threshold(0.0)
        status, _, answer = client("POST", f"/v1/embeddings/{created['id']}/concepts",
                                   {**body, "confidence_threshold": threshold})
        assert status == 200, answer
        document = {"$ref": "#/components/schemas/ConceptAnswer", "components": schema["components"]}
        jsonschema.Draft202012Validator(document).validate(answer)
        instances = answer["instances"]
        assert len(instances) == len(want["scores"]) == 4
        np.testing.assert_allclose([i["score"] for i in instances], want["scores"], atol=1e-4)
        masks = np.stack([decode_rle(i["segmentation"]) for i in instances])[:, None]
        assert mask_iou(want["masks"], masks).min() >= MASK_IOU_MIN
        assert box_iou(want["boxes"], np.array([i["bbox_xyxy"] for i in instances])).min() >= BOX_IOU_MIN
    assert service.metrics.value("encoder_runs_total") - runs_before == 1  # the detector's features, once


@pytest.mark.parametrize(("body", "status", "message"), [
    ({"text": ""}, 400, "text"),
    ({"text": "dog", "boxes": [[0, 0, 9999, 10]]}, 400, "is not inside"),
    ({"text": "dog", "boxes": [[50, 50, 10, 10]]}, 400, "positive width and height"),
    ({"text": "dog", "boxes": [[1, 1, 5, 5]] * 9}, 400, "at most 8 exemplar boxes"),
    ({"text": "dog", "points": [[1, 1]]}, 400, "a concept prompt has text, boxes"),
    ({"text": "dog", "confidence_threshold": 2}, 400, "confidence_threshold"),
    ({"text": "word " * 31}, 400, "takes 33 tokens"),
], ids=["empty-text", "box-outside", "inverted-box", "too-many-boxes", "unknown-field",
        "threshold", "long-text"])
def test_bad_concept_prompts_get_400_in_one_line_and_the_server_stays_up(concept_server, body, status,
                                                                         message: str) -> None:
    from tests.runtime.apps.test_sam_service import png_bytes

    _, client = concept_server
    key = client("POST", "/v1/embeddings", png_bytes(image(IMAGES[1])))[2]["id"]
    got, _, answer = client("POST", f"/v1/embeddings/{key}/concepts", body)
    assert got == status and message in answer["error"] and "\n" not in answer["error"], answer
    assert client("GET", "/healthz")[0] == 200


def test_concept_prompts_need_the_files_and_a_cached_image(concept_server, files, tmp_path_factory) -> None:
    """An unknown id is 404 naming /v1/embeddings; a server started without the text encoder and detector answers 404
    naming --text-encoder and --detector; one of the two alone is refused before a file is opened."""
    from tests.runtime.apps.test_sam_service import Client, png_bytes
    from tests.sam3_fixtures import sam3_tiny_interactive_file
    from vitdeploy.runtime.apps.serving.server import Server
    from vitdeploy.runtime.apps.serving.service import SamService

    service, client = concept_server
    status, _, answer = client("POST", "/v1/embeddings/" + "0" * 32 + "/concepts", {"text": "dog"})
    assert status == 404 and "/v1/embeddings" in answer["error"], answer
    assert client("GET", "/healthz")[2]["concepts"]["max_boxes"] == 8
    vision, text_file, detector = files
    interactive = sam3_tiny_interactive_file(tmp_path_factory)
    clicks_only = Server(SamService(vision, interactive, runtime="onnxruntime", threads=1), "127.0.0.1", 0).start()
    try:
        other = Client(clicks_only.port)
        key = other("POST", "/v1/embeddings", png_bytes(image(IMAGES[1])))[2]["id"]
        status, _, answer = other("POST", f"/v1/embeddings/{key}/concepts", {"text": "dog"})
        assert status == 404 and "--text-encoder and --detector" in answer["error"], answer
    finally:
        clicks_only.stop()
    with pytest.raises(InputError, match="give both, or neither"):
        SamService(vision, interactive, runtime="onnxruntime", text_encoder=text_file)
    with pytest.raises(InputError, match="is SAM 3's detector, not SAM 3's text encoder"):
        SamService(vision, interactive, runtime="onnxruntime", text_encoder=detector, detector=text_file)


def test_serve_takes_the_concept_files_together_and_in_one_process(files, tmp_path_factory) -> None:
    """``serve --text-encoder`` without ``--detector``, or either with ``--ray``, is a usage error naming the fix,
    before any file is opened or a cluster started."""
    from tests.cli_helpers import run
    from tests.sam3_fixtures import sam3_tiny_interactive_file

    vision, text_file, detector = files
    pair = ("serve", "-e", str(vision), "-d", str(sam3_tiny_interactive_file(tmp_path_factory)))
    code, output = run(*pair, "--text-encoder", str(text_file))
    assert code == 2 and "--text-encoder and --detector go together" in output and "Traceback" not in output, output
    code, output = run(*pair, "--text-encoder", str(text_file), "--detector", str(detector), "--ray")
    assert code == 2 and "served in one process: leave out --ray" in output and "Traceback" not in output, output


def test_the_page_finds_every_instance_of_a_text(concept_server, tmp_path: Path) -> None:
    """In a real browser (headless Chromium): the page of a SAM 3 server with the concept files offers "Find every
    instance"; a text typed there shows every instance the API answers for the same image and prompt, the best one's
    mask equal to the API's, one candidate button per instance; downloaded, its record carries the concept prompt."""
    import json

    from PIL import Image

    from tests.runtime.apps.test_sam_service import decode_rle
    from tests.runtime.apps.test_serve_page import ARTIFACTS, _browser_or_skip, _page_mask, _settled, _state, _wait

    _, client = concept_server
    Image.fromarray(image(IMAGES[1])).save(tmp_path / "shapes.png")
    data = (tmp_path / "shapes.png").read_bytes()
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    browser = _browser_or_skip(downloads)
    try:
        browser.get(client.base + "/")
        _wait(browser, lambda b: b.find_element("id", "concept").is_displayed(), "offer concept prompts")
        browser.find_element("id", "file").send_keys(str(tmp_path / "shapes.png"))
        _wait(browser, lambda b: _state(b) == "ready" and b.find_element("id", "find").is_enabled(), "encode the image")
        threshold = browser.find_element("id", "concept-threshold")
        threshold.clear()
        threshold.send_keys("0")
        browser.find_element("id", "concept-text").send_keys("a person")
        browser.find_element("id", "find").click()
        _settled(browser, 1)
        key = client("POST", "/v1/embeddings", data)[2]["id"]  # the page's upload: the same bytes, the same id
        status, _, answer = client("POST", f"/v1/embeddings/{key}/concepts", {"text": "a person", "confidence_threshold": 0})
        assert status == 200, answer
        instances = answer["instances"]
        assert browser.execute_script("return window.vitdeployPage.instances()") == len(instances) == 8
        assert browser.execute_script("return window.vitdeployPage.conceptBody()") == {"text": "a person",
                                                                                       "confidence_threshold": 0}
        best = max(range(len(instances)), key=lambda k: instances[k]["score"])
        assert np.array_equal(_page_mask(browser), decode_rle(instances[best]["segmentation"]))
        assert len(browser.find_elements("css selector", "#candidates button")) == len(instances)
        browser.find_element("id", "download-rle").click()
        _wait(browser, lambda b: (downloads / "shapes.mask.json").is_file(), "download the instance")
        record = json.loads((downloads / "shapes.mask.json").read_text())
        assert record["prompt"]["text"] == "a person" and record["segmentation"] == instances[best]["segmentation"]
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        assert browser.save_screenshot(str(ARTIFACTS / "serve-page-concepts.png"))
    finally:
        browser.quit()
