"""Jobs over many images: SAM embeddings (``vitdeploy embed``), automatic masks (``segment-all --images``) and SAM 3's
concepts (``segment-concept --images``), each a registered kind (:mod:`vitdeploy.runtime.apps.datasets.kinds`).

A job is planned once: its config (:func:`job_config`: the model's files checked and every file decided, so every
worker computes the same numbers), then (:func:`plan_job`) the images (a folder, a glob, or a ``.txt``/``.parquet``
list, :func:`list_images`) and what the output folder already holds (:class:`~vitdeploy.runtime.apps.datasets.store.DatasetStore`:
the images it names as done are skipped). The images left are cut into shards; a *worker*
(:class:`ShardWorker`: one loaded model) turns a shard into its file's bytes and a manifest line, and the
driver commits them one at a time. The same worker runs in this process (:func:`run_in_process`, the embedded
default) or inside Ray Data actors (:mod:`vitdeploy.runtime.apps.datasets.on_ray`), so the outputs are the
same arrays and the same RLEs either way.

A bad image (unreadable, not an image, too large) is recorded with its reason and the job goes on; any
other failure stops the job, and the manifest keeps every shard finished before it.
"""

from __future__ import annotations

import glob
import os
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vitdeploy.errors import InputError
from vitdeploy.runtime.apps.datasets.kinds import EMBEDDING_FORMATS, JOB_KINDS, job_kind
from vitdeploy.runtime.apps.datasets.store import DatasetStore, ShardResult, pyarrow_parquet, shards
from vitdeploy.runtime.deploy.loader import OpenOptions
from vitdeploy.runtime.deploy.plan import ModelPlan
from vitdeploy.runtime.processing.images import IMAGE_SUFFIXES

#: Environment variables that make a run fail on purpose, for the fault tests (never set them otherwise):
#: the worker exits (as a killed process would) at its first shard, once per marker file; the driver sends itself
#: SIGINT (as Ctrl-C would) after committing this many shards.
FAULT_EXIT_WORKER_ONCE = "VITDEPLOY_FAULT_EXIT_WORKER_ONCE"
FAULT_SIGINT_AFTER = "VITDEPLOY_FAULT_SIGINT_AFTER_SHARDS"


# --- what to read ----------------------------------------------------------------------------------

def list_images(source: str | os.PathLike) -> list[str]:
    """The images a job reads, as path strings (the keys of the manifest), without duplicates.

    ``source`` is a folder (its image files, recursively, sorted), a glob pattern (``'photos/**/*.jpg'``:
    the files it matches, sorted), a ``.txt`` list (one path per line; ``#`` comments and blank lines skipped;
    relative paths are relative to the list's folder), or a ``.parquet`` table with a ``path`` (or ``image``)
    column (needs pyarrow: ``vitdeploy[ray]``). Lists keep their order. Paths are not opened here: an
    unreadable one is recorded by the job, which goes on.
    """
    text = str(source)
    path = Path(text)
    if path.is_dir():
        found = sorted(str(p) for p in path.rglob("*") if _wanted(p, by_suffix=True))
        hint = f"folder '{path}' holds no images ({', '.join(IMAGE_SUFFIXES)}, searched recursively)"
    elif any(ch in text for ch in "*?["):
        found = sorted(p for p in glob.glob(text, recursive=True) if _wanted(Path(p), by_suffix=False))
        hint = f"the pattern '{text}' matches no files"
    elif path.is_file() and path.suffix.lower() == ".parquet":
        found = [_relative_to(path, p) for p in _parquet_paths(path)]
        hint = f"'{path}' lists no images"
    elif path.is_file() and path.suffix.lower() in (".txt", ".lst", ".list"):
        lines = [line.strip() for line in path.read_text(encoding="utf-8", errors="replace").splitlines()]
        binary = next((number for number, line in enumerate(lines, 1) if "\x00" in line), None)
        if binary is not None:  # no path holds one: this is not a text list (a binary file named .txt)
            raise InputError(f"--images '{path}' line {binary} holds a NUL byte, which no path can: give a text file of "
                             "image paths, one per line")
        found = [_relative_to(path, line) for line in lines if line and not line.startswith("#")]
        hint = f"'{path}' lists no images"
    elif path.is_file():
        raise InputError(f"--images '{path}' is a file but not a list: give a folder, a glob, a .txt list or a .parquet table")
    else:
        raise InputError(f"--images '{text}' not found: give a folder, a glob ('photos/*.jpg'), a .txt list or a .parquet table")
    unique = list(dict.fromkeys(found))
    if not unique:
        raise InputError(f"{hint}: point --images at images")
    return unique


def _wanted(path: Path, by_suffix: bool) -> bool:
    """Whether a found entry joins the job: a regular file (with an image suffix, in a folder), and anything else
    named like an image (a broken link, a link loop, a FIFO, a directory ``x.jpg``), which the job records as
    failed with its reason (:func:`~vitdeploy.runtime.processing.images.not_an_image_file`) instead of skipping."""
    named = path.suffix.lower() in IMAGE_SUFFIXES
    try:
        regular = path.is_file()
    except OSError:  # a link loop on some Pythons
        regular = False
    return named if by_suffix else (regular or named)


def _relative_to(listing: Path, entry: str) -> str:
    return entry if os.path.isabs(entry) else str(listing.parent / entry)


def _parquet_paths(path: Path) -> list[str]:
    pq = pyarrow_parquet("read a .parquet list of images")
    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises its own error types for a damaged file
        raise InputError(f"'{path}' is not a readable Parquet table ({type(exc).__name__}): give a valid .parquet list") from exc
    column = next((c for c in ("path", "image", "image_path") if c in table.column_names), None)
    if column is None:
        raise InputError(f"'{path}' has no 'path' column (it has {', '.join(table.column_names)}): name the column of image paths 'path'")
    return [str(v) for v in table.column(column).to_pylist() if v]


# --- what the job is -------------------------------------------------------------------------------

@dataclass(frozen=True)
class JobConfig:
    """Everything a worker needs to open the model and run a shard: plain data, so it travels to Ray actors.

    ``kind``: a registered :class:`~vitdeploy.runtime.apps.datasets.kinds.JobKind`'s name; ``plan``: every file of the
    model decided once, by the driver, for the threads one worker runs (never ``auto``: every worker computes the
    same numbers whichever machine it is on; :func:`job_config` makes it from checked files); ``options``: the
    kind's own (an embeddings job's ``embedding_format``, the mask generator's settings, a concept job's prompts).
    """

    kind: str
    plan: ModelPlan
    options: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "plan": self.plan.to_dict(), "options": self.options}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobConfig:
        return cls(data["kind"], ModelPlan.from_dict(data["plan"]), dict(data.get("options", {})))

    @property
    def threads(self) -> int | None:
        """The threads a worker runs (the plan's first file's)."""
        return self.plan.files[0].deployment.threads

    @property
    def device(self) -> str:
        return self.plan.device

    def shard_name(self, index: int) -> str:
        return job_kind(self.kind).shard_name(index, self.options)


def job_config(kind: str, files: dict[str, str], options: OpenOptions, kind_options: dict[str, Any] | None = None,
               *, pooled: bool = False) -> JobConfig:
    """A job of ``kind`` on ``files`` (role -> path, the roles its kind's files name): the files checked from their
    metadata (before any probe, compile or cluster start), then each decided as ``options`` say, for the threads
    each worker runs (:func:`~vitdeploy.runtime.deploy.plan.worker_threads`: in a pool of workers, ``pooled``, one
    unless asked)."""
    from dataclasses import replace

    from vitdeploy.runtime.deploy.plan import worker_threads

    from vitdeploy.cpu_features import available_cores

    found = job_kind(kind)
    found.check_options(kind_options or {})
    plan = found.files.plan(files, replace(options, threads=worker_threads(options.threads, pooled)))
    # in one process an asked runtime runs every core this process may use (auto's deployments carry their own)
    return JobConfig(kind, plan if pooled else plan.with_threads(available_cores()), dict(kind_options or {}))


@dataclass
class JobPlan:
    """A planned job: its config, the output folder, the images left to do, cut into shards."""

    config: JobConfig
    store: DatasetStore
    images: list[str]
    skipped: int
    shards: list[dict[str, Any]]
    deployment: str

    @property
    def pending(self) -> int:
        return sum(len(s["images"]) for s in self.shards)


def plan_job(config: JobConfig, source: str | os.PathLike, out_dir: str | os.PathLike, *, shard_size: int | None = None,
             deployment_source: str = "asked") -> JobPlan:
    """List the images, open (or resume) the output folder and cut what is left into shards.

    Nothing is run; every problem a user can fix (no images, a folder holding another job) is an
    :class:`InputError` here, before any work (the model's files were checked when the config was made).
    """
    from vitdeploy.fileio import require_model_file
    from vitdeploy.runtime.apps.common.files import file_metadata
    from vitdeploy.runtime.deploy.identity import model_digest

    kind = job_kind(config.kind)
    kind.check_options(config.options)
    images = kind.select(list_images(source), config.options)
    identity = {}
    for planned in config.plan.files:
        require_model_file(planned.path)
        meta = file_metadata(planned.path) or {}
        identity[planned.role] = {"file": Path(planned.path).name, "sha256": model_digest(planned.path),
                                  "family": meta.get("family"), "variant": meta.get("variant"),
                                  "input_size": meta.get("input_size")}
    # how every file runs (a job whose decoder ran otherwise computed other numbers: not resumed into this folder)
    labels = [(f.role, f.deployment.label()) for f in config.plan.files]
    deployment = labels[0][1] if len(labels) == 1 else "; ".join(f"{role} {label}" for role, label in labels)
    size = shard_size or kind.shard_size
    if size < 1:
        raise InputError(f"--shard-size must be at least 1, got {size}")
    header = {"job": config.kind, "models": identity, "deployment": deployment, "device": config.device,
              "options": kind.header_options(config.options), "shard_size": size}
    store = DatasetStore.open(out_dir, header)
    left = store.left_to_do(images)  # by resolved path, or by content for a moved folder: an image is done once
    return JobPlan(config, store, images, len(images) - len(left), shards(left, store.next_index(), size),
                   f"{deployment} ({deployment_source})")


# --- the worker: one loaded model, shard in, shard file out ------------------------------------------

class ShardWorker:
    """One loaded model (the job's kind, opened from its plan) that turns shards into :class:`ShardResult` (what Ray
    actors hold, one each)."""

    def __init__(self, config: JobConfig):
        self.config = config
        self.kind = job_kind(config.kind)(config)

    @property
    def runners(self) -> dict[str, Any]:
        """The files this worker opened, by role."""
        return self.kind.runners

    def run(self, shard: dict[str, Any]) -> ShardResult:
        """The shard's file bytes and manifest line; bad images are in the line's ``errors``."""
        from vitdeploy.fileio import sha256_file
        from vitdeploy.runtime.processing.images import read_image_rgb

        _maybe_exit_worker()
        done, errors, outputs = [], [], []
        for image_path in shard["images"]:
            try:
                picture = read_image_rgb(image_path)
                digest = sha256_file(image_path)
            except InputError as exc:
                errors.append({"image": image_path, "error": str(exc)})
                continue
            except OSError as exc:  # vanished or unreadable between the read and the hash
                errors.append({"image": image_path, "error": f"'{image_path}' cannot be read ({exc.strerror or exc})"})
                continue
            size = [int(picture.shape[0]), int(picture.shape[1])]
            try:
                outputs.append(self.kind.compute(picture, image_path))
            except InputError as exc:  # this image's prompt does not fit it (a box outside it)
                errors.append({"image": image_path, "error": str(exc)})
                continue
            done.append({"image": image_path, "path": os.path.realpath(image_path), "sha256": digest, "size": size})
        entry = {"index": int(shard["index"]), "images": done, "errors": errors}
        payload = self.kind.payload(done, outputs) if done else None
        return ShardResult(entry, payload)


def _maybe_exit_worker() -> None:
    marker = os.environ.get(FAULT_EXIT_WORKER_ONCE)
    if marker and not Path(marker).exists():
        Path(marker).write_text(str(os.getpid()))
        os._exit(1)


# --- the driver --------------------------------------------------------------------------------------

@dataclass
class JobReport:
    """What a run did: counts and time (printed by the verbs)."""

    total: int
    skipped: int
    done: int = 0
    failed: int = 0
    shards: int = 0
    seconds: float = 0.0
    interrupted: bool = False

    @property
    def images_per_second(self) -> float:
        return (self.done + self.failed) / self.seconds if self.seconds > 0 else 0.0


def run_job(plan: JobPlan, results: Iterator[ShardResult] | Iterable[ShardResult],
            progress: Callable[[str, int, int], None] | None = None, report: JobReport | None = None) -> JobReport:
    """Commit each shard's result as it arrives (any order), with progress; the manifest sorted at the end.

    ``report`` (made here when not given) is filled in as shards are committed, so a caller holding it can say
    how far a stopped run got. However the loop ends early (Ctrl-C, SIGTERM, a worker's error), the shards
    committed so far stay and ``errors.jsonl`` is written before the exception goes on: the next run of the
    same command resumes.
    """
    report = report or JobReport(total=len(plan.images), skipped=plan.skipped)
    sigint_after = int(os.environ.get(FAULT_SIGINT_AFTER, "0") or 0)
    start = time.perf_counter()
    if progress:
        progress("images", 0, plan.pending)
    try:
        for result in results:
            plan.store.commit(result, plan.config.shard_name(int(result.entry["index"])))
            report.done += len(result.done)
            report.failed += len(result.failed)
            report.shards += 1
            report.seconds = time.perf_counter() - start
            if progress:
                progress("images", report.done + report.failed, plan.pending)
            if sigint_after and report.shards == sigint_after:
                os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        report.interrupted = True
        report.seconds = time.perf_counter() - start
        plan.store.write_errors()
        raise
    report.seconds = time.perf_counter() - start
    plan.store.finish()
    return report


def run_in_process(plan: JobPlan) -> Iterator[ShardResult]:
    """The embedded default: one worker in this process, shards in order."""
    worker = ShardWorker(plan.config)
    for shard in plan.shards:
        yield worker.run(shard)


#: The registered job kinds, by name (:mod:`vitdeploy.runtime.apps.datasets.kinds`).
KINDS = JOB_KINDS

__all__ = ["EMBEDDING_FORMATS", "JobConfig", "JobPlan", "JobReport", "KINDS", "ShardWorker", "job_config", "list_images",
           "plan_job", "run_in_process", "run_job"]
