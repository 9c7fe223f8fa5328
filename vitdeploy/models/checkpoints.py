"""Safe checkpoint loading: ``torch.load(weights_only=True)`` or safetensors, never a full unpickle."""

from __future__ import annotations

import contextlib
import contextvars
import pickle
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import torch

from vitdeploy.errors import CheckpointError, first_line

#: Keys under which training scripts commonly nest the state dict.
_NESTED_KEYS = ("state_dict", "model", "module")


#: Within :func:`reading_each_checkpoint_once`: (path, size, mtime) -> the state dict read; else None (read each time).
_READ: contextvars.ContextVar[dict | None] = contextvars.ContextVar("vitdeploy_checkpoints_read", default=None)


@contextlib.contextmanager
def reading_each_checkpoint_once() -> Iterator[None]:
    """Inside it, :func:`load_state_dict_file` reads a file once (the same path, size and modification time) and
    gives each later caller its own dict of the same tensors: one ``sam_vit_h_4b8939.pth`` (2.5 GB) or ``sam3.pt``
    (3.4 GB) filling several exported parts is read once. Loading into a module copies the tensors, so no part
    sees another's changes."""
    token = _READ.set({})
    try:
        yield
    finally:
        _READ.reset(token)


def load_state_dict_file(path: str | Path) -> dict[str, torch.Tensor]:
    """Read a state dict from a ``.pth``/``.pt`` (weights only) or ``.safetensors`` file.

    Raises:
        CheckpointError: the file is missing, corrupt, holds pickled code, or holds no tensors.
    """
    from vitdeploy.fileio import require_checkpoint_file

    path = require_checkpoint_file(path)
    read = _READ.get()
    if read is None:
        return _read(path)
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in read:
        read[key] = _read(path)
    return dict(read[key])


def _read(path: Path) -> dict[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        state = _load_safetensors(path)
    else:
        state = _load_torch(path)
    return _unwrap(state, path)


def _load_safetensors(path: Path) -> Mapping[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path), device="cpu")
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"checkpoint '{path}' is not a readable safetensors file ({exc}): re-download or re-save it") from exc


def _load_torch(path: Path) -> object:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if "GLOBAL" not in str(exc):  # not a refused global: bytes that are no pickle at all
            raise CheckpointError(f"checkpoint '{path}' is corrupt or not a PyTorch file (it does not unpickle): "
                                  "re-download it") from exc
        # weights_only=True refuses any global outside the tensor allow-list: the file would run code.
        raise CheckpointError(
            f"checkpoint '{path}' holds pickled Python objects that weights_only loading refuses "
            "(loading it could run code): re-save it as a plain state dict or as .safetensors"
        ) from exc
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError) as exc:
        first = first_line(exc)
        raise CheckpointError(f"checkpoint '{path}' is corrupt or not a PyTorch file ({first}): re-download it") from exc


def _unwrap(obj: object, path: Path) -> dict[str, torch.Tensor]:
    """Return the tensor mapping, descending into a common wrapper key if there is one."""
    for _ in range(3):
        if isinstance(obj, Mapping) and obj and not all(isinstance(v, torch.Tensor) for v in obj.values()):
            nested = next((obj[k] for k in _NESTED_KEYS if isinstance(obj.get(k), Mapping)), None)
            if nested is None:
                break
            obj = nested
    if not isinstance(obj, Mapping) or not obj:
        raise CheckpointError(f"checkpoint '{path}' holds no state dict: expected a mapping of parameter names to tensors")
    tensors = {str(k): v for k, v in obj.items() if isinstance(v, torch.Tensor)}
    if not tensors:
        raise CheckpointError(f"checkpoint '{path}' holds no tensors: expected a mapping of parameter names to tensors")
    return tensors


def without_data_parallel_prefix(state: Mapping[str, torch.Tensor]) -> Mapping[str, torch.Tensor]:
    """``state`` without the ``module.`` prefix DataParallel puts on every key (unchanged otherwise)."""
    if state and all(k.startswith("module.") for k in state):
        return {k[len("module."):]: v for k, v in state.items()}
    return state


def select_prefix(state: Mapping[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """Keep the keys under ``prefix`` (e.g. ``image_encoder.`` of a full SAM checkpoint), stripped.

    A DataParallel ``module.`` prefix is removed first. When no key carries ``prefix`` the state dict is
    taken to be the sub-model's own (an encoder-only checkpoint) and returned unchanged.
    """
    state = without_data_parallel_prefix(state)
    if prefix and any(k.startswith(prefix) for k in state):
        return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    return dict(state)


def check_fits(model: torch.nn.Module, state: Mapping[str, torch.Tensor], what: str, hint: str = "") -> None:
    """Raise a CheckpointError naming the first mismatching keys and shapes, if ``state`` does not fit."""
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    wrong = [
        f"{k} is {list(state[k].shape)} in the checkpoint but {list(expected[k].shape)} in the model"
        for k in expected
        if k in state and tuple(state[k].shape) != tuple(expected[k].shape)
    ]
    if not (missing or unexpected or wrong):
        return
    parts = []
    if wrong:
        parts.append("; ".join(wrong[:3]) + (f" (+{len(wrong) - 3} more)" if len(wrong) > 3 else ""))
    if missing:
        parts.append(f"missing {', '.join(missing[:3])}" + (f" (+{len(missing) - 3} more)" if len(missing) > 3 else ""))
    if unexpected:
        parts.append(
            f"unexpected {', '.join(unexpected[:3])}" + (f" (+{len(unexpected) - 3} more)" if len(unexpected) > 3 else "")
        )
    raise CheckpointError(f"checkpoint does not fit {what}: {' | '.join(parts)}{hint}")
