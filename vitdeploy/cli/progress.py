"""Progress of long stages for people: a bar with an ETA on a terminal, plain lines in a log, and stage times.

``StageProgress`` is the ``progress(stage, done, total)`` callback the library's long calls take
(``calibrate_onnx``, ``validate``): on a terminal (stderr is a TTY) one line per stage is redrawn
with ``\\r``: ``  measuring activations [#######-------] 6/12  50%  2:41 elapsed, ETA 2:40``; in a log
(not a TTY, where ``\\r`` would make one huge line) a plain line is written when a stage ends and,
while it runs, at most every :data:`LOG_EVERY_S` seconds. When a stage ends its time is kept, and :meth:`StageProgress.times` gives
them for the closing summary.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

BAR_WIDTH = 24
#: In a log, the shortest time between two lines of one running stage.
LOG_EVERY_S = 10.0


def format_seconds(seconds: float) -> str:
    """``42.1 s``, ``3:07``, ``1:02:03``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class StageProgress:
    """Callable ``(stage, done, total)``; see the module docstring."""

    def __init__(self, stream: TextIO | None = None, tty: bool | None = None, clock=time.monotonic):
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.clock = clock
        self._stage: str | None = None
        self._start = 0.0
        self._last_line = 0.0
        self._times: dict[str, float] = {}

    def __call__(self, stage: str, done: int, total: int) -> None:
        now = self.clock()
        if stage != self._stage:
            self._finish(now)
            self._stage, self._start, self._last_line = stage, now, now
        elapsed = now - self._start
        fraction = done / total if total else 1.0
        eta = elapsed / fraction * (1 - fraction) if 0 < fraction < 1 else 0.0
        timing = f"{format_seconds(elapsed)} elapsed" + (f", ETA {format_seconds(eta)}" if 0 < fraction < 1 else "")
        if self.tty:
            filled = int(round(BAR_WIDTH * fraction))
            bar = "#" * filled + "-" * (BAR_WIDTH - filled)
            self.stream.write(f"\r  {stage} [{bar}] {done}/{total} {fraction:4.0%}  {timing}\033[K")
            if done >= total:
                self.stream.write("\n")
        else:
            if done >= total or now - self._last_line >= LOG_EVERY_S:
                self._last_line = now
                self.stream.write(f"  {stage}: {done}/{total} ({fraction:.0%}), {timing}\n")
        self.stream.flush()
        if done >= total:
            self._finish(now)

    def _finish(self, now: float) -> None:
        if self._stage is not None:  # a stage that runs again (one per attempt) adds up
            self._times[self._stage] = self._times.get(self._stage, 0.0) + now - self._start
        self._stage = None

    def times(self) -> dict[str, float]:
        """Seconds per finished stage, in the order they ran."""
        return dict(self._times)


__all__ = ["StageProgress", "format_seconds"]
