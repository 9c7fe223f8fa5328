"""Regenerate the bundled calibration images and their manifest (deterministic, no downloads).

The images are procedural but image-like: sky/ground gradients, hills, discs and polygons, fractal
value-noise textures, stripes, Voronoi cells, blur and sensor noise, at several sizes and aspect
ratios (so SAM's resize-longest-side and padding are exercised). They are made by this project and
dedicated to the public domain (CC0-1.0), so the set is license-clean.

    python calibration/generate.py            # rewrites calibration/images/ and MANIFEST.json
    python calibration/generate.py --check    # exit 1 if the files differ from what the script makes
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

HERE = Path(__file__).resolve().parent
IMAGES = HERE / "images"
LICENSE = "CC0-1.0"

Painter = Callable[[np.random.Generator, int, int], Image.Image]


def value_noise(rng: np.random.Generator, h: int, w: int, octaves: int = 5) -> np.ndarray:
    """Fractal value noise in [0, 1]: bilinearly upsampled random grids, halving amplitude per octave."""
    out = np.zeros((h, w), dtype=np.float64)
    amp, total = 1.0, 0.0
    for octave in range(octaves):
        cells = 2 ** (octave + 2)
        grid = rng.random((cells + 1, cells + 1))
        layer = np.asarray(Image.fromarray((grid * 255).astype(np.uint8)).resize((w, h), Image.BILINEAR), dtype=np.float64) / 255
        out += amp * layer
        total += amp
        amp *= 0.5
    out /= total
    return (out - out.min()) / max(out.max() - out.min(), 1e-9)


def colorize(field: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    return (low[None, None, :] * (1 - field[..., None]) + high[None, None, :] * field[..., None]).clip(0, 255)


def random_color(rng: np.random.Generator, lo: int = 0, hi: int = 256) -> tuple[int, int, int]:
    return tuple(int(v) for v in rng.integers(lo, hi, size=3))


def landscape(rng: np.random.Generator, h: int, w: int) -> Image.Image:
    """Sky gradient, a sun, layered noisy hills."""
    t = np.linspace(0, 1, h)[:, None, None]
    sky = (np.array([70, 130, 210]) * (1 - t) + np.array([230, 200, 170]) * t) * np.ones((h, w, 3))
    img = Image.fromarray(sky.astype(np.uint8))
    draw = ImageDraw.Draw(img)
    r = int(rng.integers(h // 12, h // 6))
    cx, cy = int(rng.integers(r, w - r)), int(rng.integers(r, h // 2))
    draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=(255, 230, 150))
    for layer in range(3):
        base = h * (0.45 + 0.17 * layer)
        xs = np.arange(0, w + 8, 8)
        ys = base + np.cumsum(rng.normal(0, h * 0.02, size=len(xs)))
        shade = 40 + 50 * layer
        draw.polygon([(0, h)] + [(int(x), int(y)) for x, y in zip(xs, ys)] + [(w, h)],
                     fill=(shade // 2, shade + int(rng.integers(0, 60)), shade // 3))
    return img


def shapes(rng: np.random.Generator, h: int, w: int) -> Image.Image:
    """Overlapping discs, rectangles and polygons on a textured background."""
    bg = colorize(value_noise(rng, h, w, 4), np.array(random_color(rng, 0, 120)), np.array(random_color(rng, 120, 256)))
    img = Image.fromarray(bg.astype(np.uint8))
    draw = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(8, 20))):
        kind = rng.integers(0, 3)
        x0, y0 = int(rng.integers(0, w)), int(rng.integers(0, h))
        size = int(rng.integers(min(h, w) // 12, min(h, w) // 3))
        color = random_color(rng)
        if kind == 0:
            draw.ellipse([x0, y0, x0 + size, y0 + size], fill=color, outline=random_color(rng), width=2)
        elif kind == 1:
            draw.rectangle([x0, y0, x0 + size, y0 + int(size * rng.uniform(0.3, 1.5))], fill=color)
        else:
            pts = [(int(x0 + size * np.cos(a)), int(y0 + size * np.sin(a)))
                   for a in np.sort(rng.uniform(0, 2 * np.pi, size=int(rng.integers(3, 7))))]
            draw.polygon(pts, fill=color)
    return img


def texture(rng: np.random.Generator, h: int, w: int) -> Image.Image:
    """Fractal noise mapped through a random three-colour ramp (marble / rock / foliage-like)."""
    field = value_noise(rng, h, w, 6)
    warped = (np.sin(field * rng.uniform(6, 20) + np.linspace(0, rng.uniform(2, 8), w)[None, :]) + 1) / 2
    a, b, c = (np.array(random_color(rng)) for _ in range(3))
    rgb = np.where(warped[..., None] < 0.5, colorize(warped * 2, a, b), colorize(warped * 2 - 1, b, c))
    return Image.fromarray(rgb.astype(np.uint8))


def stripes(rng: np.random.Generator, h: int, w: int) -> Image.Image:
    """Rotated stripes and a checkerboard patch: high spatial frequencies and hard edges."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    angle = rng.uniform(0, np.pi)
    period = rng.uniform(6, 30)
    s = (np.sin((xx * np.cos(angle) + yy * np.sin(angle)) * 2 * np.pi / period) + 1) / 2
    rgb = colorize(s, np.array(random_color(rng)), np.array(random_color(rng)))
    cy, cx, size = int(rng.integers(0, h // 2)), int(rng.integers(0, w // 2)), int(rng.integers(8, 24))
    checker = ((yy // size + xx // size) % 2)[..., None] * 255
    mask = (yy >= cy) & (yy < cy + h // 2) & (xx >= cx) & (xx < cx + w // 2)
    rgb = np.where(mask[..., None], checker, rgb)
    return Image.fromarray(rgb.astype(np.uint8))


def cells(rng: np.random.Generator, h: int, w: int) -> Image.Image:
    """Voronoi cells with per-cell colour and shading (tiles, leaves, cobblestones)."""
    n = int(rng.integers(12, 40))
    seeds = np.stack([rng.uniform(0, h, n), rng.uniform(0, w, n)], axis=1)
    colors = rng.integers(30, 230, size=(n, 3))
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    d = (yy[..., None] - seeds[:, 0]) ** 2 + (xx[..., None] - seeds[:, 1]) ** 2
    order = np.sort(d, axis=-1)
    nearest = np.argmin(d, axis=-1)
    edge = np.clip((np.sqrt(order[..., 1]) - np.sqrt(order[..., 0])) / 4, 0, 1)
    rgb = colors[nearest] * (0.55 + 0.45 * edge[..., None])
    return Image.fromarray(rgb.clip(0, 255).astype(np.uint8))


PAINTERS: dict[str, Painter] = {"landscape": landscape, "shapes": shapes, "texture": texture, "stripes": stripes, "cells": cells}

#: (kind, width, height, format): mixed aspect ratios, portrait and landscape, JPEG and PNG.
PLAN = [
    ("landscape", 320, 240, "jpg"), ("shapes", 256, 256, "png"), ("texture", 288, 192, "jpg"), ("stripes", 240, 320, "jpg"),
    ("cells", 256, 192, "png"), ("landscape", 384, 216, "jpg"), ("shapes", 200, 300, "jpg"), ("texture", 256, 256, "jpg"),
    ("cells", 320, 240, "jpg"), ("stripes", 256, 256, "png"), ("shapes", 352, 240, "jpg"), ("landscape", 240, 240, "jpg"),
    ("texture", 192, 288, "png"), ("cells", 300, 200, "jpg"), ("shapes", 320, 320, "jpg"), ("stripes", 384, 256, "jpg"),
]


def render(index: int, kind: str, width: int, height: int) -> Image.Image:
    rng = np.random.default_rng(1000 + index)
    img = PAINTERS[kind](rng, height, width).convert("RGB")
    img = img.filter(ImageFilter.GaussianBlur(radius=float(rng.uniform(0.3, 1.2))))
    arr = np.asarray(img, dtype=np.float64)
    arr = arr * rng.uniform(0.8, 1.1) + rng.normal(0, rng.uniform(2, 6), size=arr.shape)  # exposure + sensor noise
    return Image.fromarray(arr.clip(0, 255).astype(np.uint8))


def encode(img: Image.Image, fmt: str) -> bytes:
    buf = io.BytesIO()
    if fmt == "jpg":
        img.save(buf, format="JPEG", quality=85, optimize=True)
    else:
        img.save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def build() -> tuple[dict[str, bytes], dict]:
    files: dict[str, bytes] = {}
    entries = []
    for i, (kind, w, h, fmt) in enumerate(PLAN):
        name = f"calib_{i:02d}_{kind}.{fmt}"
        data = encode(render(i, kind, w, h), fmt)
        files[name] = data
        entries.append({
            "file": f"images/{name}", "width": w, "height": h, "channels": 3, "kind": kind,
            "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
            "source": f"procedural: calibration/generate.py, painter '{kind}', seed {1000 + i}",
            "license": LICENSE,
        })
    manifest = {
        "name": "vitdeploy-procedural-calibration",
        "description": "Small license-clean calibration set made by vitdeploy (procedural, image-like). "
                       "Good for tests and demos; real deployments should calibrate on their own images.",
        "license": LICENSE,
        "generator": "calibration/generate.py",
        "images": entries,
    }
    return files, manifest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the files on disk instead of writing")
    args = parser.parse_args()
    files, manifest = build()
    manifest_bytes = (json.dumps(manifest, indent=2) + "\n").encode()
    if args.check:
        stale = [n for n, d in files.items() if not (IMAGES / n).is_file() or (IMAGES / n).read_bytes() != d]
        if (HERE / "MANIFEST.json").read_bytes() != manifest_bytes:
            stale.append("MANIFEST.json")
        print("up to date" if not stale else f"differs: {', '.join(stale)}")
        return 1 if stale else 0
    IMAGES.mkdir(exist_ok=True)
    for name, data in files.items():
        (IMAGES / name).write_bytes(data)
    (HERE / "MANIFEST.json").write_bytes(manifest_bytes)
    total = sum(len(d) for d in files.values())
    print(f"wrote {len(files)} images ({total / 1e6:.2f} MB) and MANIFEST.json to {HERE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
