"""Where a video session keeps the outputs of the frames it tracked: in memory while the next frames read them, then
in a temporary file, so that a session's memory stays flat however long the video.

A tracked frame's output holds its memory features (bfloat16, ``mem_dim`` x 64 x 64 at 1024 px: 512 KB) and its
mask logits (256 x 256 float32: 256 KB), per object. The official predictor keeps every frame's in memory (with
every frame's pixels), which is why its users run out of memory on long videos. Tracking frame ``t`` reads the
memories of the ``num_maskmem - 1`` frames before it (every ``memory_temporal_stride_for_eval``-th) and the object
pointers of the ``max_obj_ptrs_in_encoder - 1`` before it (:mod:`vitdeploy.runtime.apps.sam2.memory_bank`), so a
propagation needs in memory only the outputs of the last :func:`memory_reach` frames. Older ones are moved to the
session's unnamed temporary file (deleted by the system when the session's state is dropped), their small parts (the
object score, the pointer's token) staying in memory; a call that reads one later (a propagation the other way, a
click on a tracked frame, a bank that reaches back) reads it back from the file: the same bytes, so the same masks.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vitdeploy.runtime.processing.array_file import ArrayFile, ArrayRecord

#: The parts of a frame's output that go to the file (the large ones).
SPILLED = ("maskmem_features", "pred_masks")


def memory_reach(settings: Any) -> int:
    """How many of the most recently tracked frames a propagation's next frame may read (its memories and pointers):
    ``max(max_obj_ptrs_in_encoder, memory_temporal_stride_for_eval * num_maskmem)``."""
    return max(int(settings.max_obj_ptrs_in_encoder),
               int(settings.memory_temporal_stride_for_eval) * int(settings.num_maskmem))


class PastOutput(dict):
    """A frame's output whose large parts are in the session's
    :class:`~vitdeploy.runtime.processing.array_file.ArrayFile`: reading one reads it back."""

    def __init__(self, out: dict[str, Any], store: ArrayFile) -> None:
        super().__init__({key: store.append(value) if key in SPILLED and isinstance(value, np.ndarray) else value
                          for key, value in out.items()})
        self._store = store

    def __getitem__(self, key: str) -> Any:
        value = super().__getitem__(key)
        return self._store.read(value) if isinstance(value, ArrayRecord) else value

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default

    def values(self):
        return [self[key] for key in self]

    def items(self):
        return [(key, self[key]) for key in self]


def move_past_output(state: dict[str, Any], outputs: dict[int, Any], frame_idx: int) -> None:
    """Move ``outputs[frame_idx]`` (a tracked frame's output of one object), if there and still in memory, to the
    session's file (made on first use)."""
    out = outputs.get(frame_idx)
    if out is None or isinstance(out, PastOutput):
        return
    store = state.get("past_outputs")
    if store is None:
        store = state["past_outputs"] = ArrayFile("vitdeploy-outputs-")
    outputs[frame_idx] = PastOutput(out, store)


__all__ = ["PastOutput", "SPILLED", "memory_reach", "move_past_output"]
