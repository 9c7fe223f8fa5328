"""The kinds of dataset job, registered as classes (as ``FAMILIES`` registers model families): what each takes, what it
writes and what a worker computes per image.

A :class:`JobKind` names its files (a :class:`~vitdeploy.runtime.apps.common.files.FileSet` of a model's package: the
set is checked, and every file decided, when the job is planned), its shard files (pattern, images per shard, the
record key of a JSON-lines shard), the options that enter the job's header, and, instantiated once per worker on the
job's plan, the computation of one image and the bytes of one shard. The job driver and the workers
(:mod:`vitdeploy.runtime.apps.datasets.job`, :mod:`~vitdeploy.runtime.apps.datasets.on_ray`) ask the kind; none of
them compares a kind's name. A new kind (SAM 2 masks, videos) is one class here, registered with :func:`register`,
and a row of the contract test (``tests/runtime/apps/test_dataset_job.py``).

    embed      SAM's image encoder -> embeddings shards (NPZ or Parquet): ``vitdeploy embed``
    masks      SAM's encoder and decoder -> the automatic mask generator's masks (JSON lines): ``segment-all --images``
    concepts   SAM 3's vision encoder, text encoder and detector -> every instance of a concept (JSON lines):
               ``segment-concept --images``
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, ClassVar

import numpy as np

from vitdeploy.errors import InputError
from vitdeploy.runtime.apps.common.files import FileSet
from vitdeploy.runtime.apps.datasets.store import npz_bytes, pyarrow_parquet
from vitdeploy.runtime.apps.sam.files import ENCODER, PAIR
from vitdeploy.runtime.apps.sam3.files import CONCEPT
from vitdeploy.runtime.backends.base import Runner

#: The shard formats of an embeddings job.
EMBEDDING_FORMATS = ("npz", "parquet")


class JobKind:
    """One kind of job (module docstring). Class attributes say what the kind is; an instance is one worker's model,
    opened from the job's plan (``config.plan``: every file as the driver decided it).

    Attributes:
        name: the kind's name in a job's header and config (``embed``).
        files: the files it takes (a model package's set: roles, order and the check that they belong together).
        shard_pattern: a shard file's name, ``{index}`` filled in (and an embeddings shard's ``{ext}``, its format).
        shard_size: images per shard by default.
        record_key: the key of each image's records in a JSON-lines shard (``masks``: :class:`JsonLinesJob`).
    """

    name: ClassVar[str]
    files: ClassVar[FileSet]
    shard_pattern: ClassVar[str]
    shard_size: ClassVar[int]
    record_key: ClassVar[str] = ""

    def __init__(self, config: Any):
        self.config = config
        #: The files this worker opened, by role (as the job's plan says).
        self.runners: dict[str, Runner] = {}

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> None:
        """Raise InputError for options this kind cannot run with, before any work."""

    @classmethod
    def header_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        """The options as the job's header records them (a resumed job must match them)."""
        return dict(options)

    @classmethod
    def select(cls, images: list[str], options: dict[str, Any]) -> list[str]:
        """The listed images this job computes (default: all of them)."""
        return images

    @classmethod
    def shard_name(cls, index: int, options: dict[str, Any]) -> str:
        return cls.shard_pattern.format(index=index)

    def compute(self, picture: np.ndarray, image_path: str) -> Any:
        """One image's result (InputError: this image cannot be computed, recorded with its reason)."""
        raise NotImplementedError

    def payload(self, done: list[dict[str, Any]], outputs: list[Any]) -> bytes:
        """A shard file's bytes, of the images ``done`` (their records: ``outputs``)."""
        raise NotImplementedError


class JsonLinesJob(JobKind):
    """A kind whose shard is one JSON line per image, its records under :attr:`record_key` (a line of a few kB, so
    64 images a shard), named ``{name}-{index:05d}.jsonl``."""

    shard_size = 64

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        if "shard_pattern" not in cls.__dict__:
            cls.shard_pattern = f"{cls.name}-{{index:05d}}.jsonl"

    def payload(self, done: list[dict[str, Any]], outputs: list[Any]) -> bytes:
        lines = [json.dumps({"image": d["image"], "image_sha256": d["sha256"], "size": d["size"],
                             self.record_key: records}, sort_keys=True) + "\n" for d, records in zip(done, outputs)]
        return "".join(lines).encode()


#: The registered kinds, by name.
JOB_KINDS: dict[str, type[JobKind]] = {}


def register(kind: type[JobKind]) -> type[JobKind]:
    """Register ``kind`` under its name (a class decorator)."""
    if kind.name in JOB_KINDS:
        raise RuntimeError(f"job kind {kind.name!r} is registered twice")
    JOB_KINDS[kind.name] = kind
    return kind


def job_kind(name: str) -> type[JobKind]:
    """The kind registered as ``name`` (InputError naming the kinds there are)."""
    if name not in JOB_KINDS:
        raise InputError(f"job kind {name!r} is not one of {', '.join(JOB_KINDS)}")
    return JOB_KINDS[name]


@register
class EmbedJob(JobKind):
    """SAM embeddings: an embedding (ViT-B: 256x64x64 float32, 4 MiB) per image, so a shard of 16 is 64 MiB."""

    name = "embed"
    files = ENCODER
    shard_pattern = "embeddings-{index:05d}.{ext}"
    shard_size = 16

    def __init__(self, config: Any):
        from vitdeploy.runtime.apps.sam.embeddings import SamEmbedder

        super().__init__(config)
        self.runners = {"encoder": config.plan.open("encoder")}
        self.embedder = SamEmbedder(self.runners["encoder"])

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> None:
        embedding_format = options.get("embedding_format", "npz")
        if embedding_format not in EMBEDDING_FORMATS:
            raise InputError(f"--format {embedding_format!r} is not one of {', '.join(EMBEDDING_FORMATS)}")
        if embedding_format == "parquet":
            pyarrow_parquet("write Parquet shards")

    @classmethod
    def header_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        return {"embedding_format": options.get("embedding_format", "npz")}

    @classmethod
    def shard_name(cls, index: int, options: dict[str, Any]) -> str:
        return cls.shard_pattern.format(index=index, ext=options.get("embedding_format", "npz"))

    def compute(self, picture: np.ndarray, image_path: str) -> Any:
        embedding, resized = self.embedder.embed(picture)
        return embedding[0], resized

    def payload(self, done: list[dict[str, Any]], outputs: list[Any]) -> bytes:
        arrays = {"image": np.array([d["image"] for d in done]),
                  "image_sha256": np.array([d["sha256"] for d in done]),
                  "original_size": np.array([d["size"] for d in done], np.int32),
                  "resized_size": np.array([r for _, r in outputs], np.int32),
                  "embedding": np.stack([e for e, _ in outputs])}
        if self.config.options.get("embedding_format", "npz") == "parquet":
            return _parquet_bytes(arrays)
        return npz_bytes(arrays)


@register
class MasksJob(JsonLinesJob):
    """The automatic mask generator's masks of each image."""

    name = "masks"
    files = PAIR
    record_key = "masks"

    def __init__(self, config: Any):
        from vitdeploy.runtime.apps.sam.mask_generator import SamAutomaticMaskGenerator
        from vitdeploy.runtime.apps.sam.predictor import SamPredictor

        super().__init__(config)
        predictor = SamPredictor.from_plan(config.plan)
        self.runners = {"encoder": predictor.encoder, "decoder": predictor.decoder}
        self.generator = SamAutomaticMaskGenerator(predictor, **config.options)

    def compute(self, picture: np.ndarray, image_path: str) -> Any:
        return self.generator.generate(picture)


@register
class ConceptsJob(JsonLinesJob):
    """Every instance of a concept in each image: a text (``text``) or each image's own prompt (``prompts``: image
    -> a concept prompt; the images without one are left out)."""

    name = "concepts"
    files = CONCEPT
    record_key = "instances"

    def __init__(self, config: Any):
        from vitdeploy.runtime.apps.sam3.concept import ConceptPrompt
        from vitdeploy.runtime.apps.sam3.processor import Sam3ImageModel, Sam3Processor

        super().__init__(config)
        model = Sam3ImageModel.from_plan(config.plan)
        self.runners = {"vision": model.vision, "text": model.text, "detector": model.detector}
        options = dict(config.options)
        self.processor = Sam3Processor(model, confidence_threshold=float(options["confidence_threshold"]))
        text = options.get("text")
        #: each image's prompt (--prompts), else --text's
        self.prompts = {image: ConceptPrompt.from_dict(p) for image, p in (options.get("prompts") or {}).items()}
        self.default_prompt = ConceptPrompt(text) if text is not None else None
        self.output_mode = str(options.get("output_mode", "coco_rle"))

    @classmethod
    def header_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        recorded = dict(options)
        prompts = options.get("prompts")
        if prompts is not None:  # the header names the prompts by their digest, not image by image
            canonical = json.dumps(prompts, sort_keys=True).encode()
            recorded["prompts"] = {"images": len(prompts), "sha256": hashlib.sha256(canonical).hexdigest()}
        return recorded

    @classmethod
    def select(cls, images: list[str], options: dict[str, Any]) -> list[str]:
        prompts = options.get("prompts")
        return images if prompts is None else [image for image in images if image in prompts]

    def compute(self, picture: np.ndarray, image_path: str) -> Any:
        from vitdeploy.runtime.apps.sam3.concept import concept_records, find_instances

        prompt = self.prompts.get(image_path, self.default_prompt)
        return concept_records(find_instances(self.processor, picture, prompt, f"'{image_path}'"), self.output_mode)


def _parquet_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    import io

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


__all__ = ["EMBEDDING_FORMATS", "JOB_KINDS", "ConceptsJob", "EmbedJob", "JobKind", "MasksJob", "job_kind", "register"]
