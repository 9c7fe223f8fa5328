"""A video's frames as SAM 2's video predictor reads them, in NumPy (``sam2.utils.misc.load_video_frames``).

* **A folder of frames** named by their index (``00000.jpg``, ``00001.jpg``, ...), sorted by that number, as the
  official loader takes them; PNG frames are taken too (the official loader reads JPEG only). Each frame is resized
  to the model's square input with PIL's default filter (``Image.resize``: bicubic), divided by 255 in float64, then
  normalized in float32 with the official ImageNet mean and std: the official arithmetic, so the model input is
  bit-identical.
* **A video file** (``.mp4``, ``.mov``, ``.avi``, ``.mkv``, ``.webm``) is decoded with OpenCV (``pip install
  opencv-python-headless``) and each frame resized like a JPEG frame. The official loader decodes with decord, which
  resizes inside FFmpeg: the same meaning, not the same pixels.

Every frame is decoded when the video is opened (as the official loader does by default), so an unreadable frame is
reported before any tracking; but no frame is kept in memory, so a long video takes the memory of one frame, not of
all of them (the official loader holds every frame as float32: 12 MB a frame at 1024 px). A frame of a folder is read
from its file again when the model asks for it (the same decode, the same pixels); a video file's frames, resized and
as decoded, go to an unnamed temporary file (deleted when the frames are) and are read back from there. The float32
input of a frame is made when the model asks for it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from vitdeploy.errors import InputError, MissingDependencyError
from vitdeploy.runtime.processing.array_file import ArrayFile, ArrayRecord

#: Frame files the folder reader takes (the official one takes the JPEG ones).
FRAME_SUFFIXES = (".jpg", ".jpeg", ".png")
VIDEO_SUFFIXES = (".mp4", ".mov", ".avi", ".mkv", ".webm")
#: The official loader's normalization (``load_video_frames``'s ``img_mean``/``img_std``, on [0, 1] pixels).
IMG_MEAN = (0.485, 0.456, 0.406)
IMG_STD = (0.229, 0.224, 0.225)
EXTRACT_HINT = "ffmpeg -i VIDEO -q:v 2 -start_number 0 FOLDER/'%05d.jpg'"


def frame_files(folder: Path) -> list[Path]:
    """The frame files of ``folder`` in frame order (their names are their indices), or an InputError saying why not."""
    files = [p for p in folder.iterdir() if p.suffix.lower() in FRAME_SUFFIXES and p.is_file()]
    if not files:
        raise InputError(f"no frames in '{folder}': it needs JPEG (or PNG) frames named by their index, as "
                         f"{EXTRACT_HINT} writes them")
    bad = [p.name for p in files if not p.stem.isdigit()]
    if bad:
        raise InputError(f"frame file(s) {bad[:3]} in '{folder}' are not named by their frame index (00000.jpg, "
                         f"00001.jpg, ...): SAM 2 orders frames by that number; extract them with {EXTRACT_HINT}")
    files.sort(key=lambda p: int(p.stem))
    numbers = [int(p.stem) for p in files]
    if len(set(numbers)) != len(numbers):
        twice = sorted({n for n in numbers if numbers.count(n) > 1})[:3]
        raise InputError(f"'{folder}' has two frames with the same index {twice} (e.g. 00003.jpg and 3.png): keep one")
    return files


class VideoFrames:
    """The frames of one video, resized for an ``input_size`` x ``input_size`` model (see the module docstring).

    ``len(frames)`` frames of ``height`` x ``width`` pixels (the original size); ``frames.model_input(i)`` is frame
    ``i`` as the image encoder takes it, (1, 3, S, S) float32; ``frames.original(i)`` is frame ``i`` as decoded
    (HxWx3 uint8 RGB), read again from its file for a folder of frames.
    """

    def __init__(self, source: str | os.PathLike, input_size: int,
                 progress: Callable[[int, int], None] | None = None) -> None:
        path = Path(source)
        self.source = path
        self.input_size = int(input_size)
        self._mean = np.asarray(IMG_MEAN, np.float32).reshape(3, 1, 1)
        self._std = np.asarray(IMG_STD, np.float32).reshape(3, 1, 1)
        #: Frames per second of a video file (None for a folder of frames).
        self.fps: float | None = None
        if path.is_dir():
            self.files: list[Path] | None = frame_files(path)
            count = len(self.files)
            frames = (_read_frame(f, i) for i, f in enumerate(self.files))
        elif path.is_file() and path.suffix.lower() in VIDEO_SUFFIXES:
            self.files = None
            frames, count, self.fps = _decode_video(path)
        elif path.exists():
            raise InputError(f"'{path}' is neither a folder of frames nor a video file ({', '.join(VIDEO_SUFFIXES)}): "
                             f"give a folder of JPEG frames ({EXTRACT_HINT}) or a video")
        else:
            raise InputError(f"no video or frame folder at '{path}'")
        #: A video file's frames out of memory, and each frame's (resized, as decoded) records there (a folder: None).
        self._spill: ArrayFile | None = None if self.files is not None else ArrayFile("vitdeploy-frames-")
        self._records: list[tuple[ArrayRecord, ArrayRecord]] = []
        self._count = 0
        self.height = self.width = 0
        for index, frame in enumerate(frames):
            height, width = frame.shape[:2]
            if index == 0:
                self.height, self.width = height, width
            elif (height, width) != (self.height, self.width):
                raise InputError(f"frame {index} is {width}x{height} but frame 0 is {self.width}x{self.height}: every frame "
                                 "of a video must have one size")
            if self._spill is not None:
                self._records.append((self._spill.append(self.resize(frame)), self._spill.append(frame)))
            self._count += 1
            if progress is not None:
                progress(index + 1, count)
        if not self._count:
            raise InputError(f"'{path}' holds no frames")
        #: Each frame's number as the user sees it: the number in a frame file's name, a video frame's position.
        self.numbers: list[int] = [int(f.stem) for f in self.files] if self.files is not None else list(range(len(self)))
        #: Each frame's name for its outputs (``00005`` for ``00005.jpg``; ``00005`` for a video's sixth frame).
        self.names: list[str] = [f.stem for f in self.files] if self.files is not None else [f"{i:05d}" for i in self.numbers]

    def missing_numbers(self) -> list[int]:
        """Frame numbers absent between the first and the last frame of a folder (a gap: ``00004.jpg`` missing)."""
        present = set(self.numbers)
        return [n for n in range(self.numbers[0], self.numbers[-1] + 1) if n not in present]

    def index_of(self, number: int, what: str) -> int:
        """The position of the frame numbered ``number`` (what the predictor indexes by); InputError naming the
        frames there are where there is no such frame."""
        try:
            return self.numbers.index(number)
        except ValueError:
            raise InputError(f"{what}: there is no frame {number} in '{self.source.name}' (it has frames "
                             f"{describe_numbers(self.numbers)}; FRAME is the number in a frame's name)") from None

    def resize(self, frame: np.ndarray) -> np.ndarray:
        """HxWx3 uint8 -> S x S x 3 uint8, PIL's default resize (the official ``img_pil.resize((S, S))``)."""
        from PIL import Image

        return np.asarray(Image.fromarray(frame).resize((self.input_size, self.input_size)))

    def __len__(self) -> int:
        return self._count

    def resized(self, index: int) -> np.ndarray:
        """Frame ``index`` resized for the model, S x S x 3 uint8."""
        if self._spill is not None:
            return self._spill.read(self._records[index][0])
        return self.resize(_read_frame(self.files[index], index))

    def model_input(self, index: int) -> np.ndarray:
        """Frame ``index`` as the official loader hands it to the model: (1, 3, S, S) float32."""
        x = (self.resized(index) / 255.0).astype(np.float32).transpose(2, 0, 1)  # float64 division, float32 storage
        return ((x - self._mean) / self._std)[None]

    def original(self, index: int) -> np.ndarray:
        """Frame ``index`` at its own size, HxWx3 uint8 RGB."""
        if self._spill is not None:
            return self._spill.read(self._records[index][1])
        return _read_frame(self.files[index], index)


def describe_numbers(numbers: list[int]) -> str:
    """``0-3, 5-11``: sorted frame numbers as ranges."""
    runs: list[list[int]] = []
    for n in sorted(numbers):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs)


def _read_frame(path: Path, index: int) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            return np.asarray(image.convert("RGB"))
    except Image.DecompressionBombError as exc:  # as read_image_rgb refuses it for the other verbs
        raise InputError(f"frame {index} ('{path.name}') is larger than Pillow's decompression-bomb limit "
                         f"({str(exc)[:100]}): a frame that large is not a video frame; extract the frames again "
                         f"({EXTRACT_HINT})") from exc
    except (OSError, UnidentifiedImageError, ValueError) as exc:  # truncated, not an image, unreadable
        raise InputError(f"frame {index} ('{path.name}') cannot be read ({type(exc).__name__}: {str(exc)[:120]}): replace "
                         f"it or extract the frames again ({EXTRACT_HINT})") from exc


def _decode_video(path: Path):
    try:
        import cv2
    except ImportError as exc:
        raise MissingDependencyError("opencv-python-headless", f"reading the video file '{path.name}'",
                                     "pip install opencv-python-headless, or give a folder of JPEG frames "
                                     f"({EXTRACT_HINT})") from exc
    capture = cv2.VideoCapture(str(path))
    if not capture.isOpened():
        raise InputError(f"OpenCV cannot open the video '{path}': check the file, or extract its frames ({EXTRACT_HINT}) "
                         "and give the folder")
    count = int(capture.get(cv2.CAP_PROP_FRAME_COUNT) or 0)
    fps = float(capture.get(cv2.CAP_PROP_FPS) or 0.0) or None

    def frames():
        try:
            while True:
                ok, bgr = capture.read()
                if not ok:
                    return
                yield np.ascontiguousarray(bgr[:, :, ::-1])
        finally:
            capture.release()

    return frames(), count, fps


__all__ = ["FRAME_SUFFIXES", "IMG_MEAN", "IMG_STD", "VIDEO_SUFFIXES", "VideoFrames", "frame_files"]
