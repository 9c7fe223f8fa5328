"""Jobs over many images: SAM embeddings (``vitdeploy embed``) and automatic masks (``segment-all --images``).

A job is planned once (:func:`plan_job`): the images (a folder, a glob, or a ``.txt``/``.parquet`` list,
:func:`list_images`), the deployment every worker runs (resolved here, so every worker computes the same
numbers), and what the output folder already holds (:class:`~vitdeploy.runtime.apps.datasets.store.DatasetStore`:
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
import hashlib
import json
import os
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vitdeploy.errors import InputError
from vitdeploy.runtime.apps.datasets.store import DatasetStore, ShardResult, npz_bytes, pyarrow_parquet, shards
from vitdeploy.runtime.processing.images import IMAGE_SUFFIXES

#: Job kinds -> (shard file name pattern, images per shard by default). An embedding (ViT-B: 256x64x64 float32)
#: is 4 MiB, so an embeddings shard of 16 is 64 MiB; a masks line is a few kB.
KINDS = {"embed": ("embeddings-{index:05d}.{ext}", 16), "masks": ("masks-{index:05d}.jsonl", 64),
         "concepts": ("concepts-{index:05d}.jsonl", 64)}
EMBEDDING_FORMATS = ("npz", "parquet")
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

    ``runtime``/``precision``/``settings`` are the resolved deployment (never ``auto``): every worker computes the
    same numbers whichever machine it is on. ``threads`` is per worker.
    """

    kind: str
    encoder: str
    decoder: str | None = None  # SAM's decoder ("masks"); SAM 3's detector ("concepts")
    text_encoder: str | None = None  # SAM 3's ("concepts")
    runtime: str = "onnxruntime"
    precision: str = "file"
    settings: tuple[tuple[str, Any], ...] = ()
    threads: int | None = None
    device: str = "cpu"
    embedding_format: str = "npz"
    mask_options: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobConfig:
        data = dict(data)
        data["settings"] = tuple(tuple(pair) for pair in data.get("settings", ()))
        return cls(**data)

    def shard_name(self, index: int) -> str:
        pattern = KINDS[self.kind][0]
        return pattern.format(index=index, ext=self.embedding_format)


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
    """List the images, check the model files, open (or resume) the output folder and cut what is left into shards.

    Nothing is run; every problem a user can fix (no images, a model of the wrong kind, a folder holding another
    job) is an :class:`InputError` here, before any work.
    """
    from vitdeploy.fileio import require_model_file
    from vitdeploy.metadata import read_onnx_metadata
    from vitdeploy.runtime.deploy.identity import model_digest

    if config.kind not in KINDS:
        raise InputError(f"job kind {config.kind!r} is not one of {', '.join(KINDS)}")
    if config.embedding_format not in EMBEDDING_FORMATS:
        raise InputError(f"--format {config.embedding_format!r} is not one of {', '.join(EMBEDDING_FORMATS)}")
    if config.embedding_format == "parquet":
        pyarrow_parquet("write Parquet shards")
    images = list_images(source)
    prompts = config.mask_options.get("prompts")
    if prompts is not None:  # a prompt per image (SAM 3's exemplar boxes): the images without one are left out
        images = [image for image in images if image in prompts]
    models = {"encoder": config.encoder}
    if config.kind == "masks":
        models["decoder"] = config.decoder
    elif config.kind == "concepts":  # SAM 3: vision encoder, text encoder, detector, in Sam3ImageModel's order
        models |= {"text_encoder": config.text_encoder, "detector": config.decoder}
    identity = {}
    for role, path in models.items():
        require_model_file(path)
        meta = read_onnx_metadata(path) if Path(path).suffix.lower() == ".onnx" else {}
        identity[role] = {"file": Path(path).name, "sha256": model_digest(path), "family": meta.get("family"),
                          "variant": meta.get("variant"), "input_size": meta.get("input_size")}
    if config.kind == "concepts":
        from vitdeploy.runtime.apps.sam3.files import check_sam3_files

        check_sam3_files(*(read_onnx_metadata(path) for path in models.values()))
    elif Path(config.encoder).suffix.lower() == ".onnx":
        from vitdeploy.runtime.apps.sam.predictor import check_sam_encoder

        check_sam_encoder(read_onnx_metadata(config.encoder), f"'{config.encoder}'")
    deployment = f"{config.runtime} {config.precision}" + "".join(f" {k}={v}" for k, v in config.settings)
    options = {"embedding_format": config.embedding_format} if config.kind == "embed" else dict(config.mask_options)
    if prompts is not None:  # the header names the prompts by their digest, not image by image
        canonical = json.dumps(prompts, sort_keys=True).encode()
        options["prompts"] = {"images": len(prompts), "sha256": hashlib.sha256(canonical).hexdigest()}
    size = shard_size or KINDS[config.kind][1]
    if size < 1:
        raise InputError(f"--shard-size must be at least 1, got {size}")
    header = {"job": config.kind, "models": identity, "deployment": deployment, "device": config.device, "options": options,
              "shard_size": size}
    store = DatasetStore.open(out_dir, header)
    done = {os.path.realpath(image) for image in store.done()}  # however --images was spelled, an image is done once
    left = [image for image in images if os.path.realpath(image) not in done]
    return JobPlan(config, store, images, len(images) - len(left), shards(left, store.next_index(), size),
                   f"{deployment} ({deployment_source})")


# --- the worker: one loaded model, shard in, shard file out ------------------------------------------

class ShardWorker:
    """One loaded model that turns shards into :class:`ShardResult` (what Ray actors hold, one each)."""

    def __init__(self, config: JobConfig):
        from vitdeploy.runtime.deploy.deployment import Deployment
        from vitdeploy.runtime.deploy.loader import open_deployed

        self.config = config
        deployment = Deployment(config.runtime, config.precision, config.threads, config.settings, source="the job's")
        encoder = open_deployed(config.encoder, deployment, device=config.device)
        if config.kind == "concepts":
            from vitdeploy.runtime.apps.sam3.concept import ConceptPrompt
            from vitdeploy.runtime.apps.sam3.processor import Sam3ImageModel, Sam3Processor

            # the text encoder and detector as written, on the job's runtime (the settings are the vision file's)
            as_written = Deployment(config.runtime, threads=config.threads)
            model = Sam3ImageModel(encoder, open_deployed(config.text_encoder, as_written, device=config.device),
                                   open_deployed(config.decoder, as_written, device=config.device))
            options = dict(config.mask_options)
            self.processor = Sam3Processor(model, confidence_threshold=float(options["confidence_threshold"]))
            text = options.get("text")
            #: each image's prompt (--prompts), else --text's
            self.prompts = {image: ConceptPrompt.from_dict(p) for image, p in (options.get("prompts") or {}).items()}
            self.default_prompt = ConceptPrompt(text) if text is not None else None
            self.output_mode = str(options.get("output_mode", "coco_rle"))
        elif config.kind == "masks":
            from vitdeploy.runtime.apps.sam.mask_generator import SamAutomaticMaskGenerator
            from vitdeploy.runtime.apps.sam.predictor import SamPredictor

            # the decoder as written, on the job's runtime (the encoder's settings are the encoder file's)
            decoder = open_deployed(config.decoder, Deployment(config.runtime, threads=config.threads), device=config.device)
            self.predictor = SamPredictor(encoder, decoder)
            self.generator = SamAutomaticMaskGenerator(self.predictor, **config.mask_options)
        else:
            from vitdeploy.runtime.apps.sam.embeddings import SamEmbedder

            self.embedder = SamEmbedder(encoder, f"'{config.encoder}'")

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
                outputs.append(self._compute(picture, image_path))
            except InputError as exc:  # this image's prompt does not fit it (a box outside it)
                errors.append({"image": image_path, "error": str(exc)})
                continue
            done.append({"image": image_path, "sha256": digest, "size": size})
        entry = {"index": int(shard["index"]), "images": done, "errors": errors}
        payload = self._payload(done, outputs) if done else None
        return ShardResult(entry, payload)

    def _compute(self, picture: np.ndarray, image_path: str) -> Any:
        if self.config.kind == "concepts":
            from vitdeploy.runtime.apps.sam3.concept import concept_records, find_instances

            prompt = self.prompts.get(image_path, self.default_prompt)
            return concept_records(find_instances(self.processor, picture, prompt, f"'{image_path}'"), self.output_mode)
        if self.config.kind == "masks":
            return self.generator.generate(picture)
        embedding, resized = self.embedder.embed(picture)
        return embedding[0], resized

    def _payload(self, done: list[dict[str, Any]], outputs: list[Any]) -> bytes:
        import json

        if self.config.kind in ("masks", "concepts"):
            key = "masks" if self.config.kind == "masks" else "instances"
            lines = [json.dumps({"image": d["image"], "image_sha256": d["sha256"], "size": d["size"], key: records},
                                sort_keys=True) + "\n" for d, records in zip(done, outputs)]
            return "".join(lines).encode()
        arrays = {"image": np.array([d["image"] for d in done]),
                  "image_sha256": np.array([d["sha256"] for d in done]),
                  "original_size": np.array([d["size"] for d in done], np.int32),
                  "resized_size": np.array([r for _, r in outputs], np.int32),
                  "embedding": np.stack([e for e, _ in outputs])}
        if self.config.embedding_format == "parquet":
            return _parquet_bytes(arrays)
        return npz_bytes(arrays)


def _parquet_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    import io
    import json

    import pyarrow as pa

    pq = pyarrow_parquet("write Parquet shards")
    embedding = arrays["embedding"]
    width = int(np.prod(embedding.shape[1:]))
    table = pa.table({
        "image": pa.array(arrays["image"].tolist()), "image_sha256": pa.array(arrays["image_sha256"].tolist()),
        "height": arrays["original_size"][:, 0], "width": arrays["original_size"][:, 1],
        "resized_height": arrays["resized_size"][:, 0], "resized_width": arrays["resized_size"][:, 1],
        "embedding": pa.FixedSizeListArray.from_arrays(pa.array(embedding.reshape(-1)), width),
    }).replace_schema_metadata({"embedding_shape": json.dumps(list(embedding.shape[1:]))})
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


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


__all__ = ["EMBEDDING_FORMATS", "JobConfig", "JobPlan", "JobReport", "KINDS", "ShardWorker", "list_images", "plan_job",
           "run_in_process", "run_job"]
