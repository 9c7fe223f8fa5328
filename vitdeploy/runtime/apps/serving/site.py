"""A static site that segments with no server at all (``vitdeploy web``): the page, onnxruntime-web and a model's two
click files in one folder, which any static file host serves as it is: SAM's encoder and decoder, SAM 2's, or SAM 3's
vision encoder and interactive decoder (the pair :func:`~vitdeploy.runtime.apps.predictors.prompt_files` names).

The page (``page/``, the one ``serve`` offers) runs in its site mode (``<body data-site="site.json">``): it encodes
the image and decodes the clicks in the browser, as the model's Python predictor does (SAM: ``browser_encoder.js``
and ``browser_decoder.js``; SAM 2 and SAM 3: ``browser_sam2.js``; each predictor's ``page_facts`` says what the page
needs), with onnxruntime-web's WebAssembly build, SIMD and, where the page is cross-origin isolated, threads; the
encoder on WebGPU where the browser has a hardware adapter (``browser_runtime.js``). Isolation comes from the host's headers where it sets them (``_headers``: Netlify, Cloudflare Pages) or from
the site's own service worker (``coi_worker.js``) on any other host.

The folder also holds its proof: native ONNX Runtime's answers on the same two files for a sample image and a click,
computed here when the site is built (``check/``). The page's "Check parity" encodes and decodes the same image and
click in the browser and reports the embedding's cosine, the masks' IoU and both times, beside the native ones.

The folder is written whole or not at all: built beside its destination and renamed into place.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vitdeploy.errors import InputError

PAGE_DIR = Path(__file__).with_name("page")
#: The page's own files, copied to ``page/``.
PAGE_FILES = ("page.js", "page.css", "rle.js", "browser_runtime.js", "browser_decoder.js", "browser_encoder.js",
              "browser_sam2.js")
#: onnxruntime-web's WebAssembly build (``scripts/fetch_page_assets.py`` puts it in ``page/ort/``), copied to
#: ``page/ort/``.
ORT_FILES = ("ort.wasm.min.js", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm", "package.json", "VERSION")
#: onnxruntime-web's WebGPU build (its WebGPU execution provider, and WebAssembly for the rest), copied beside it where
#: the package has it: the page runs the encoder on WebGPU where the browser has a hardware adapter
#: (``browser_runtime.js``).
WEBGPU_FILES = ("ort.webgpu.min.js", "ort-wasm-simd-threaded.asyncify.mjs", "ort-wasm-simd-threaded.asyncify.wasm")
#: The headers that make a page cross-origin isolated (WebAssembly threads need it): what the site's ``_headers`` asks
#: of a host that reads it (Netlify, Cloudflare Pages), and what ``serve`` sends its /web/ page.
ISOLATION_HEADERS = {"Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp"}
#: ``_headers``: every file with :data:`ISOLATION_HEADERS`, without the service worker's reload.
HEADERS = "/*\n" + "".join(f"  {name}: {value}\n" for name, value in ISOLATION_HEADERS.items())
#: A page's WebAssembly memory is 32-bit: onnxruntime-web holds a model's weights in at most 4 GiB with everything
#: else, so files larger than this together are warned about (SAM ViT-H FP32 is 2.5 GB).
PAGE_BYTES_WARNING = 2 * 1024 ** 3
#: The default pixel limit of an opened image: the server's (``serve --max-image-pixels``).
MAX_IMAGE_PIXELS = 50_000_000
#: How the page names each model.
TITLES = {"sam": "SAM", "sam2": "SAM 2", "sam3": "SAM 3"}
#: The parity check's default sample image, of the bundled image set (a PNG: every browser decodes it to the same
#: pixels as Pillow; JPEG decoders may round differently).
SAMPLE_IMAGE = "calib_01_shapes.png"
#: Timed runs of each native step for the check's reference times (the median; one warm-up run first).
NATIVE_RUNS = 5


@dataclass(frozen=True)
class SiteFile:
    """One file of the site: its path in the folder, its size, what it is."""

    path: str
    bytes: int
    what: str


@dataclass
class Site:
    """What :func:`build_site` wrote."""

    folder: Path
    files: list[SiteFile] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: Native ONNX Runtime's times on the sample image (ms): encode, decode.
    native_ms: tuple[float, float] = (0.0, 0.0)
    #: Native ONNX Runtime's embedding against the official eager model's (``eager``), or None.
    eager_cosine: float | None = None

    @property
    def total_bytes(self) -> int:
        return sum(f.bytes for f in self.files)


def _median_ms(step: Any) -> float:
    from vitdeploy.runtime.deploy.timing import timed_runs

    step()  # warm-up
    return float(statistics.median(timed_runs(step, NATIVE_RUNS)))


def site_page_html() -> str:
    """The page's index.html in its site mode: it reads ``site.json`` and runs the model itself."""
    return (PAGE_DIR / "index.html").read_text(encoding="utf-8").replace("<body>", '<body data-site="site.json">', 1)


def _require_page_assets() -> None:
    missing = [name for name in ORT_FILES if not (PAGE_DIR / "ort" / name).is_file()]
    if missing:
        raise InputError(f"onnxruntime-web is not in this install ({PAGE_DIR / 'ort' / missing[0]} is missing): run "
                         "'python scripts/fetch_page_assets.py' in the source tree, then install again")


def page_backends() -> list[str]:
    """The onnxruntime-web builds this install can offer a page: ``wasm`` (always, once
    ``scripts/fetch_page_assets.py`` ran), and ``webgpu`` where its files are there too."""
    ort = PAGE_DIR / "ort"
    return ["wasm"] + (["webgpu"] if all((ort / name).is_file() for name in WEBGPU_FILES) else [])


def has_external_data(path: str | os.PathLike) -> bool:
    """Whether an .onnx file keeps its weights beside it (``NAME.onnx.data``, as the exporter writes them): a page
    fetches one file a model."""
    return Path(f"{path}.data").exists()


def one_onnx_file(path: str | os.PathLike | None) -> bool:
    """Whether ``path`` is one self-contained .onnx file: what a page can fetch and run."""
    return bool(path) and Path(path).suffix.lower() == ".onnx" and not has_external_data(path)


def site_facts(model: str, predictor: Any, files: dict[str, tuple[Path, str]], max_image_pixels: int) -> dict[str, Any]:
    """What the page needs to run a model itself (``site.json`` without its check): ``model`` (``sam``, ``sam2``,
    ``sam3``), its ``predictor`` (whose ``page_facts`` it holds), and each file (``encoder``, ``decoder``) as (its path,
    the URL the page fetches it from)."""
    pair = predictor.page_facts()
    return {"model": model, "title": f"{TITLES[model]} {predictor.variant}", "variant": predictor.variant,
            "max_image_pixels": int(max_image_pixels), "backends": page_backends(),
            **{role: {"name": path.name, "url": url, "bytes": path.stat().st_size, **pair[role]}
               for role, (path, url) in files.items()}}


def _require_one_file(path: Path, role: str) -> None:
    from vitdeploy.fileio import require_onnx_file

    require_onnx_file(path)
    if has_external_data(path):
        raise InputError(f"the {role} '{path}' keeps its weights in external data files: a page fetches one file per "
                         "model; export a model under 2 GB into one .onnx file")


def _bundled_sample() -> Path:
    """The default sample image: a 256x256 PNG of the bundled image set (``vitdeploy._calibration_images``)."""
    from importlib import resources

    path = Path(str(resources.files("vitdeploy._calibration_images"))) / SAMPLE_IMAGE
    if not path.is_file():
        raise InputError(f"the bundled sample image '{path}' is missing: pass --check-image IMAGE")
    return path


def _reference(predictor: Any, image: np.ndarray) -> tuple[dict[str, Any], np.ndarray]:
    """Native ONNX Runtime's answers on the sample image: the embedding, and the masks of a click at its centre."""
    from vitdeploy.runtime.apps.common.rle import coco_encode_rle, mask_to_rle

    height, width = image.shape[:2]
    click = [[width / 2, height / 2]]
    encode_ms = _median_ms(lambda: predictor.set_image(image))
    embedding = np.asarray(predictor.get_image_embedding(), dtype=np.float32)
    decode_ms = _median_ms(lambda: predictor.predict(np.asarray(click), np.asarray([1]), multimask_output=True))
    masks, scores, _ = predictor.predict(np.asarray(click), np.asarray([1]), multimask_output=True)
    check = {"image": "check/sample.png", "embedding": "check/embedding.f32", "size": [height, width],
             "prompt": {"points": click, "labels": [1], "multimask_output": True},
             "masks": [coco_encode_rle(mask_to_rle(np.asarray(m) > 0)) for m in masks], "scores": [float(s) for s in scores],
             "native_encode_ms": encode_ms, "native_decode_ms": decode_ms, "native": "onnxruntime (CPU, FP32)"}
    return check, embedding


def build_site(encoder: str | os.PathLike, decoder: str | os.PathLike, out: str | os.PathLike, *,
               force: bool = False, check_image: str | os.PathLike | None = None,
               max_image_pixels: int = MAX_IMAGE_PIXELS, threads: int | None = None,
               eager: Callable[[np.ndarray], list[np.ndarray]] | None = None) -> Site:
    """Write the static site of an encoder and decoder (SAM, SAM 2, SAM 3 clicks) into the folder ``out`` (module
    docstring).

    ``check_image``: the sample image of the parity check (default: a bundled PNG); ``max_image_pixels``: the most
    pixels an image opened in the page may have; ``threads``: native ONNX Runtime's threads for the reference;
    ``eager``: the official eager model on the encoder's input array -> its outputs in the encoder file's order
    (the CLI's ``--eager`` makes it; this module stays torch-free), whose embedding the check holds too.
    Raises InputError for files that are not one model's click pair, a file with external weights, or an existing ``out``
    without ``force``; nothing is left in ``out`` then.
    """
    from PIL import Image

    from vitdeploy.fileio import claim_folder, remove_stale_folders
    from vitdeploy.parity import compare
    from vitdeploy.runtime.apps.predictors import open_sam_predictor, prompt_files
    from vitdeploy.runtime.processing.images import read_image_rgb

    encoder, decoder, out = Path(encoder), Path(decoder), Path(out)
    _require_page_assets()
    for path, role in ((encoder, "encoder"), (decoder, "decoder")):
        _require_one_file(path, role)
    files = prompt_files(str(encoder))
    files.check_files(dict(zip(files.roles, (str(encoder), str(decoder)))))  # one model, before anything opens
    if out.exists() and not out.is_dir():
        raise InputError(f"'{out}' is a file, not a folder: choose a folder for the site")
    if out.exists() and not force and any(out.iterdir()):
        raise InputError(f"'{out}' already exists and is not empty: pass --force to replace it, or choose another folder")
    if encoder.name == decoder.name:
        raise InputError(f"the encoder and decoder are both named '{encoder.name}': the site keeps both in models/; "
                         "rename one")
    sample = Path(check_image) if check_image else _bundled_sample()
    image = read_image_rgb(sample)
    out.parent.mkdir(parents=True, exist_ok=True)
    claim_folder(out)
    remove_stale_folders(out.parent, f".{out.name}.")

    predictor = open_sam_predictor(str(encoder), str(decoder), runtime="onnxruntime", threads=threads)
    check, embedding = _reference(predictor, image)
    official = None
    if eager is not None:  # the official eager model's embedding of the same image, beside native's
        # the very array native ONNX Runtime ran on; the outputs in the encoder file's order
        outputs = dict(zip(predictor.encoder.output_names, eager(predictor.encoder_array(image))))
        official = np.asarray(outputs[predictor.FEATURES[0]], np.float32).reshape(embedding.shape)
        check["eager"] = {"embedding": "check/eager_embedding.f32", "reference": "official eager PyTorch (FP32)",
                          "native_cosine": compare(official, embedding, "fp32", label="native vs eager").cosine}
    facts = {**site_facts(files.model, predictor, {"encoder": (encoder, f"models/{encoder.name}"),
                                                     "decoder": (decoder, f"models/{decoder.name}")},
                          max_image_pixels), "check": check}
    building = out.parent / f".{out.name}.{os.getpid()}-building"
    shutil.rmtree(building, ignore_errors=True)
    site = Site(out)
    try:
        (building / "page" / "ort").mkdir(parents=True)
        (building / "models").mkdir()
        (building / "check").mkdir()
        (building / "index.html").write_text(site_page_html(), encoding="utf-8")
        shutil.copyfile(PAGE_DIR / "coi_worker.js", building / "coi_worker.js")
        (building / "_headers").write_text(HEADERS, encoding="utf-8")
        for name in PAGE_FILES:
            shutil.copyfile(PAGE_DIR / name, building / "page" / name)
        for name in ORT_FILES + (WEBGPU_FILES if "webgpu" in facts["backends"] else ()):
            shutil.copyfile(PAGE_DIR / "ort" / name, building / "page" / "ort" / name)
        shutil.copyfile(encoder, building / "models" / encoder.name)
        shutil.copyfile(decoder, building / "models" / decoder.name)
        Image.fromarray(image).save(building / "check" / "sample.png")
        (building / "check" / "embedding.f32").write_bytes(embedding.astype("<f4").tobytes())
        if official is not None:
            (building / "check" / "eager_embedding.f32").write_bytes(official.astype("<f4").tobytes())
        (building / "site.json").write_text(json.dumps(facts, indent=1) + "\n", encoding="utf-8")
        whats = {f"models/{encoder.name}": "the image encoder", f"models/{decoder.name}": "the prompt encoder + mask "
                 "decoder", "page/ort/ort-wasm-simd-threaded.wasm": "onnxruntime-web (WebAssembly, SIMD, threads)",
                 "page/ort/ort-wasm-simd-threaded.asyncify.wasm": "onnxruntime-web's WebGPU build (where the browser "
                 "has a GPU)",
                 "check/embedding.f32": "native ONNX Runtime's embedding of check/sample.png"}
        for path in sorted(p for p in building.rglob("*") if p.is_file()):
            name = path.relative_to(building).as_posix()
            site.files.append(SiteFile(name, path.stat().st_size, whats.get(name, "")))
        if out.exists():  # --force: the old folder goes only once the new one is whole
            retired = out.parent / f".{out.name}.{os.getpid()}-old"
            out.rename(retired)
            building.rename(out)
            shutil.rmtree(retired, ignore_errors=True)
        else:
            building.rename(out)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    model_bytes = facts["encoder"]["bytes"] + facts["decoder"]["bytes"]
    if model_bytes > PAGE_BYTES_WARNING:
        site.warnings.append(f"the two model files are {model_bytes / 1e9:.2f} GB together: a page's WebAssembly memory "
                             "is 4 GiB in all, so the browser may run out; a reduced-precision file "
                             "('vitdeploy calibrate -p fp16' or int8) is smaller")
    site.native_ms = (check["native_encode_ms"], check["native_decode_ms"])
    site.eager_cosine = check["eager"]["native_cosine"] if "eager" in check else None
    return site


__all__ = ["ISOLATION_HEADERS", "Site", "SiteFile", "build_site", "has_external_data", "one_onnx_file", "page_backends",
           "site_facts", "site_page_html"]
