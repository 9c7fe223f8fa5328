"""The output folder of a dataset job (``vitdeploy embed``, ``segment-all --images``): shards, manifest, errors.

A job over many images writes, into one folder::

    job.json           what the job is: its kind, the model files' SHA-256, the deployment, the options
    manifest.jsonl     one line per finished shard: its file, that file's SHA-256, the images done in it
                       (path, SHA-256, size) and the images that failed in it (path, reason)
    errors.jsonl       the images not done because they failed, with the reason (rewritten at the end of a run)
    embeddings-00000.npz / .parquet, masks-00000.jsonl, ...   the shards

The manifest is the job's record: an image is done when a manifest line names it and the shard file the line
names is there with the SHA-256 the line records (checked when the folder is opened again: a deleted or damaged
shard is done again, and said so). A shard file is written atomically (its data and its folder fsync'ed) before
its line is appended (flushed and fsync'ed), so a run stopped at any moment (Ctrl-C, a killed process, a lost
machine, a power cut) leaves a manifest whose every line names a complete shard; a line torn by the stop is dropped
when the folder is opened again. A verb holds the folder's lock while it runs: a second job on the same folder is
refused before any work. A folder whose job did no work yet (no manifest line) is taken by the next job whatever
it is, so a run that failed before its first shard never blocks the corrected one. The next run skips the
images the manifest names and retries the rest, failed ones included. When a run finishes, the manifest
is rewritten sorted by shard, so the same job gives the same manifest however its shards were scheduled
(in one process or on Ray workers).

Shard files are byte-deterministic for the same arrays (NPZ entries carry a fixed timestamp), so equal
outputs have equal SHA-256 in the manifest.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vitdeploy.errors import InputError

FORMAT = "vitdeploy-dataset-job/1"
JOB_FILE = "job.json"
MANIFEST_FILE = "manifest.jsonl"
ERRORS_FILE = "errors.jsonl"
#: NPZ members get this timestamp (zip's earliest), so a shard's bytes depend on its arrays only.
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


@dataclass
class ShardResult:
    """What a worker made of one shard: the manifest line (``entry``) and the shard file's bytes (None: no image done)."""

    entry: dict[str, Any]
    payload: bytes | None = None

    @property
    def done(self) -> list[str]:
        return [image["image"] for image in self.entry["images"]]

    @property
    def failed(self) -> list[dict[str, str]]:
        return list(self.entry["errors"])


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """``np.savez`` with fixed member timestamps: the same arrays give the same bytes."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, array in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=ZIP_EPOCH)
            with archive.open(info, "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)
    return buffer.getvalue()


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


@dataclass
class DatasetStore:
    """One job's output folder (see the module docstring). Open with :meth:`open`."""

    folder: Path
    header: dict[str, Any]
    entries: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: What resuming found wrong with shards the manifest names (their images are done again), one line each.
    redone: list[str] = field(default_factory=list)

    @classmethod
    def open(cls, folder: str | os.PathLike, header: dict[str, Any]) -> DatasetStore:
        """Start a job in ``folder`` (created), or resume the one there: refused when that one is another job.

        ``header`` says what the job is (kind, model, deployment, options, shard size); a folder holding a job whose
        header differs is refused with what differs, so two jobs never mix in one manifest. The folder is claimed
        first (:func:`vitdeploy.fileio.claim_folder`: a lock held while the verb runs; a second writer is refused
        in one line, a dead one's lock taken over), so two runs of even the same job never write it at once.
        """
        from vitdeploy.fileio import claim_folder

        folder = Path(folder)
        if folder.exists() and not folder.is_dir():
            raise InputError(f"--out-dir '{folder}' is a file: give a folder (it is created)")
        folder.parent.mkdir(parents=True, exist_ok=True)
        claim_folder(folder)  # before the folder is made: a refused second job leaves nothing behind
        folder.mkdir(exist_ok=True)
        header = {"format": FORMAT, **header}
        job_file = folder / JOB_FILE
        if job_file.is_file():
            for stale in folder.glob(".*.tmp"):  # a killed run's half-written file (the folder is ours: claimed above)
                stale.unlink(missing_ok=True)
        idle = not (folder / MANIFEST_FILE).is_file() or (folder / MANIFEST_FILE).stat().st_size == 0
        if job_file.is_file() and idle and set(p.name for p in folder.iterdir()) <= {JOB_FILE, MANIFEST_FILE, ERRORS_FILE}:
            for name in (JOB_FILE, MANIFEST_FILE, ERRORS_FILE):  # a job that did no work: nothing of it to keep
                (folder / name).unlink(missing_ok=True)
        if job_file.is_file():
            try:
                saved = json.loads(job_file.read_text())
            except (OSError, json.JSONDecodeError) as exc:
                raise InputError(f"'{job_file}' is unreadable ({type(exc).__name__}): give a new --out-dir") from exc
            different = [key for key in sorted(set(saved) | set(header)) if saved.get(key) != header.get(key)]
            if different:
                shown = "; ".join(f"{key}: {_short(saved.get(key))} there, {_short(header.get(key))} now" for key in different)
                raise InputError(f"--out-dir '{folder}' holds another job ({shown}): give a new --out-dir, "
                                 "or run the job it holds to resume it")
        elif any(folder.iterdir()):
            stray = sorted(p.name for p in folder.iterdir())[:3]
            raise InputError(f"--out-dir '{folder}' is not empty and holds no vitdeploy job ({', '.join(stray)}, ...): "
                             "give a new or empty folder")
        else:
            from vitdeploy.fileio import atomic_write_bytes

            atomic_write_bytes(job_file, (json.dumps(header, indent=1, sort_keys=True) + "\n").encode())
        store = cls(folder, header)
        store._read_manifest()
        store._verify_shards()
        return store

    # --- the manifest ------------------------------------------------------------------------------

    @property
    def manifest_path(self) -> Path:
        return self.folder / MANIFEST_FILE

    def _read_manifest(self) -> None:
        path = self.manifest_path
        if not path.is_file():
            return
        data = path.read_bytes()
        good = data[: data.rfind(b"\n") + 1]  # a line without its newline was torn by a stop: dropped
        if len(good) != len(data):
            with open(path, "r+b") as handle:
                handle.truncate(len(good))
        try:
            text = good.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"'{path}' is not UTF-8 text (byte {exc.start} of it): the folder was edited or damaged; "
                             "give a new --out-dir") from None
        for number, line in enumerate(text.splitlines(), 1):
            try:
                entry = json.loads(line)
                index = int(entry["index"])
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise InputError(f"'{path}' line {number} is not a manifest entry ({type(exc).__name__}): "
                                 "the folder was edited; give a new --out-dir") from exc
            self.entries[index] = entry

    def _verify_shards(self) -> None:
        """Forget the manifest lines whose shard file is missing or holds other bytes than the line's SHA-256 (their
        images are done again); :attr:`redone` says which and why. Costs one read of every shard file."""
        from vitdeploy.fileio import sha256_file

        for index in sorted(self.entries):
            entry = self.entries[index]
            if not entry.get("shard"):
                continue
            path = self.folder / entry["shard"]
            if not path.is_file():
                problem = "is missing"
            elif sha256_file(path) != entry.get("sha256"):
                problem = "does not hold what the manifest recorded (SHA-256 differs)"
            else:
                continue
            del self.entries[index]
            if path.is_file():  # its images are written again in a new shard: the damaged one does not stay beside it
                path.unlink()
            self.redone.append(f"shard '{entry['shard']}' {problem}: its {len(entry['images'])} image(s) are done again")

    def done(self) -> set[str]:
        """The images a manifest line names as done."""
        return {image["image"] for entry in self.entries.values() for image in entry["images"]}

    def done_paths(self) -> set[str]:
        """The images done, each as the file it is (its resolved path, recorded by the run that did it: a resumed job
        finds them from any working directory); an entry of a run that recorded none, resolved here."""
        return {_recorded_path(image) for entry in self.entries.values() for image in entry["images"]}

    def left_to_do(self, images: list[str]) -> list[str]:
        """``images`` less those done. An image is done when its resolved path is recorded as done (wherever the job
        runs from, however ``--images`` spells it), or when its bytes are those of a done image whose recorded file is
        not among ``images`` (the folder was moved or renamed): the same SHA-256, each such record standing for one
        image, so two copies of one image in a dataset are both done. Its results keep the path it was done under.
        Only then are pending images read to be hashed, and only until every such record is matched."""
        resolved = [os.path.realpath(image) for image in images]
        done, inputs = self.done_paths(), set(resolved)
        left = [image for image, path in zip(images, resolved) if path not in done]
        moved = Counter(image["sha256"] for entry in self.entries.values() for image in entry["images"]
                        if image.get("sha256") and _recorded_path(image) not in inputs)
        kept = []
        for image in left:
            digest = _sha256_or_none(image) if moved else None
            if moved[digest] > 0:
                moved[digest] -= 1
                moved = +moved  # the records still unmatched: once none is left, nothing more is hashed
            else:
                kept.append(image)
        return kept

    def failed(self) -> dict[str, str]:
        """Image -> reason, for the images whose latest attempt failed and that are not done."""
        done, out = self.done(), {}
        for index in sorted(self.entries):
            for error in self.entries[index]["errors"]:
                if error["image"] not in done:
                    out[error["image"]] = error["error"]
        return out

    def next_index(self) -> int:
        return max(self.entries, default=-1) + 1

    def commit(self, result: ShardResult, shard_name: str) -> None:
        """Write the shard file (atomically; its data and the folder fsync'ed), then append its manifest line (flushed
        and fsync'ed): a line never names a shard whose bytes a power cut could lose."""
        from vitdeploy.fileio import atomic_write_bytes

        entry = dict(result.entry)
        if result.payload is not None:
            atomic_write_bytes(self.folder / shard_name, result.payload, durable=True)
            entry["shard"], entry["sha256"] = shard_name, _sha256(result.payload)
        else:
            entry["shard"], entry["sha256"] = None, None
        with open(self.manifest_path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry, sort_keys=True) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        self.entries[int(entry["index"])] = entry

    def write_errors(self) -> Path:
        """Rewrite ``errors.jsonl`` from the manifest: the images not done because they failed."""
        from vitdeploy.fileio import atomic_write_bytes

        lines = [json.dumps({"image": image, "error": reason}) + "\n" for image, reason in self.failed().items()]
        return atomic_write_bytes(self.folder / ERRORS_FILE, "".join(lines).encode())

    def finish(self) -> None:
        """The manifest sorted by shard, rewritten atomically (a finished job's manifest is schedule-independent)."""
        from vitdeploy.fileio import atomic_write_bytes

        text = "".join(json.dumps(self.entries[i], sort_keys=True) + "\n" for i in sorted(self.entries))
        atomic_write_bytes(self.manifest_path, text.encode())
        self.write_errors()


def _recorded_path(image: dict[str, Any]) -> str:
    """A done image's file: the resolved path its run recorded, or (a run that recorded none) its path resolved here."""
    return image.get("path") or os.path.realpath(image["image"])


def _sha256_or_none(path: str) -> str | None:
    """The file's SHA-256; None where it cannot be read now (the worker records why)."""
    from vitdeploy.fileio import sha256_file

    try:
        return sha256_file(path)
    except OSError:
        return None


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."


def shards(images: Iterable[str], first_index: int, shard_size: int) -> list[dict[str, Any]]:
    """The images in order, cut into shards of ``shard_size``: ``{"index": i, "images": [...]}`` from ``first_index``."""
    images = list(images)
    return [{"index": first_index + k, "images": images[start:start + shard_size]}
            for k, start in enumerate(range(0, len(images), shard_size))]


def pyarrow_parquet(purpose: str):
    """``pyarrow.parquet``, or an InputError naming the extra that installs it."""
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise InputError(f"pyarrow is needed to {purpose}: pip install 'vitdeploy[ray]'") from exc
    return pq


def read_embedding_shard(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The arrays of an embeddings shard (``.npz`` or ``.parquet``): ``image``, ``image_sha256``, ``original_size``,
    ``resized_size`` and ``embedding`` (N, C, h, w) float32."""
    path = Path(path)
    if path.suffix == ".parquet":
        pq = pyarrow_parquet("read Parquet shards")
        table = pq.read_table(path)
        shape = json.loads(table.schema.metadata[b"embedding_shape"])
        flat = table.column("embedding").combine_chunks().flatten().to_numpy()
        return {"image": np.array(table.column("image").to_pylist()),
                "image_sha256": np.array(table.column("image_sha256").to_pylist()),
                "original_size": np.stack([table.column("height").to_numpy(), table.column("width").to_numpy()], 1),
                "resized_size": np.stack([table.column("resized_height").to_numpy(),
                                          table.column("resized_width").to_numpy()], 1),
                "embedding": flat.reshape(len(table), *shape).astype(np.float32)}
    with np.load(path, allow_pickle=False) as data:
        return {name: data[name] for name in data.files if name != "info"}


__all__ = ["DatasetStore", "ERRORS_FILE", "FORMAT", "JOB_FILE", "MANIFEST_FILE", "ShardResult", "npz_bytes", "pyarrow_parquet",
           "read_embedding_shard", "shards"]
