"""Session fixtures made once per test run, not once per pytest-xdist worker.

``scripts/test.sh`` runs the suite in workers (``pytest -n``), and a session fixture is per process: each worker that
takes a file using it would export the same models again (the SAM 2 video graphs: about 25 s each time on 2 cores).
:func:`once_per_run` makes them in a folder all workers of the run share (the parent of each worker's base temp,
as pytest-xdist's documentation shows), under a file lock: the first worker makes them, the others read what it
wrote. Outside xdist the folder is the session's own. A run that fails half-way leaves no record, so the next worker
makes the whole set again and fails in its own words.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

RECORD = "made.json"


def once_per_run(tmp_path_factory: pytest.TempPathFactory, name: str,
                 make: Callable[[Path], dict[str, Path]]) -> dict[str, Path]:
    """``make(folder)``'s files (name -> path inside ``folder``), made once for all workers of this run."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder, record = shared / name, shared / name / RECORD
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if record.is_file():
            return {key: Path(value) for key, value in json.loads(record.read_text()).items()}
        shutil.rmtree(folder, ignore_errors=True)  # what a failed attempt left
        folder.mkdir(parents=True)
        made = make(folder)
        record.write_text(json.dumps({key: str(value) for key, value in made.items()}))
        return made


__all__ = ["once_per_run"]
