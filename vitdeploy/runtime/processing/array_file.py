"""Arrays kept out of memory: an unnamed temporary file that arrays are appended to and read back from, byte for
byte. The system removes the file when it is closed (when its owner is dropped) or when the process ends. Used where
a long video would otherwise hold something per frame in memory: its frames
(:mod:`vitdeploy.runtime.processing.video_frames`) and its past frame outputs
(:mod:`vitdeploy.runtime.apps.sam2.past_outputs`).
"""

from __future__ import annotations

import tempfile
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class ArrayRecord:
    """Where one array is in an :class:`ArrayFile`, and what it was."""

    offset: int
    dtype: Any
    shape: tuple[int, ...]


class ArrayFile:
    """An append-only file of arrays; safe to append to and read from several threads (a server's sessions)."""

    def __init__(self, prefix: str) -> None:
        self._file = tempfile.TemporaryFile(prefix=prefix)
        self._lock = threading.Lock()
        self._end = 0

    def append(self, array: np.ndarray) -> ArrayRecord:
        data = np.ascontiguousarray(array)
        with self._lock:
            self._file.seek(self._end)
            self._file.write(data.tobytes())
            record = ArrayRecord(self._end, data.dtype, data.shape)
            self._end += data.nbytes
        return record

    def read(self, record: ArrayRecord) -> np.ndarray:
        size = int(np.prod(record.shape)) * np.dtype(record.dtype).itemsize
        with self._lock:
            self._file.seek(record.offset)
            data = self._file.read(size)
        return np.frombuffer(data, record.dtype).reshape(record.shape)


__all__ = ["ArrayFile", "ArrayRecord"]
