"""TensorRT's log during a build or load: errors kept for the error message, warnings shown once, all to a file.

TensorRT reports why a parse, build or deserialization failed only through its logger, so vitdeploy
gives it a logger of its own (a ``trt.ILogger`` subclass, as the TensorRT Python API documents for
custom loggers) instead of Polygraphy's global one: the messages then end up in vitdeploy's error.
The log file is written as messages arrive (not atomically): it is a diagnostic, most useful exactly
when a build dies half-way.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import IO, Any

from vitdeploy.engine.layers import LAYER_LIST_PREFIX

#: TensorRT severity name -> one-letter level used in the log file.
LEVELS = {"INTERNAL_ERROR": "E", "ERROR": "E", "WARNING": "W", "INFO": "I", "VERBOSE": "V"}


class BuildLog:
    """Collects TensorRT messages: errors and (distinct) warnings in memory, everything in ``log_file``."""

    def __init__(self, log_file: str | os.PathLike | None = None, echo: Callable[[str], None] | None = None):
        self.errors: list[str] = []
        self.warnings: list[str] = []
        #: The builder's ``Layers:`` message (DETAILED profiling verbosity): :mod:`vitdeploy.engine.layers` reads it.
        self.layer_list: str | None = None
        self.echo = echo
        self.path = Path(log_file) if log_file else None
        self._file: IO[str] | None = open(self.path, "w", encoding="utf-8") if self.path else None

    @property
    def verbose(self) -> bool:
        """Whether INFO/VERBOSE messages are wanted (only when writing a log file)."""
        return self._file is not None

    def record(self, level: str, msg: str) -> None:
        """Take one message at level ``E``, ``W``, ``I`` or ``V``."""
        msg = str(msg).rstrip()
        if self._file is not None:
            try:
                self._file.write(f"[{level}] {msg}\n")
            except OSError as exc:  # disk full: keep building, say so once
                self.warnings.append(f"log file '{self.path}' could not be written ({exc}); logging stopped")
                self._file = None
        if level == "E":
            self.errors.append(msg)
        elif level == "W" and msg not in self.warnings:
            self.warnings.append(msg)
            if self.echo:
                self.echo(f"TensorRT warning: {msg}")

    def note(self, msg: str) -> None:
        """A vitdeploy line in the log file (build settings, timings)."""
        if self._file is not None:
            self._file.write(f"[vitdeploy] {msg}\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> BuildLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_trt_logger(trt: ModuleType, log: BuildLog) -> Any:
    """A ``trt.ILogger`` that forwards to ``log``; keep a reference for as long as TensorRT objects live."""
    severity = trt.ILogger.Severity
    levels = {getattr(severity, name): letter for name, letter in LEVELS.items()}
    quiet = {"I", "V"}

    class _VitdeployTrtLogger(trt.ILogger):
        def __init__(self) -> None:
            trt.ILogger.__init__(self)

        def log(self, sev: Any, msg: str) -> None:
            level = levels.get(sev, "V")
            if level == "V" and msg.startswith(LAYER_LIST_PREFIX):
                log.layer_list = msg
            if level in quiet and not log.verbose:
                return
            log.record(level, msg)

    return _VitdeployTrtLogger()
