"""The server's page in a real browser (Debian's Chromium, headless, driven by Selenium through chromedriver): open an
image, click, drag a box, undo, pick a mask, download it; every mask the page shows equals ``SamPredictor``'s for
the prompt the page sent (IoU 1.0: the server decodes; the same in the browser with onnxruntime-web). Screenshots
are kept in build/test-artifacts/."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.runtime.apps.test_sam_service import decode_rle
from tests.sam_tiny import TinySamArtifacts, sample_image
from vitdeploy.runtime import SamPredictor
from vitdeploy.runtime.apps.serving.server import Server
from vitdeploy.runtime.apps.serving.service import SamService
from vitdeploy.validation.masks import compare_masks

pytest_plugins = ["tests.sam_tiny_fixtures"]
#: Where the page's screenshot is kept (CI keeps build/ as an artifact folder; VITDEPLOY_TEST_ARTIFACTS overrides).
ARTIFACTS = Path(os.environ.get("VITDEPLOY_TEST_ARTIFACTS", Path(__file__).parents[3] / "build" / "test-artifacts"))
#: Seconds the page may take for one step (an encode or a decode of the tiny model: tens of milliseconds).
STEP_S = 30


def _browser_or_skip(downloads: Path, flags: tuple[str, ...] = ()):
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (the dev extra has it)")
    from selenium.webdriver.chrome.service import Service

    chromium = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
    driver = shutil.which("chromedriver")
    if chromium is None or driver is None:
        pytest.skip("no Chromium and chromedriver on PATH (Debian: apt-get install chromium chromium-driver; "
                    "scripts/test.sh installs them when it runs as root)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,860",
                 *flags):
        options.add_argument(flag)
    options.add_experimental_option("prefs", {"download.default_directory": str(downloads),
                                              "download.prompt_for_download": False})
    return webdriver.Chrome(service=Service(driver), options=options)


@pytest.fixture(scope="module")
def page(tiny_sam_artifacts: TinySamArtifacts, tmp_path_factory: pytest.TempPathFactory):
    service = SamService(tiny_sam_artifacts.encoder, tiny_sam_artifacts.decoder, runtime="onnxruntime", threads=1)
    downloads = tmp_path_factory.mktemp("downloads")
    browser = _browser_or_skip(downloads)
    server = Server(service, "127.0.0.1", 0).start()
    try:
        browser.get(f"http://127.0.0.1:{server.port}/")
        yield browser, downloads
    finally:
        browser.quit()
        server.stop()


def _wait(browser, condition, what: str):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, STEP_S, poll_frequency=0.05).until(condition, message=f"the page did not {what}")


def _state(browser) -> str:
    return browser.find_element("tag name", "body").get_attribute("data-state")


def _settled(browser, answers: int) -> None:
    """Wait until the page has shown its ``answers``-th masks answer."""
    _wait(browser, lambda b: b.execute_script("return window.vitdeployPage.answered()") >= answers
          and _state(b) == "ready", f"show masks answer {answers}")


def _page_mask(browser) -> np.ndarray:
    height, width = browser.execute_script("return window.vitdeployPage.size()")
    bits = browser.execute_script("return window.vitdeployPage.mask()")
    return np.frombuffer(bits.encode(), np.uint8).reshape(height, width) == ord("1")


def _predicted(predictor: SamPredictor, prompt: dict) -> tuple[np.ndarray, np.ndarray]:
    masks, scores, _ = predictor.predict(
        np.array(prompt["points"], np.float64) if "points" in prompt else None,
        np.array(prompt["labels"]) if "labels" in prompt else None,
        np.array(prompt["box"], np.float64) if "box" in prompt else None,
        multimask_output=prompt["multimask_output"])
    return masks, scores


def _at(browser, canvas, x: float, y: float):
    """An action chain placed on image pixel (x, y) of the canvas (Selenium's offsets are from its centre)."""
    from selenium.webdriver.common.action_chains import ActionChains

    height, width = browser.execute_script("return window.vitdeployPage.size()")
    rect = canvas.rect
    return ActionChains(browser).move_to_element_with_offset(canvas, int((x / width - 0.5) * rect["width"]),
                                                             int((y / height - 0.5) * rect["height"]))


def test_clicks_in_the_page_give_the_predictors_masks(page, tiny_sam_artifacts: TinySamArtifacts, tmp_path: Path) -> None:
    browser, downloads = page
    picture = sample_image(120, 160, seed=7)
    Image.fromarray(picture).save(tmp_path / "street.png")
    predictor = SamPredictor(str(tiny_sam_artifacts.encoder), str(tiny_sam_artifacts.decoder), runtime="onnxruntime")
    predictor.set_image(picture)

    _wait(browser, lambda b: "encoder.onnx" in b.find_element("id", "model").text, "name the model")
    assert "onnxruntime-cpu" in browser.find_element("id", "model").text
    browser.find_element("id", "file").send_keys(str(tmp_path / "street.png"))
    _wait(browser, lambda b: _state(b) == "ready", "encode the image")
    canvas = browser.find_element("id", "canvas")
    assert canvas.rect["width"] > 160  # shown larger than the image: clicks are mapped back to its pixels

    _at(browser, canvas, 50, 40).click().perform()  # one foreground click: three candidates, the best one shown
    _settled(browser, 1)
    prompt = browser.execute_script("return window.vitdeployPage.prompt()")
    assert prompt["labels"] == [1] and prompt["multimask_output"] is True
    assert abs(prompt["points"][0][0] - 50) < 1.5 and abs(prompt["points"][0][1] - 40) < 1.5, prompt
    masks, scores = _predicted(predictor, prompt)
    assert np.array_equal(_page_mask(browser), masks[int(np.argmax(scores))])
    candidates = browser.find_elements("css selector", "#candidates button")
    assert len(candidates) == 3
    candidates[0].click()  # pick another candidate
    assert np.array_equal(_page_mask(browser), masks[0])

    _at(browser, canvas, 120, 90).context_click().perform()  # right click: a background point
    _settled(browser, 2)
    prompt = browser.execute_script("return window.vitdeployPage.prompt()")
    assert prompt["labels"] == [1, 0] and prompt["multimask_output"] is False
    masks, _ = _predicted(predictor, prompt)
    assert np.array_equal(_page_mask(browser), masks[0])

    browser.find_element("id", "undo").click()  # back to the one click
    _settled(browser, 3)
    assert len(browser.execute_script("return window.vitdeployPage.prompt()")["points"]) == 1

    _at(browser, canvas, 20, 15).click_and_hold().move_by_offset(120, 80).release().perform()  # a box
    _settled(browser, 4)
    prompt = browser.execute_script("return window.vitdeployPage.prompt()")
    x0, y0, x1, y1 = prompt["box"]
    assert x0 < x1 and y0 < y1 and prompt["multimask_output"] is False
    masks, _ = _predicted(predictor, prompt)
    shown = _page_mask(browser)
    assert np.array_equal(shown, masks[0])

    browser.find_element("id", "download-png").click()
    browser.find_element("id", "download-rle").click()
    _wait(browser, lambda b: (downloads / "street.mask.png").is_file() and (downloads / "street.mask.json").is_file()
          and not list(downloads.glob("*.crdownload")), "download the mask")
    assert np.array_equal(np.asarray(Image.open(downloads / "street.mask.png").convert("L")) > 127, shown)
    record = json.loads((downloads / "street.mask.json").read_text())
    assert np.array_equal(decode_rle(record["segmentation"]), shown) and record["prompt"] == prompt

    timings = browser.find_element("id", "timings").text
    assert "encode" in timings and "decode" in timings and "ms" in timings
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(ARTIFACTS / "serve-page.png"))


def test_the_pages_rle_decoder_is_pycocotools(page) -> None:
    """The page decodes COCO's compressed RLE itself: equal to pycocotools on masks with long runs (counts over
    2**15 need more than three characters) and on empty and full masks."""
    from pycocotools import mask as coco_mask

    browser, _ = page
    rng = np.random.default_rng(3)
    blobs = np.zeros((300, 410), bool)
    for _ in range(12):
        y, x, r = rng.integers(0, 300), rng.integers(0, 410), rng.integers(3, 60)
        yy, xx = np.ogrid[:300, :410]
        blobs |= (yy - y) ** 2 + (xx - x) ** 2 < r * r
    for mask in (blobs, np.zeros((7, 9), bool), np.ones((300, 410), bool), rng.random((33, 21)) > 0.5):
        rle = coco_mask.encode(np.asfortranarray(mask.astype(np.uint8)))
        decoded = browser.execute_script("return window.vitdeployPage.decodeRle(arguments[0])",
                                         {"size": rle["size"], "counts": rle["counts"].decode()})
        assert decoded == "".join("1" if v else "0" for v in mask.ravel())


def test_the_decoder_in_the_browser_gives_the_predictors_masks(page, tiny_sam_artifacts: TinySamArtifacts,
                                                                tmp_path: Path) -> None:
    """For a SAM decoder that is one .onnx file, the page can decode clicks itself with onnxruntime-web (bundled in
    the package, as Meta's demo does): its masks against SamPredictor's on ONNX Runtime, its scores to 1e-4."""
    from vitdeploy.runtime.apps.serving.api import PAGE_DIR

    browser, _ = page
    if not (PAGE_DIR / "ort" / "ort.wasm.min.js").is_file():
        pytest.skip("onnxruntime-web is not in the page (python scripts/fetch_page_assets.py puts it there)")
    picture = sample_image(90, 130, seed=9)
    Image.fromarray(picture).save(tmp_path / "field.png")
    predictor = SamPredictor(str(tiny_sam_artifacts.encoder), str(tiny_sam_artifacts.decoder), runtime="onnxruntime")
    predictor.set_image(picture)
    browser.refresh()
    _wait(browser, lambda b: b.find_element("id", "where").is_displayed(), "offer the browser decoder")
    browser.find_element("id", "file").send_keys(str(tmp_path / "field.png"))
    _wait(browser, lambda b: _state(b) == "ready", "encode the image")
    browser.find_element("css selector", 'input[name="where"][value="browser"]').click()
    _wait(browser, lambda b: b.execute_script("return window.vitdeployPage.where()") == "browser", "load onnxruntime-web")
    assert "runs in this browser" in browser.find_element("id", "status").text
    canvas = browser.find_element("id", "canvas")
    answers = browser.execute_script("return window.vitdeployPage.answered()")
    for k, act in enumerate((lambda: _at(browser, canvas, 40, 30).click(),  # one click: three candidates
                             lambda: _at(browser, canvas, 100, 70).context_click(),  # and a background point
                             lambda: _at(browser, canvas, 10, 8).click_and_hold().move_by_offset(150, 110).release())):
        act().perform()
        _settled(browser, answers + k + 1)
        prompt = browser.execute_script("return window.vitdeployPage.prompt()")
        masks, scores = _predicted(predictor, prompt)
        candidates = browser.find_elements("css selector", "#candidates button")
        assert len(candidates) == len(masks), prompt
        shown = browser.execute_script("return window.vitdeployPage.answerScores()")
        np.testing.assert_allclose(shown, scores, atol=1e-4, err_msg=json.dumps(prompt))
        best = int(np.argmax(shown))
        # the same file in float32 in other kernels (WebAssembly): logits near 0 may fall either side, so the fp32
        # mask budget (vitdeploy.validation.masks), not equality
        agreement = compare_masks(masks[best], _page_mask(browser), "fp32", label=json.dumps(prompt))
        print(f"browser decoder: {agreement.summary()}; scores {np.abs(np.array(shown) - scores).max():.2e}")
        assert agreement, agreement.summary()
    assert "decode (browser)" in browser.find_element("id", "timings").text
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(ARTIFACTS / "serve-page-browser-decoder.png"))
    browser.find_element("css selector", 'input[name="where"][value="server"]').click()  # back, for other tests


def test_the_pages_rle_encoder_is_pycocotools(page) -> None:
    """A mask decoded in the browser is downloaded as COCO RLE the page encodes itself: pycocotools' string."""
    from pycocotools import mask as coco_mask

    browser, _ = page
    rng = np.random.default_rng(4)
    for mask in (rng.random((37, 53)) > 0.6, np.ones((300, 410), bool), np.zeros((5, 4), bool)):
        ours = browser.execute_script("return window.vitdeployPage.encodeRle(arguments[0], arguments[1], arguments[2])",
                                      "".join("1" if v else "0" for v in mask.ravel()), *mask.shape)
        assert ours["counts"] == coco_mask.encode(np.asfortranarray(mask.astype(np.uint8)))["counts"].decode()


def test_the_api_docs_render_from_the_package(page) -> None:
    """/docs renders every route of /openapi.json with Swagger UI from the package: nothing from another origin
    (FastAPI's default loads it from a CDN)."""
    from vitdeploy.runtime.apps.serving.api import PAGE_DIR

    browser, _ = page
    if not (PAGE_DIR / "swagger" / "swagger-ui-bundle.js").is_file():
        pytest.skip("swagger-ui-dist is not in the page (python scripts/fetch_page_assets.py puts it there)")
    base = browser.current_url.split("/", 3)[:3]
    browser.get("/".join(base) + "/docs")
    _wait(browser, lambda b: len(b.find_elements("css selector", ".opblock")) >= 7, "render the API's routes")
    paths = {e.text for e in browser.find_elements("css selector", ".opblock-summary-path")}
    assert {"/v1/embeddings", "/v1/embeddings/{key}/masks", "/healthz"} <= paths, paths
    loaded = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert loaded and all(url.startswith("/".join(base)) for url in loaded), loaded
    browser.get("/".join(base) + "/")
