"""Image reading with errors for people."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from vitdeploy.cpu_features import available_memory
from vitdeploy.errors import InputError

T = TypeVar("T")

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff")  # what Pillow reads (a GIF: its first frame)


#: PIL modes holding more than 8 bits per sample (16-bit PNG/TIFF, 32-bit integer or float images).
WIDE_MODES = ("I;16", "I;16B", "I;16L", "I;16N", "I", "F")


#: Peak memory of ``vitdeploy predict`` per pixel of the input image (decode, three full-size mask logits, the
#: overlay), measured: 4.57 GB for a 108-megapixel JPEG with the tiny model (``/usr/bin/time -v``), 42.4 B/px.
PEAK_BYTES_PER_PIXEL = 43
#: Above this, PIL warns of a "decompression bomb" (its MAX_IMAGE_PIXELS); vitdeploy notes the memory instead.
LARGE_IMAGE_PIXELS = 89_478_485
MAX_PIXELS_ENV = "VITDEPLOY_MAX_IMAGE_PIXELS"
_PIL_LIMIT_LOCK = threading.Lock()


def max_image_pixels() -> tuple[int | None, str]:
    """(the largest image this process should decode, why): ``$VITDEPLOY_MAX_IMAGE_PIXELS`` (0: no limit), else what
    this machine's available memory holds at :data:`PEAK_BYTES_PER_PIXEL`."""
    raw = os.environ.get(MAX_PIXELS_ENV)
    if raw is not None:
        try:
            value = int(raw)
        except ValueError:
            raise InputError(f"{MAX_PIXELS_ENV}={raw!r} is not a whole number of pixels (0 for no limit)") from None
        return (value or None), f"{MAX_PIXELS_ENV}={raw}"
    available = available_memory()
    if available is None:
        return None, "no memory figure on this system"
    return available // PEAK_BYTES_PER_PIXEL, f"{available / 2**30:.1f} GiB of memory available here"


@contextlib.contextmanager
def _pil_bomb_check_off() -> Iterator[None]:
    """Open images without PIL's decompression-bomb warning/error: :func:`check_pixels` applies vitdeploy's own
    limit, which says what to do. PIL's limit is a module global: restored afterwards, under a lock."""
    from PIL import Image

    with _PIL_LIMIT_LOCK:
        saved = Image.MAX_IMAGE_PIXELS
        Image.MAX_IMAGE_PIXELS = None
        try:
            yield
        finally:
            Image.MAX_IMAGE_PIXELS = saved


def check_pixels(path: Path, width: int, height: int, notes: list[str] | None, limit: PixelLimit | None = None) -> None:
    """InputError when decoding a ``width`` x ``height`` image would not fit (a huge photo, or a small file that
    claims gigapixels: a decompression bomb), or :class:`ImageTooLarge` past a caller's ``limit``; a note for a large
    one that fits."""
    if limit is not None:
        limit.check(path.name, width, height)
    pixels = width * height
    limit, why = max_image_pixels()
    need = pixels * PEAK_BYTES_PER_PIXEL / 2**30
    if limit is not None and pixels > limit:
        raise InputError(f"image '{path.name}' is {width}x{height} ({pixels / 1e6:.0f} megapixels), over this machine's "
                         f"limit of {limit / 1e6:.0f} megapixels ({why}; about {need:.1f} GiB would be needed): downscale "
                         f"it (SAM works at 1024 pixels on the long side), or set {MAX_PIXELS_ENV}")
    if pixels > LARGE_IMAGE_PIXELS and notes is not None:
        notes.append(f"large image: {width}x{height} ({pixels / 1e6:.0f} megapixels); full-size masks take about "
                     f"{need:.1f} GiB of memory")


def upright(img):
    """``img`` turned as its EXIF orientation says (phone photos are stored sideways and tagged)."""
    from PIL import ImageOps

    return ImageOps.exif_transpose(img)


def to_rgb8(img, notes: list[str] | None = None) -> np.ndarray:
    """HxWx3 uint8 RGB of a PIL image, upright. Images of more than 8 bits (16-bit medical/scientific PNGs)
    are scaled from their own min..max to 0..255, with a note: ``convert("RGB")`` would clip them to white."""
    img = upright(img)
    if img.mode in WIDE_MODES:
        values = np.asarray(img, dtype=np.float64)
        lo, hi = float(values.min()), float(values.max())
        scaled = np.zeros(values.shape, np.uint8) if hi <= lo else np.round((values - lo) * (255.0 / (hi - lo))).astype(np.uint8)
        if notes is not None:
            notes.append(f"{img.mode} image with values {lo:g}..{hi:g} scaled to 8 bits (its own min..max -> 0..255)")
        return np.repeat(scaled[:, :, None], 3, axis=2)
    return np.asarray(img.convert("RGB"), dtype=np.uint8).copy()


def read_image_rgb(path: str | Path, notes: list[str] | None = None) -> np.ndarray:
    """Read an image file as an HxWx3 uint8 RGB array, upright (EXIF orientation applied).

    ``notes`` (when given) gets a line for every conversion a user should know of (bit depth).
    """
    path = Path(path)
    problem = not_an_image_file(path)
    if problem is not None:  # never opened: a FIFO would block, a device would read forever
        raise InputError(f"image '{path}' {problem}: check the path")
    return _decode(path, path, notes)


def not_an_image_file(path: str | os.PathLike) -> str | None:
    """Why ``path`` cannot be an image file, in words (``not found``, ``is a directory, not an image``, ``is a
    symbolic link loop``...), or None for a regular file (read through links). Nothing is opened."""
    import errno
    import stat

    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "is a broken symbolic link (what it points to is missing)" if path.is_symlink() else "not found"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is a symbolic link loop"
        return f"cannot be read ({exc.strerror or type(exc).__name__})"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a directory, not an image"
    kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode)
            else "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
    return f"is {kind}, not an image file"


class ImageTooLarge(InputError):
    """An image over a caller's pixel limit (a server's), found from its header before it is decoded."""


@dataclass(frozen=True)
class PixelLimit:
    """The most pixels an image may have, and what raises it (a server's option), for :func:`decode_image_bytes`."""

    pixels: int
    raise_with: str = ""

    def check(self, name: str, width: int, height: int) -> None:
        if width * height > self.pixels:
            raise ImageTooLarge(f"image '{name}' is {width}x{height} ({width * height / 1e6:.1f} megapixels), over the "
                                f"limit of {self.pixels / 1e6:.1f} megapixels: downscale it (SAM works at 1024 pixels on "
                                f"the long side){f', or {self.raise_with}' if self.raise_with else ''}")


def decode_image_bytes(data: bytes, name: str = "upload", notes: list[str] | None = None,
                       limit: PixelLimit | None = None) -> np.ndarray:
    """:func:`read_image_rgb` for an image's bytes (an HTTP upload); ``name`` is what messages call it. ``limit``: an
    image with more pixels is refused from its header (:class:`ImageTooLarge`), before any pixel is decoded."""
    return _decode(_upload(data, name), Path(name), notes, limit)


def check_image_bytes(data: bytes, name: str = "upload", limit: PixelLimit | None = None) -> tuple[int, int]:
    """The (width, height) of an image's bytes from its header, refused as :func:`decode_image_bytes` refuses it (not
    an image, over ``limit``) without decoding a pixel: where the bytes would travel before they are decoded (a Ray
    Serve front sends them to an encoder replica through Ray's object store), what cannot be decoded stays here."""
    return _opened(_upload(data, name), Path(name), None, limit, lambda img: img.size)


def _upload(data: bytes, name: str) -> Any:
    import io

    if not data:
        raise InputError(f"image '{name}' is empty: send the bytes of a JPEG/PNG/WebP file")
    return io.BytesIO(data)


def _decode(source, path: Path, notes: list[str] | None, limit: PixelLimit | None = None) -> np.ndarray:
    return _opened(source, path, notes, limit, lambda img: to_rgb8(img, notes))


def _opened(source, path: Path, notes: list[str] | None, limit: PixelLimit | None, then: Callable[[Any], T]) -> T:
    """``then(image)`` on the image at ``source`` once its header is read and its size checked (:func:`check_pixels`);
    InputError naming the file where it is not an image PIL can read."""
    from PIL import Image, UnidentifiedImageError

    try:
        with _pil_bomb_check_off():
            img = Image.open(source)
        with img:
            check_pixels(path, *img.size, notes, limit)
            return then(img)
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as exc:
        raise InputError(f"image '{path}' cannot be decoded ({exc.__class__.__name__}): use a valid JPEG/PNG/WebP file") from exc


def images_in_folder(folder: str | Path, hint: str) -> list[Path]:
    """The files of ``folder`` with an image suffix, sorted (not recursive); InputError ending in ``hint`` if none."""
    folder = Path(folder)
    found = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if not found:
        raise InputError(f"folder '{folder}' holds no images ({', '.join(IMAGE_SUFFIXES)}): {hint}")
    return found


def expand_image_paths(paths: Iterable[str | Path], what: str = "image path") -> list[Path]:
    """Image files from files and folders (folders: their files with an image suffix, sorted).

    Args:
        paths: files and folders, as given on the command line.
        what: how the not-found message names a path (e.g. "calibration image path").
    """
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            out.extend(images_in_folder(path, "point --images at a folder of photos"))
        elif path.is_file():
            out.append(path)
        else:
            raise InputError(f"{what} '{path}' not found: check --images")
    return out
