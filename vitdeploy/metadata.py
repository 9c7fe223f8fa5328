"""Artifact metadata: what every file vitdeploy writes carries, so a runtime needs nothing else.

Stored as string key/value pairs in ONNX ``metadata_props`` (prefix ``vitdeploy.``) and in the JSON
sidecar next to a TensorRT engine. Non-string values are JSON-encoded. The keys are a contract with
the runtime (Python and C++): add keys, never rename them.
"""

from __future__ import annotations

import copy
import functools
import inspect
import json
import math
import os
import platform
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vitdeploy.errors import InputError
from vitdeploy.fileio import require_nonempty_onnx, require_onnx_file
from vitdeploy.precisions import PRECISIONS, Precision

PREFIX = "vitdeploy."

#: Keys every exported model carries.
REQUIRED_KEYS = (
    "family",  # sam_image_encoder | sam_mask_decoder | timm_vit
    "variant",  # vit_b, vit_l, vit_h, custom, or a timm model name
    "input_size",  # [H, W] of the model input (static)
    "pixel_mean",
    "pixel_std",
    "precision",  # fp32 | fp16 | int8
    "random_weights",  # true when weights are seeded random, not a checkpoint
    "vitdeploy_version",
)


#: The tools whose versions an artifact records: importable module -> its distribution (in
#: :data:`vitdeploy.tested_versions.TESTED`).
TOOL_DISTRIBUTIONS = {"torch": "torch", "onnx": "onnx", "onnxruntime": "onnxruntime", "onnxscript": "onnxscript",
                      "segment_anything": "segment-anything", "timm": "timm"}


def tool_versions() -> dict[str, str]:
    """Versions of the tools that shaped an artifact (those installed here). A module already imported gives its
    ``__version__`` (torch's names its build, ``2.14.1+cpu``); any other is read from its distribution's metadata by
    :func:`~vitdeploy.tested_versions.installed_versions`, without importing it (importing segment_anything, with
    torchvision, and timm only to read their versions made a tiny SAM 2 export's process about 1 s slower: 9.5
    against 8.4 s)."""
    import sys

    import vitdeploy
    from vitdeploy.tested_versions import installed_versions

    imported = {m: getattr(sys.modules.get(m), "__version__", None) for m in TOOL_DISTRIBUTIONS}
    found = installed_versions([TOOL_DISTRIBUTIONS[m] for m, v in imported.items() if not v])
    versions = {"vitdeploy": vitdeploy.__version__, "python": platform.python_version()}
    for module, distribution in TOOL_DISTRIBUTIONS.items():
        version = imported[module] or found[distribution]
        if version:
            versions[module] = str(version)
    return versions


def encode(meta: Mapping[str, Any]) -> dict[str, str]:
    """``{key: value}`` -> ``{'vitdeploy.key': str-or-json}``, sorted for byte-stable files."""
    out = {}
    for key in sorted(meta):
        value = meta[key]
        out[PREFIX + key] = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return out


def decode(props: Mapping[str, str]) -> dict[str, Any]:
    """Inverse of :func:`encode`; keys without the prefix are ignored."""
    out: dict[str, Any] = {}
    for key, raw in props.items():
        if not key.startswith(PREFIX):
            continue
        try:
            out[key[len(PREFIX):]] = json.loads(raw)
        except json.JSONDecodeError:
            out[key[len(PREFIX):]] = raw
    return out


def metadata_of(model: Any) -> dict[str, Any]:
    """The vitdeploy metadata of an ``onnx.ModelProto`` already in memory."""
    return decode({p.key: p.value for p in model.metadata_props})


def read_onnx_metadata(path: str | Path) -> dict[str, Any]:
    """The vitdeploy metadata of an ONNX file, read without parsing the graph (:func:`read_metadata_props`), once per
    version of the file: opening one predictor asks for it from the deployment decision, the runner, the seam's
    checks and the application; a file replaced since (another size, time or inode) is read again."""
    require_onnx_file(path)  # a missing file is an InputError naming it (os.stat's FileNotFoundError was a 'bug')
    stat = os.stat(path)
    return copy.deepcopy(_metadata_of_version(os.path.realpath(path), stat.st_ino, stat.st_size, stat.st_mtime_ns))


@functools.lru_cache(maxsize=64)
def _metadata_of_version(path: str, inode: int, size: int, mtime_ns: int) -> dict[str, Any]:
    return decode(read_metadata_props(path))


def read_metadata_props(path: str | Path) -> dict[str, str]:
    """``metadata_props`` of an ONNX file, read without parsing the graph or loading the weights.

    Walks the top-level fields of the ``ModelProto`` protobuf message and skips every one but
    ``metadata_props`` (field 14) by its length, so it costs a few reads even for a GB-sized file.
    Why not ``onnx.load(path, load_external_data=False)``: it parses the whole message. Measured on the
    377 MB SAM ViT-B file (weights inside, 2-core EPYC): 2.26 s and 779 MB peak RSS for onnx vs 0.08 s
    and 43 MB here, paid on every runner opened (predict, validate, benchmark); protobuf offers no
    partial parse of one field.
    """
    import mmap

    props: dict[str, str] = {}
    require_nonempty_onnx(Path(path))
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
        pos, end = 0, len(data)
        while pos < end:
            tag, pos = _varint(data, pos)
            field_number, wire_type = tag >> 3, tag & 7
            if wire_type == 0:
                _, pos = _varint(data, pos)
            elif wire_type == 1:
                pos += 8
            elif wire_type == 5:
                pos += 4
            elif wire_type == 2:
                length, pos = _varint(data, pos)
                if field_number == 14:
                    key, value = _string_pair(data[pos:pos + length])
                    props[key] = value
                pos += length
            else:
                raise InputError(f"'{path}' is not an ONNX model file (protobuf wire type {wire_type} at byte {pos})")
    return props


def _varint(data: Any, pos: int) -> tuple[int, int]:
    result, shift = 0, 0
    while True:
        if pos >= len(data):
            raise InputError("truncated ONNX file (protobuf varint runs past the end)")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _string_pair(entry: bytes) -> tuple[str, str]:
    """(key, value) of a serialized ``StringStringEntryProto``."""
    fields = {1: "", 2: ""}
    pos = 0
    while pos < len(entry):
        tag, pos = _varint(entry, pos)
        length, pos = _varint(entry, pos)
        fields[tag >> 3] = entry[pos:pos + length].decode("utf-8", errors="replace")
        pos += length
    return fields[1], fields[2]


#: The keys that say which model a file computes, whatever its precision, form or runtime: two files that agree on
#: all of them hold the same weights in the same architecture.
IDENTITY_KEYS = ("family", "variant", "architecture", "input_size", "random_seed", "checkpoint_sha256")


def identity_differences(first: Mapping[str, Any], second: Mapping[str, Any],
                         keys: Sequence[str] = IDENTITY_KEYS) -> list[str]:
    """``key a vs b`` for every identity key on which two files' metadata differ (empty: the same model)."""
    return [f"{key} {first.get(key)!r} vs {second.get(key)!r}" for key in keys if first.get(key) != second.get(key)]


def artifact_metadata(
    *,
    family: str,
    variant: str,
    input_size: int,
    pixel_mean: Any,
    pixel_std: Any,
    architecture: dict[str, Any],
    random_seed: int | None,
    checkpoint_name: str | None,
    checkpoint_sha256: str | None,
    **family_keys: Any,
) -> dict[str, Any]:
    """The keys every exported model carries (:data:`REQUIRED_KEYS` and provenance), plus ``family_keys``."""
    versions = tool_versions()
    return {
        "family": family,
        "variant": variant,
        "input_size": [input_size, input_size],
        "pixel_mean": list(pixel_mean),
        "pixel_std": list(pixel_std),
        "precision": Precision.FP32.value,
        "random_weights": random_seed is not None,
        "random_seed": random_seed,
        "checkpoint": checkpoint_name,
        "checkpoint_sha256": checkpoint_sha256,
        "architecture": architecture,
        **family_keys,
        "vitdeploy_version": versions["vitdeploy"],
        "tool_versions": versions,
    }


def family_metadata(family: str, own_keys: Mapping[str, Any], keys: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`artifact_metadata` of a ``family`` from ``keys``: its keywords (``checkpoint_name`` and
    ``checkpoint_sha256`` None unless given) and the family's own keys, ``own_keys`` giving their defaults. Another key
    is refused as a wrong keyword is (TypeError)."""
    common = set(inspect.signature(artifact_metadata).parameters) - {"family", "family_keys"}
    unknown = set(keys) - common - set(own_keys)
    if unknown:
        raise TypeError(f"{family} metadata has no key {', '.join(sorted(unknown))}")
    defaults = copy.deepcopy(dict(own_keys))  # a default's list or dict is the file's own, not shared
    return artifact_metadata(family=family, **{"checkpoint_name": None, "checkpoint_sha256": None, **defaults, **keys})


def _positive_ints(value: Any, count: tuple[int, ...]) -> bool:
    return (isinstance(value, list) and len(value) in count
            and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value))


def _numbers(value: Any, count: int) -> bool:
    return (isinstance(value, list) and len(value) == count
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value))


def metadata_problems(meta: Any, inputs: Mapping[str, Sequence[Any]] | None = None,
                      outputs: Sequence[str] | None = None) -> list[str]:
    """What is wrong with a file's vitdeploy metadata, one phrase per field (empty: nothing found).

    The metadata is written by vitdeploy; a file edited by hand or damaged in transit can carry values of
    the wrong type or that contradict the graph, which would otherwise fail far from the cause. Checked:
    each known key's type and range; with the graph's ``inputs`` (name -> dims) and ``outputs`` (names),
    ``input_name`` / ``output_name`` against them, ``input_size`` against the image input's spatial
    dimensions, and a decoder's ``mask_input_size``, ``image_embedding_size`` and ``embed_dim`` against the inputs
    they describe.
    """
    if not isinstance(meta, dict):
        return [f"the metadata is {type(meta).__name__}, not an object"]
    problems = []

    def bad(key: str, expected: str) -> None:
        problems.append(f"{key} is {json.dumps(meta[key])[:60]}, expected {expected}")

    for key in ("family", "variant", "target", "output_name", "input_name"):
        if key in meta and not isinstance(meta[key], str):
            bad(key, "a string")
    if "precision" in meta and meta["precision"] not in PRECISIONS:
        bad("precision", f"one of {', '.join(PRECISIONS)}")
    if "input_size" in meta and not _positive_ints(meta["input_size"], (1, 2)):
        bad("input_size", "[height, width] in pixels")
    for key in ("pixel_mean", "pixel_std"):
        if key in meta and not _numbers(meta[key], 3):
            bad(key, "three numbers (R, G, B)")
    if isinstance(meta.get("pixel_std"), list) and _numbers(meta["pixel_std"], 3) and min(meta["pixel_std"]) <= 0:
        bad("pixel_std", "three positive numbers")
    for key in ("architecture", "shape_profile", "cpu_form"):
        if key in meta and meta[key] is not None and not isinstance(meta[key], dict):
            bad(key, "a JSON object")
    if "random_weights" in meta and not isinstance(meta["random_weights"], bool):
        bad("random_weights", "true or false")
    if meta.get("random_seed") is not None and (not isinstance(meta["random_seed"], int) or isinstance(meta["random_seed"], bool)
                                                or not -(2**63) <= meta["random_seed"] < 2**63):
        bad("random_seed", "a whole number or null")
    elif meta.get("random_weights") is True and "random_seed" in meta and meta["random_seed"] is None:
        bad("random_seed", "the seed of the random weights (random_weights is true)")
    for key in ("mask_input_size", "image_embedding_size"):
        if key in meta and not _positive_ints(meta[key], (2,)):
            bad(key, "[height, width]")
    if "embed_dim" in meta and not (isinstance(meta["embed_dim"], int) and not isinstance(meta["embed_dim"], bool)
                                    and meta["embed_dim"] > 0):
        bad("embed_dim", "a positive whole number")
    if "dynamic_multimask_via_stability" in meta and not isinstance(meta["dynamic_multimask_via_stability"], bool):
        bad("dynamic_multimask_via_stability", "true or false")
    for key in ("dynamic_multimask_stability_delta", "dynamic_multimask_stability_thresh"):  # SAM 2 decoders
        if key in meta and not _numbers([meta[key]], 1):
            bad(key, "a number")
    if "mask_output_indices" in meta and not (isinstance(meta["mask_output_indices"], list) and meta["mask_output_indices"]
                                              and all(isinstance(i, int) and 0 <= i < 4 for i in meta["mask_output_indices"])):
        bad("mask_output_indices", "a list of mask token numbers 0..3")
    for key, names in (("input_name", inputs), ("output_name", outputs)):
        if isinstance(meta.get(key), str) and names is not None and meta[key] not in names:
            problems.append(f"{key} is {json.dumps(meta[key])[:60]}, which the graph does not have ({', '.join(names)})")
    size = meta.get("input_size")
    dims = list((inputs or {}).get(meta["input_name"], ())) if isinstance(meta.get("input_name"), str) else []
    if _positive_ints(size, (1, 2)) and len(dims) == 4 and all(isinstance(d, int) and d > 0 for d in dims[2:]):
        expected = size * 2 if len(size) == 1 else size
        if list(dims[2:]) != list(expected):
            problems.append(f"input_size is {size} but the graph's image input is {dims[2]}x{dims[3]}")
    # a decoder's declared sizes, against the inputs they describe (else a raw runtime error at the first prompt)
    for key, name in (("mask_input_size", "mask_input"), ("image_embedding_size", "image_embeddings")):
        dims = list((inputs or {}).get(name, ()))
        if _positive_ints(meta.get(key), (2,)) and len(dims) == 4 and all(isinstance(d, int) and d > 0 for d in dims[2:]) \
                and list(dims[2:]) != list(meta[key]):
            problems.append(f"{key} is {meta[key]} but the graph's {name} input is {dims[2]}x{dims[3]}")
    dims = list((inputs or {}).get("image_embeddings", ()))
    if isinstance(meta.get("embed_dim"), int) and len(dims) == 4 and isinstance(dims[1], int) and dims[1] > 0 \
            and dims[1] != meta["embed_dim"]:
        problems.append(f"embed_dim is {meta['embed_dim']} but the graph's image_embeddings input has {dims[1]} channels")
    return problems
