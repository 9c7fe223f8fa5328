"""A graph's real inputs, recorded while an application runs it, saved to calibrate it (``vitdeploy calibrate --feeds``).

Images are the calibration data of an image encoder; a graph deeper in an application (SAM 2's memory attention, its
decoder) takes what the graphs before it made, which only a real run gives. :class:`InputRecorder` keeps up to
``limit`` input sets of one graph, spread evenly over the calls however many there are (every call until the limit,
then every other one, then every fourth, ...).

The file is one ``.npz``: array ``NNNN/<input name>`` is that input of sample NNNN, and ``__meta__`` a JSON object (the
graph's file, family and variant, how many calls were seen). No pickles: ``np.load(..., allow_pickle=False)`` reads it.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from vitdeploy.errors import InputError

META_KEY = "__meta__"


class InputRecorder:
    """Keeps up to ``limit`` of the input sets it is called with, evenly spread over the calls."""

    def __init__(self, limit: int = 16) -> None:
        if limit < 2:
            raise InputError(f"record at least 2 input sets (one to calibrate on, one to judge by), not {limit}")
        self.limit = limit
        self.samples: list[dict[str, np.ndarray]] = []
        self.calls = 0
        self._stride = 1

    def __call__(self, feeds: dict[str, np.ndarray]) -> None:
        if self.calls % self._stride == 0:
            self.samples.append({name: np.array(value, copy=True) for name, value in feeds.items()})
            if len(self.samples) > self.limit:  # thin to every other one; take every other call from now on
                self.samples = self.samples[::2]
                self._stride *= 2
        self.calls += 1

    def save(self, path: str | os.PathLike, metadata: dict[str, Any] | None = None) -> Path:
        """Write the samples (atomically) with ``metadata`` and the call count."""
        if not self.samples:
            raise InputError(f"no inputs were recorded for '{path}': the graph was never run")
        return save_recorded_inputs(path, self.samples, {**(metadata or {}), "calls_seen": self.calls})


class RecordsInputs:
    """``record_inputs(graph)`` for an application that runs named graphs (SAM 2's video predictor, SAM 3's image
    model): ``_recorded(graph, feeds)`` before each run keeps the feeds a recorder asked for. ``RECORDABLE`` names
    the graphs, ``RUNS`` says whose they are in an error."""

    RECORDABLE: tuple[str, ...] = ()
    RUNS = "this application"

    def record_inputs(self, graph: str, limit: int = 16) -> InputRecorder:
        """From now on keep up to ``limit`` of ``graph``'s input sets, evenly spread over its calls: real inputs to
        calibrate that graph on (``recorder.save(path)``, then ``vitdeploy calibrate --feeds path``)."""
        if graph not in self.RECORDABLE:
            raise InputError(f"no graph '{graph}' to record: {self.RUNS} runs {', '.join(self.RECORDABLE)}")
        recorder = InputRecorder(limit)
        self.__dict__.setdefault("_recorders", {})[graph] = recorder
        return recorder

    def _recorded(self, graph: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        recorder = self.__dict__.get("_recorders", {}).get(graph)
        if recorder is not None:
            recorder(feeds)
        return feeds


def save_recorded_inputs(path: str | os.PathLike, samples: list[dict[str, np.ndarray]], metadata: dict[str, Any]) -> Path:
    from vitdeploy.fileio import atomic_write_bytes

    arrays = {f"{k:04d}/{name}": value for k, sample in enumerate(samples) for name, value in sample.items()}
    arrays[META_KEY] = np.frombuffer(json.dumps({**metadata, "samples": len(samples)}).encode(), dtype=np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return atomic_write_bytes(path, buffer.getvalue())


def load_recorded_inputs(path: str | os.PathLike) -> tuple[list[dict[str, np.ndarray]], dict[str, Any]]:
    """(input sets in recording order, metadata) of a file :func:`save_recorded_inputs` wrote."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"no recorded inputs at '{path}': record them with 'vitdeploy track ... --record-inputs "
                         "GRAPH:FILE' (SAM 2 video), 'vitdeploy segment-concept ... --record-inputs GRAPH:FILE' (SAM 3) or "
                         "'vitdeploy predict ... --record-inputs FILE' (a prompt decoder)")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
    except (OSError, ValueError, EOFError) as exc:
        raise InputError(f"'{path}' is not a recorded-inputs file ({type(exc).__name__}: {str(exc)[:100]}): record it "
                         "again") from exc
    try:
        meta = json.loads(bytes(arrays.pop(META_KEY)).decode()) if META_KEY in arrays else {}
    except (UnicodeDecodeError, json.JSONDecodeError):
        meta = None
    if not isinstance(meta, dict):
        raise InputError(f"'{path}' has a damaged {META_KEY} entry: it is not a recorded-inputs file; record it again")
    samples: dict[int, dict[str, np.ndarray]] = {}
    for key, value in arrays.items():
        index, _, name = key.partition("/")
        if not index.isdigit() or not name:
            raise InputError(f"'{path}' holds array '{key}', not NNNN/<input name>: it is not a recorded-inputs file")
        samples.setdefault(int(index), {})[name] = value
    if not samples:
        raise InputError(f"'{path}' holds no recorded inputs")
    return [samples[k] for k in sorted(samples)], meta


__all__ = ["RecordsInputs", "InputRecorder", "load_recorded_inputs", "save_recorded_inputs"]
