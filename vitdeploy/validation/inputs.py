"""Model inputs from image files (through the model's own preprocessing, read from its metadata) or saved arrays."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from vitdeploy.runtime.processing.images import expand_image_paths, read_image_rgb
from vitdeploy.runtime.processing.input_sets import InputSet


def image_input_sets(paths: Iterable[str | Path], preprocess: Callable[[np.ndarray], np.ndarray],
                     input_name: str) -> list[InputSet]:
    """One InputSet per image file (folders expanded), through ``preprocess`` (the model family's own)."""
    return [InputSet(f"image:{f.name}", {input_name: preprocess(read_image_rgb(f))}, str(f))
            for f in expand_image_paths(paths)]


def saved_input_sets(paths: Iterable[str | Path], input_shapes: dict[str, list[Any]]) -> list[InputSet]:
    """Input sets saved to files (``validate --load-inputs``), checked against the model's inputs.

    ``.npz``: one set, arrays named by input. ``.json``: Polygraphy's ``--save-inputs`` format (a list
    of {input name: array} dicts, read with polygraphy's own JSON loader), one set per entry.
    """
    from vitdeploy.errors import InputError

    sets: list[InputSet] = []
    for path in map(Path, paths):
        if not path.is_file():
            raise InputError(f"input file '{path}' not found: check the --load-inputs path")
        if path.suffix.lower() == ".npz":
            try:
                with np.load(path, allow_pickle=False) as data:
                    feeds_list = [{name: np.array(data[name]) for name in data.files}]
            except (OSError, ValueError) as exc:
                raise InputError(f"'{path}' is not a readable .npz of arrays ({type(exc).__name__}): save it with "
                                 "numpy.savez(path, **{input_name: array})") from exc
        elif path.suffix.lower() == ".json":
            try:
                from polygraphy.json import load_json
            except ImportError as exc:
                raise InputError("reading Polygraphy's JSON inputs needs polygraphy: pip install polygraphy, or save "
                                 "them as .npz") from exc
            try:
                loaded = load_json(str(path), description="input data")
            except Exception as exc:  # noqa: BLE001 - polygraphy raises its own types for bad files
                raise InputError(f"'{path}' is not Polygraphy input data ({type(exc).__name__}): write it with "
                                 "'polygraphy run ... --save-inputs'") from exc
            feeds_list = [dict(item) for item in (loaded if isinstance(loaded, list) else [loaded])]
        else:
            raise InputError(f"'{path}': --load-inputs takes .npz (numpy.savez) or .json (polygraphy --save-inputs) files")
        for k, feeds in enumerate(feeds_list):
            label = path.name if len(feeds_list) == 1 else f"{path.name}[{k}]"
            missing = sorted(set(input_shapes) - set(feeds))
            extra = sorted(set(feeds) - set(input_shapes))
            if missing or extra:
                raise InputError(f"'{path.name}' ({label}) holds {sorted(feeds)}, the model takes {sorted(input_shapes)}")
            for name, dims in input_shapes.items():
                shape = list(np.shape(feeds[name]))
                if len(shape) != len(dims) or any(isinstance(d, int) and d > 0 and d != s for d, s in zip(dims, shape)):
                    raise InputError(f"'{path.name}' ({label}): input '{name}' has shape {shape}, the model takes {dims}")
                feeds[name] = np.ascontiguousarray(feeds[name], dtype=np.float32) if np.issubdtype(
                    np.asarray(feeds[name]).dtype, np.floating) else np.ascontiguousarray(feeds[name])
            sets.append(InputSet(label, feeds, f"loaded from {path}"))
    return sets
