"""The JSON sidecar next to every engine: what it is, how and where it was built, and its hashes.

``model.plan`` gets ``model.plan.json``. A plan file is opaque, tied to one TensorRT release and one
GPU architecture; the sidecar lets a runtime (Python or C++) check that before deserializing, use
the model without being told how it was made (the ONNX file's vitdeploy metadata is carried over),
and detect a truncated or swapped plan (its size and SHA-256). Keys are a contract: add keys, never
rename them; bump :data:`SIDECAR_SCHEMA` only for an incompatible change.

Layout (schema ``vitdeploy.engine-sidecar/1``)::

    schema, vitdeploy_version, created_utc, build_seconds
    plan:      {file, size_bytes, sha256}
    onnx:      {file, sha256, external_data: {file: sha256}}
    metadata:  the ONNX file's vitdeploy metadata (family, variant, input_size, pixel_mean, ...), with
               precision set to the engine's
    precision: fp32 | fp16 | int8   (what the engine computes in)
    network:   strongly_typed | weakly_typed_fp16
    tensorrt:  {version, library}   (library: tensorrt | tensorrt-rtx; absent in older sidecars: tensorrt)
    gpu:       {name, compute_capability, index}   (TensorRT-RTX: all null, built on the CPU, plus
               targets: the compute capabilities the engine is for)
    layers:    optional: {count, by_precision, by_type_and_precision, list} from the builder's layer list
    profiles:  [{input: {min, opt, max}}]   (empty for static shapes)
    io:        {inputs: [{name, dtype, shape}], outputs: [...]}   (shapes as in the ONNX; -1 dynamic)
    build_options: {workspace_mib, optimization_level, hardware_compatibility, version_compatible,
                    tf32, legacy_fp16, timing_cache, batch_profile}
"""

from __future__ import annotations

import datetime
import json
import os
import re
from pathlib import Path
from typing import Any

from vitdeploy.engine.library import LIBRARIES
from vitdeploy.errors import EngineError, InputError
from vitdeploy.fileio import atomic_write_bytes
from vitdeploy.metadata import PRECISIONS

SIDECAR_SCHEMA = "vitdeploy.engine-sidecar/1"
SIDECAR_SUFFIX = ".json"

#: (section, key) pairs a runtime needs; a sidecar without them is rejected.
REQUIRED = (
    ("plan", "size_bytes"),
    ("plan", "sha256"),
    ("tensorrt", "version"),
    ("gpu", "compute_capability"),
)


def sidecar_path(plan: str | os.PathLike) -> Path:
    """``model.plan`` -> ``model.plan.json``."""
    return Path(str(plan) + SIDECAR_SUFFIX)


def make_sidecar(
    *,
    plan_file: str,
    plan_size: int,
    plan_sha256: str,
    onnx_file: str,
    onnx_sha256: str,
    external_data: dict[str, str],
    metadata: dict[str, Any],
    precision: str,
    network: str,
    tensorrt_version: str,
    gpu: dict[str, Any],
    tensorrt_library: str = "tensorrt",
    layers: dict[str, Any] | None = None,
    profiles: list[dict[str, dict[str, list[int]]]],
    io: dict[str, list[dict[str, Any]]],
    build_options: dict[str, Any],
    build_seconds: float,
) -> dict[str, Any]:
    """Assemble a sidecar dictionary (see the module docstring for the layout)."""
    import vitdeploy

    sidecar = {
        "schema": SIDECAR_SCHEMA,
        "vitdeploy_version": vitdeploy.__version__,
        "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "build_seconds": round(float(build_seconds), 3),
        "plan": {"file": plan_file, "size_bytes": int(plan_size), "sha256": plan_sha256},
        "onnx": {"file": onnx_file, "sha256": onnx_sha256, "external_data": dict(external_data)},
        "metadata": dict(metadata),
        "precision": precision,
        "network": network,
        "tensorrt": {"version": tensorrt_version, "library": tensorrt_library},
        "gpu": dict(gpu),
        "profiles": list(profiles),
        "io": io,
        "build_options": dict(build_options),
    }
    if layers is not None:
        sidecar["layers"] = layers
    return sidecar


def write_sidecar(plan: str | os.PathLike, sidecar: dict[str, Any]) -> Path:
    """Write ``sidecar`` next to ``plan`` atomically; returns the sidecar's path."""
    return atomic_write_bytes(sidecar_path(plan), (json.dumps(sidecar, indent=2, sort_keys=True) + "\n").encode())


def read_sidecar(plan: str | os.PathLike) -> dict[str, Any]:
    """The sidecar of ``plan``, checked for the schema and the keys a runtime needs."""
    plan = Path(plan)
    path = sidecar_path(plan)
    rebuild = "rebuild the engine with 'vitdeploy build-engine', which writes both files"
    if not path.is_file():
        raise EngineError(f"'{plan.name}' has no sidecar '{path.name}' next to it: {rebuild}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise EngineError(f"sidecar '{path.name}' is not valid JSON ({exc}): {rebuild}") from exc
    if not isinstance(data, dict) or data.get("schema") != SIDECAR_SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise EngineError(f"sidecar '{path.name}' has schema '{found}', expected '{SIDECAR_SCHEMA}': {rebuild}")
    sections = [name for name in ("plan", "tensorrt", "gpu") if not isinstance(data.get(name), dict)]
    if sections:
        raise EngineError(f"sidecar '{path.name}' has no object for {', '.join(sections)}: {rebuild}")
    missing = [f"{section}.{key}" for section, key in REQUIRED if key not in (data.get(section) or {})]
    if missing:
        raise EngineError(f"sidecar '{path.name}' lacks {', '.join(missing)}: {rebuild}")
    wrong = sidecar_type_problems(data)
    if wrong:
        raise EngineError(f"sidecar '{path.name}' has values of the wrong type ({'; '.join(wrong)}): {rebuild}")
    return data


def sidecar_type_problems(data: dict[str, Any]) -> list[str]:
    """Sidecar fields whose type is not what vitdeploy wrote (a hand-edited or damaged file)."""
    problems = []
    size = data["plan"].get("size_bytes")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        problems.append(f"plan.size_bytes is {json.dumps(size)}, expected a byte count")
    digest = data["plan"].get("sha256")
    if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
        problems.append(f"plan.sha256 is {json.dumps(digest)[:40]}, expected 64 hex digits")
    if not isinstance(data["tensorrt"].get("version"), str):
        problems.append(f"tensorrt.version is {json.dumps(data['tensorrt'].get('version'))}, expected a string")
    cc = data["gpu"].get("compute_capability")
    if cc is not None and not isinstance(cc, str):
        problems.append(f"gpu.compute_capability is {json.dumps(cc)}, expected a string like \"8.9\"")
    targets = data["gpu"].get("targets")
    if targets is not None and not (isinstance(targets, list) and all(isinstance(t, str) for t in targets)):
        problems.append(f"gpu.targets is {json.dumps(targets)[:40]}, expected a list of compute capabilities")
    library = data["tensorrt"].get("library", "tensorrt")
    if library not in LIBRARIES:
        problems.append(f"tensorrt.library is {json.dumps(library)[:40]}, expected {' or '.join(LIBRARIES)}")
    layers = data.get("layers")
    if layers is not None and not (isinstance(layers, dict) and all(
            isinstance(layers.get(k, {}), dict) for k in ("by_precision", "by_type_and_precision"))):
        problems.append(f"layers is {json.dumps(layers)[:40]}, expected the layer summary vitdeploy writes")
    for key, kind in (("metadata", dict), ("profiles", list), ("io", dict), ("build_options", dict), ("onnx", dict)):
        if key in data and not isinstance(data[key], kind):
            problems.append(f"{key} is {json.dumps(data[key])[:40]}, expected a JSON {'object' if kind is dict else 'list'}")
    io = data.get("io")
    if isinstance(io, dict):
        for side in ("inputs", "outputs"):
            tensors = io.get(side, [])
            if not (isinstance(tensors, list) and all(isinstance(t, dict) and isinstance(t.get("name"), str)
                                                        and isinstance(t.get("shape", []), list) for t in tensors)):
                problems.append(f"io.{side} is {json.dumps(tensors)[:40]}, expected a list of {{name, dtype, shape}}")
    profiles = data.get("profiles")
    if isinstance(profiles, list) and not all(
            isinstance(p, dict) and all(isinstance(r, dict) for r in p.values()) for p in profiles):
        problems.append(f"profiles is {json.dumps(profiles)[:40]}, expected a list of {{input: {{min, opt, max}}}}")
    if "precision" in data and data["precision"] not in PRECISIONS:
        problems.append(f"precision is {json.dumps(data['precision'])[:40]}, expected one of {', '.join(PRECISIONS)}")
    return problems


def read_plan_checked(plan: str | os.PathLike, sidecar: dict[str, Any]) -> bytes:
    """The plan's bytes, after checking their size and SHA-256 against the sidecar.

    Catches a truncated copy, an interrupted transfer, or a plan replaced without its sidecar,
    before TensorRT sees the bytes (it would fail with a less specific deserialization error).
    """
    import hashlib

    plan = Path(plan)
    if not plan.is_file():
        raise InputError(f"engine file '{plan}' not found: build it with 'vitdeploy build-engine' or check the path")
    data = plan.read_bytes()
    expected_size = int(sidecar["plan"]["size_bytes"])
    rebuild = "copy it again or rebuild it with 'vitdeploy build-engine'"
    if len(data) != expected_size:
        raise EngineError(
            f"'{plan.name}' is {len(data)} bytes but its sidecar records {expected_size}: "
            f"the plan is truncated or was replaced; {rebuild}"
        )
    if hashlib.sha256(data).hexdigest() != sidecar["plan"]["sha256"]:
        raise EngineError(f"'{plan.name}' does not match the SHA-256 in its sidecar: the plan was modified or replaced; {rebuild}")
    return data
