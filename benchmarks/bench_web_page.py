"""The static site's page (``vitdeploy web``: SAM, SAM 2, SAM 3 clicks) in headless Chromium against native ONNX Runtime on the same CPU and the
same two files, alternated in one run: the page's parity check (encode the site's sample image twice, decode its
click five times) once a round, then native ONNX Runtime's encode and decode of the same image and click; per image
and per click, medians over the rounds, with the page's embedding cosine and mask IoU (issue 77).

Both sides FP32 with the same threads: the page runs onnxruntime-web's WebAssembly build (SIMD, ``--threads``
threads where cross-origin isolated: the site's service worker makes a plain file server's page isolated).

Usage (files exported beforehand, e.g. ``vitdeploy export -r sam_vit_b --random-weights -o sam_vit_b.onnx`` and
``-r sam_vit_b_decoder``):
    PYTHONPATH=. .venv/bin/python benchmarks/bench_web_page.py -e sam_vit_b.onnx -d sam_vit_b_decoder.onnx \
        --rounds 3 --threads 2 --report out/web_page.json
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from benchmarks.options import parsed, timing_options, write_report


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def _chromium(threads: int):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or shutil.which("google-chrome")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    browser = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    browser.set_script_timeout(1800)
    return browser


def _loaded(browser, timeout_s: float = 1800) -> None:
    from selenium.common.exceptions import WebDriverException

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(WebDriverException):  # the page reloads once (the service worker's isolation)
            if browser.execute_script('return document.body.dataset.state === "empty" && '
                                      'document.getElementById("model").textContent.includes("in this browser")'):
                return
            if browser.execute_script('return document.body.dataset.state === "error"'):
                raise RuntimeError(browser.find_element("id", "model").text)
        time.sleep(0.2)
    raise TimeoutError("the page did not load the model")


def main() -> None:
    parser = timing_options(argparse.ArgumentParser(description=__doc__.splitlines()[0]), rounds=3, runtime=None)
    parser.add_argument("--encoder", "-e", required=True)
    parser.add_argument("--decoder", "-d", required=True)
    parser.add_argument("--report", default=None)
    args = parsed(parser)

    from vitdeploy.runtime.apps.predictors import open_sam_predictor
    from vitdeploy.runtime.apps.serving.site import build_site
    from vitdeploy.runtime.processing.images import read_image_rgb

    folder = Path(tempfile.mkdtemp(prefix="vitdeploy-web-")) / "site"
    started = time.perf_counter()
    site = build_site(args.encoder, args.decoder, folder, threads=args.threads)
    print(f"site built in {time.perf_counter() - started:.1f} s: {site.total_bytes / 1e6:.1f} MB")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    browser = _chromium(args.threads)
    predictor = open_sam_predictor(args.encoder, args.decoder, runtime="onnxruntime", threads=args.threads)
    image = read_image_rgb(folder / "check" / "sample.png")
    click = np.asarray([[image.shape[1] / 2, image.shape[0] / 2]]), np.asarray([1])
    rows = {"page_encode_ms": [], "page_decode_ms": [], "native_encode_ms": [], "native_decode_ms": []}
    try:
        started = time.perf_counter()
        browser.get(f"http://127.0.0.1:{server.server_address[1]}/")
        _loaded(browser)
        load_s = time.perf_counter() - started
        threads = browser.execute_script("return window.vitdeployPage.threads()")
        print(f"page loaded the model in {load_s:.1f} s; WebAssembly threads {threads}")
        predictor.set_image(image)  # warm-up
        predictor.predict(*click)
        report = None
        for round_ in range(args.rounds):
            report = browser.execute_async_script("const done = arguments[arguments.length - 1];"
                                                  "window.vitdeployPage.check().then(done, (e) => done(String(e)));")
            if not isinstance(report, dict):
                raise RuntimeError(f"the page's check failed: {report}")
            rows["page_encode_ms"].append(report["encode_ms"])
            rows["page_decode_ms"].append(report["decode_ms"])
            start = time.perf_counter()
            predictor.set_image(image)
            rows["native_encode_ms"].append((time.perf_counter() - start) * 1000)
            decodes = []
            for _ in range(5):
                start = time.perf_counter()
                predictor.predict(*click)
                decodes.append((time.perf_counter() - start) * 1000)
            rows["native_decode_ms"].append(statistics.median(decodes))
            print(f"round {round_ + 1}: page encode {report['encode_ms']:.0f} ms, decode {report['decode_ms']:.1f} ms; "
                  f"native encode {rows['native_encode_ms'][-1]:.0f} ms, decode {rows['native_decode_ms'][-1]:.1f} ms")
    finally:
        browser.quit()
        server.shutdown()
        shutil.rmtree(folder.parent, ignore_errors=True)
    medians = {key: statistics.median(values) for key, values in rows.items()}
    summary = {**medians, "encode_ratio": medians["page_encode_ms"] / medians["native_encode_ms"],
               "decode_ratio": medians["page_decode_ms"] / medians["native_decode_ms"],
               "embedding_cosine": report["embedding_cosine"], "embedding_max_abs": report["embedding_max_abs"],
               "mask_iou_min": min(report["mask_iou"]), "page_load_s": load_s, "threads": threads,
               "isolated": report["isolated"], "files_mb": site.total_bytes / 1e6, "rounds": rows}
    print(f"per image: page {medians['page_encode_ms']:.0f} ms vs native {medians['native_encode_ms']:.0f} ms "
          f"({summary['encode_ratio']:.2f}x); per click: page {medians['page_decode_ms']:.1f} ms vs native "
          f"{medians['native_decode_ms']:.1f} ms ({summary['decode_ratio']:.2f}x); embedding cosine "
          f"{summary['embedding_cosine']:.7f}, worst mask IoU {summary['mask_iou_min']:.4f}")
    write_report(args.report, summary)


if __name__ == "__main__":
    main()
