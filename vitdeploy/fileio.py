"""Atomic file output: an interrupted run never leaves a half-written file under the final name."""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from vitdeploy.errors import CheckpointError, InputError, MissingWeightsError


#: Where vitdeploy keeps what it may make again (OpenVINO's compiled models): a path, or ``none`` for no cache.
CACHE_ENV = "VITDEPLOY_CACHE_DIR"


def user_cache_dir(kind: str, make: bool = True) -> Path | None:
    """``$VITDEPLOY_CACHE_DIR/kind``, else ``$XDG_CACHE_HOME/vitdeploy/kind``, else ``~/.cache/vitdeploy/kind``, made if
    missing (``make``; without it, the path whether or not it exists); None where the cache is turned off
    (``VITDEPLOY_CACHE_DIR=none`` or empty) or cannot be made (a read-only home): the caller then works without it."""
    asked = os.environ.get(CACHE_ENV)
    if asked is not None and asked.strip().lower() in ("", "none", "off", "0"):
        return None
    base = Path(asked) if asked else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vitdeploy"
    folder = base / kind
    if not make:
        return folder
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return folder if os.access(folder, os.W_OK) else None


def check_output_path(path: str | os.PathLike) -> Path:
    """Return ``path`` as a Path after checking that its directory exists and a file can be created there.

    The check creates and removes a probe file (``os.access`` says yes for root on ``/proc`` and on
    read-only mounts), so a long export never ends in an error it could have given at the start.
    """
    if str(path) == "-":
        raise InputError("'-' as an output path would write a file named '-': vitdeploy writes files, not standard "
                         "output; give a file name (./- if a file named '-' is really wanted)")
    out = Path(path)
    parent = out.parent if str(out.parent) else Path(".")
    blocking = next((p for p in [parent, *parent.parents] if p.exists()), None)
    if blocking is not None and not blocking.is_dir():
        raise InputError(f"'{blocking}' is a file, not a directory, so '{out}' cannot be written: choose another -o path")
    if not parent.is_dir():
        raise InputError(f"output directory '{parent}' does not exist: create it or choose another -o path")
    try:
        fd, probe = tempfile.mkstemp(prefix=".vitdeploy-probe-", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise InputError(f"cannot create files in '{parent}' ({exc.strerror or type(exc).__name__}): "
                         "choose another -o path") from exc
    if out.is_dir():
        raise InputError(f"output path '{out}' is a directory: give a file name")
    return out


def claim_outputs(paths, force: bool, inputs=()) -> None:
    """Check, before any work, that every one of ``paths`` (None entries skipped) may be written.

    An existing file is refused unless ``force`` (no-clobber, like ``cp -n``; ``--force`` replaces,
    still atomically), then :func:`check_output_path` checks its folder. An output that is one of
    ``inputs`` is left to the verb, whose message says that instead.
    """
    given = {Path(p).resolve() for p in inputs if p is not None}
    chosen = [Path(p) for p in paths if p is not None]
    for path in chosen:
        if not force and path.exists() and path.resolve() not in given:
            raise InputError(f"'{path}' already exists: pass --force to replace it, or choose another path")
    for path in chosen:
        check_output_path(path)
    if _LOCKING.get():
        for path in chosen:
            lock_output(path)


def claim_folder(path: str | os.PathLike) -> None:
    """Inside a verb (:func:`output_locks`), lock the output folder ``path`` for the verb's lifetime, as a ``-o`` file
    is locked (:func:`lock_output`): a second vitdeploy process writing into it is refused before any work."""
    if _LOCKING.get():
        lock_output(path)


#: Outputs this process is writing -> their lock files (released by :func:`release_output_locks`).
_LOCKS: dict[Path, Path] = {}
#: Whether :func:`claim_outputs` locks: inside :func:`output_locks` (a CLI verb) only. A program calling the Python
#: API owns its own process and outputs; a lock file there would outlive the call.
_LOCKING: contextvars.ContextVar[bool] = contextvars.ContextVar("vitdeploy_output_locking", default=False)


@contextlib.contextmanager
def output_locks() -> Iterator[None]:
    """Lock the outputs claimed inside the block (a verb's lifetime), and release them when it ends."""
    token = _LOCKING.set(True)
    try:
        yield
    finally:
        _LOCKING.reset(token)
        release_output_locks()
LOCK_SUFFIX = ".vitdeploy-lock"


def _lock_holder(lock: Path) -> int | None:
    try:
        return int(lock.read_text().strip() or "0") or None
    except (OSError, ValueError):
        return None


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` is running (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def remove_stale_folders(parent: Path, prefix: str) -> list[Path]:
    """Remove the folders in ``parent`` named ``<prefix><pid>-...`` whose process is gone (a run killed with SIGKILL
    skips every ``finally``: its staging folder stays until the next run there sweeps it); returns them. Folders of
    running processes, this one's included, are kept."""
    import shutil

    removed = []
    for path in Path(parent).glob(prefix + "*"):
        pid = path.name[len(prefix):].split("-", 1)[0]
        if path.is_dir() and pid.isdigit() and int(pid) != os.getpid() and not process_alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def lock_output(path: str | os.PathLike) -> None:
    """Mark ``path`` as being written by this process, or refuse: another live vitdeploy process writes it.

    Two runs with the same ``-o`` (e.g. started by a script twice) would each pass the no-clobber check
    at the start and the later one would silently replace the other's file at the end; the lock file
    ``.NAME.vitdeploy-lock`` (published holding the pid: :func:`_publish_lock`) makes the second one stop
    before any work. A lock whose process is gone (killed with SIGKILL) is taken over.
    """
    out = Path(path)
    key = out.resolve()
    if key in _LOCKS:
        return
    lock = out.parent / f".{out.name}{LOCK_SUFFIX}"
    for _ in range(3):
        if _publish_lock(lock):
            _LOCKS[key] = lock
            return
        holder = _lock_holder(lock)
        if holder is None:  # unreadable or empty: only a lock from an older vitdeploy, or one being written
            try:
                young = time.time() - lock.stat().st_mtime < STALE_EMPTY_LOCK_S
            except FileNotFoundError:
                continue
            if young:
                raise InputError(f"'{out}' is being written by another vitdeploy process (its lock '{lock.name}' is new): "
                                 "wait for it to finish, or choose another output path")
        elif holder != os.getpid() and process_alive(holder):
            raise InputError(f"'{out}' is being written by another vitdeploy process (pid {holder}): wait for it to "
                             "finish, or choose another output path")
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()  # stale: its process is gone
    raise InputError(f"could not lock '{out}' for writing (its lock file '{lock.name}' keeps reappearing): choose another path")


#: An empty lock file older than this is stale (a lock is published with its pid in it; see :func:`_publish_lock`).
STALE_EMPTY_LOCK_S = 30.0


def _publish_lock(lock: Path) -> bool:
    """Create ``lock`` holding this process's pid, atomically (False: it exists).

    The pid is written to a private file first, then hard-linked to the lock's name, so no other process
    ever reads the lock empty (with O_EXCL alone there is a moment between creating the file and writing
    the pid, in which a second process would take it for stale). Where hard links are not supported,
    O_EXCL is used and an empty lock is respected while it is young.
    """
    private = lock.parent / f"{lock.name}.{os.getpid()}.tmp"
    private.write_text(str(os.getpid()))
    try:
        os.link(private, lock)
        return True
    except FileExistsError:
        return False
    except OSError:  # a filesystem without hard links
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as handle:
            handle.write(str(os.getpid()))
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            private.unlink()


def release_output_locks() -> None:
    """Remove this process's output locks (:func:`output_locks` does when the verb ends, however it ends)."""
    for key, lock in list(_LOCKS.items()):
        with contextlib.suppress(OSError):
            if _lock_holder(lock) == os.getpid():
                lock.unlink()
        del _LOCKS[key]



@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it onto ``path`` only if the block succeeds.

    The temporary file lives in the same directory so the final ``os.replace`` is atomic.
    """
    final = check_output_path(path)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=suffix + ".tmp", dir=final.parent or ".")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        apply_default_mode(tmp)
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            tmp.unlink()


def apply_default_mode(path: Path) -> None:
    """Give a staged file the mode a plain ``open(..., 'w')`` would (mkstemp creates it 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


def atomic_write_bytes(path: str | os.PathLike, data: bytes, *, durable: bool = False) -> Path:
    """Write ``data`` to ``path`` atomically and return the final path. ``durable``: the data is fsync'ed before the
    rename and the folder after it, so the file is on the disk before whatever the caller records next."""
    with atomic_output(path) as tmp:
        with open(tmp, "wb") as handle:
            handle.write(data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
    if durable:
        fsync_folder(Path(path).parent)
    return Path(path)


def fsync_folder(folder: str | os.PathLike) -> None:
    """fsync a folder, so the names just created or renamed in it survive a power cut (where the OS allows it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # a filesystem or OS that cannot sync a directory
        pass
    finally:
        os.close(fd)


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def require_nonempty_onnx(path: Path) -> None:
    """InputError for an existing ONNX file of 0 bytes (protobuf would read it as an empty model)."""
    if path.is_file() and path.stat().st_size == 0:
        raise InputError(f"'{path}' is empty (0 bytes), not an ONNX model: export it again ('vitdeploy export')")


def require_onnx_file(path: str | os.PathLike) -> Path:
    """``path`` as a Path when it is an existing, non-empty file, else InputError naming the fix (torch-free, cheap)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"ONNX file '{path}' not found: run 'vitdeploy export' first or check the path")
    require_nonempty_onnx(path)
    return path


def raise_if_weights_missing(path: Path, exc: Exception) -> None:
    """After a runtime (ONNX Runtime, OpenVINO) failed to load ``path``: the clear error when its external-data file is missing.

    Checked only after a failure (it parses the graph, which costs a second on a large inline model);
    any other problem :func:`vitdeploy.fileio.load_onnx_graph` finds leaves ONNX Runtime's message to stand.
    """
    try:
        load_onnx_graph(path)
    except MissingWeightsError as missing:
        raise missing from exc
    except Exception:  # noqa: BLE001 - not ONNX, unreadable, or onnx not installed: ORT's message stands
        return


def require_model_file(path: str | os.PathLike) -> Path:
    """An ``.onnx`` file through :func:`require_onnx_file`, any other model file (an engine) when it exists.

    The verbs call it before importing anything heavy, so a typo answers at once.
    """
    path = Path(path)
    if path.suffix.lower() == ".onnx":
        return require_onnx_file(path)
    if not path.is_file():
        raise InputError(f"model file '{path}' not found: check the path")
    return path


def require_checkpoint_file(path: str | os.PathLike) -> Path:
    """``path`` as a Path when the checkpoint file exists and starts as a checkpoint does, else CheckpointError.

    Torch-free, so a missing, empty or corrupt file is answered before torch is imported. What is read
    is the first bytes only: a PyTorch file is a zip archive (``torch.save`` since 1.6) or a pickle
    (protocol 2 or newer: the legacy format); a ``.safetensors`` file is an 8-byte header length followed
    by its JSON header. Whether the tensors fit the model is checked when they are loaded.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint '{path}' not found: check the --checkpoint path")
    size = path.stat().st_size
    if size == 0:
        raise CheckpointError(f"checkpoint '{path}' is empty (0 bytes): re-download it")
    with open(path, "rb") as f:
        head = f.read(9)
    if path.suffix == ".safetensors":
        header_len = int.from_bytes(head[:8], "little") if len(head) >= 8 else -1
        if not (0 < header_len <= size - 8 and head[8:9] == b"{"):
            raise CheckpointError(f"checkpoint '{path}' is corrupt or not a safetensors file (no safetensors header): "
                                  "re-download or re-save it")
    elif not (head.startswith(b"PK\x03\x04") or (len(head) > 1 and head[0] == 0x80 and 2 <= head[1] <= 5)):  # zip, PROTO 2..5
        raise CheckpointError(f"checkpoint '{path}' is corrupt or not a PyTorch file (neither a zip archive nor a pickle): "
                              "re-download it")
    return path


def load_onnx_graph(path: str | os.PathLike):
    """An ONNX file's ``ModelProto`` without its external weights, with errors for people.

    InputError for a missing file, a file that is not ONNX, or external weights whose file is missing
    (checked here, so a later ``onnx.load_external_data_for_model`` finds them).
    """
    import onnx
    from google.protobuf.message import DecodeError

    path = require_onnx_file(path)
    try:
        model = onnx.load(str(path), load_external_data=False)
    except (DecodeError, OSError, ValueError, RuntimeError) as exc:
        raise InputError(f"'{path}' is not a readable ONNX file ({type(exc).__name__}): give a model written by 'vitdeploy export'") from exc
    bad_text = first_non_text_field(model)
    if bad_text:
        raise InputError(f"'{path}' is damaged: its {bad_text} is not UTF-8 text; export it again")
    missing = [f for f in external_data_files(model, path.parent) if not f.is_file()]
    if missing:
        raise MissingWeightsError(f"'{path.name}' keeps its weights in '{missing[0].name}', which is missing: keep it next to the ONNX file")
    return model


def first_non_text_field(model) -> str | None:
    """The first text field of an ONNX model that is not valid UTF-8, or None.

    Protobuf decodes string fields lazily and hands back ``bytes`` (or raises UnicodeDecodeError) for a
    damaged one, far from the load; the names, op types and metadata every reader uses are checked here once.
    """
    try:
        return next((what for what, value in _text_fields(model) if not isinstance(value, str)), None)
    except UnicodeDecodeError:  # protobuf builds that raise on access instead of returning bytes
        return "text"


def _text_fields(model) -> Iterator[tuple[str, object]]:
    """(what, value) of every text field readers use, read one at a time (the check stops at the first bad one)."""
    graph = model.graph
    yield "producer name", model.producer_name
    yield "producer version", model.producer_version
    for prop in model.metadata_props:
        yield "metadata key", prop.key
        yield "metadata value", prop.value
    for opset in model.opset_import:
        yield "opset domain", opset.domain
    for kind, values in (("input", graph.input), ("output", graph.output), ("value info", graph.value_info)):
        for value in values:
            yield f"{kind} name", value.name
            for dim in value.type.tensor_type.shape.dim:
                yield f"{kind} dimension", dim.dim_param
    for tensor in graph.initializer:
        yield "initializer name", tensor.name
    for node in graph.node:
        yield "node name", node.name
        yield "node op type", node.op_type
        yield "node domain", node.domain
        for name in (*node.input, *node.output):
            yield "node input or output", name


def external_data_files(model, base: Path) -> list[Path]:
    """The files ``model``'s external initializers live in, resolved against ``base`` (the model's folder)."""
    import onnx

    files: list[Path] = []
    for init in model.graph.initializer:
        if init.data_location != onnx.TensorProto.EXTERNAL:
            continue
        location = next((e.value for e in init.external_data if e.key == "location"), None)
        if location and (base / location) not in files:
            files.append(base / location)
    return files


def external_data_problems(model, base: Path) -> list[str]:
    """Weights files cut short: initializers whose offset + length reach past their file's end.

    ``onnx.load(..., load_external_data=False)`` reads none of the weights, so a ``.onnx.data`` cut in half
    looks like a healthy model until a runtime reads it (a missing file is :func:`load_onnx_graph`'s error).
    """
    import onnx

    sizes: dict[str, int] = {}
    short: dict[str, list[str]] = {}
    for init in model.graph.initializer:
        info = {e.key: e.value for e in init.external_data}
        location = info.get("location")
        if init.data_location != onnx.TensorProto.EXTERNAL or not location or not (base / location).is_file():
            continue
        size = sizes.setdefault(location, (base / location).stat().st_size)
        if "length" not in info:  # the rest of the file: never too short
            continue
        try:
            cut = int(info.get("offset", 0)) + int(info["length"]) > size
        except ValueError:  # an offset or length that is no number cannot be read either
            cut = True
        if cut:
            short.setdefault(location, []).append(init.name)
    return [f"weights file '{location}' is cut short ({sizes[location]} bytes; {len(names)} weight(s) reach past its end), "
            f"e.g. '{names[0]}'" for location, names in short.items()]

