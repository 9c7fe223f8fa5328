"""What a deployment's measurements depend on, read off the file and the machine: the file's bytes (SHA-256, size),
its vitdeploy metadata without the weights' provenance, this CPU, and the installed runtimes' versions.

A deployment profile (:mod:`~vitdeploy.runtime.deploy.profiles`) is matched on the file's SHA-256 and the machine;
a cached probe decision (:mod:`~vitdeploy.runtime.deploy.decisions`) on the metadata digest (two checkpoints of one
architecture share one), the size and the machine. The C++ library computes the same digests from the same bytes
(``cpp/src/deployment.cpp``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from vitdeploy.cpu_features import REPORTED, CpuFeatures, available_cores, cpu_features
from vitdeploy.fileio import sha256_file

#: The PyPI distribution whose version a runtime's results depend on.
RUNTIME_DISTRIBUTIONS = {"onnxruntime": ("onnxruntime", "onnxruntime-gpu"), "openvino": ("openvino",)}
#: Metadata keys that say where the weights came from, not what the graph computes: two checkpoints of one
#: architecture share a decision.
PROVENANCE = ("checkpoint", "checkpoint_sha256", "random_seed", "random_weights")


_DIGESTS: dict[tuple[str, int, int], str] = {}


def model_digest(model: str | Path) -> str:
    """SHA-256 of the model file and of its external data file (``<name>.data``) where there is one, cached per
    (path, size, mtime) in this process: a profile belongs to these bytes, wherever they were copied."""
    model = Path(model)
    files = [model] + [p for p in (model.with_name(model.name + ".data"),) if p.is_file()]
    stats = [f.stat() for f in files]
    key = (str(model.resolve()), sum(s.st_size for s in stats), max(s.st_mtime_ns for s in stats))
    if key not in _DIGESTS:
        digests = [sha256_file(f) for f in files]
        _DIGESTS[key] = digests[0] if len(digests) == 1 else hashlib.sha256(" ".join(digests).encode()).hexdigest()
    return _DIGESTS[key]



def file_bytes(model: str | Path) -> int:
    """The bytes of an ONNX file and of its external data file (``<name>.data``) where there is one."""
    model = Path(model)
    return sum(p.stat().st_size for p in (model, model.with_name(model.name + ".data")) if p.is_file())


def props_digest(model: str | Path) -> str:
    """SHA-256 of the file's ``vitdeploy.*`` metadata entries as written, without the weights' provenance: the lines
    ``key=value`` in key order, joined by newlines (UTF-8). The C++ library computes the same from the same bytes
    (``cpp/src/deployment.cpp``), so both match a cached decision to a file alike."""
    from vitdeploy.metadata import PREFIX, read_metadata_props

    lines = [f"{k}={v}" for k, v in sorted(read_metadata_props(model).items())
             if k.startswith(PREFIX) and k[len(PREFIX):] not in PROVENANCE]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def file_identity(model: str | Path, metadata: dict[str, Any]) -> dict[str, Any]:
    """What a decision depends on of the file: its vitdeploy metadata without the weights' provenance (decoded, for
    the reader; and the digest of the entries as written, what both languages match on), and its size."""
    return {"metadata": {k: v for k, v in sorted(metadata.items()) if k not in PROVENANCE},
            "props_sha256": props_digest(model), "bytes": file_bytes(model)}


def runtime_versions() -> dict[str, str]:
    """The installed version of each ONNX runtime (``{}`` entries missing where not installed)."""
    from importlib import metadata

    versions = {}
    for runtime, distributions in RUNTIME_DISTRIBUTIONS.items():
        for distribution in distributions:
            try:
                versions[runtime] = metadata.version(distribution)
                break
            except metadata.PackageNotFoundError:
                continue
    return versions


def machine_fingerprint(features: CpuFeatures | None = None) -> dict[str, Any]:
    """What a profile's measurements depend on: the CPU (model name, family/model, the reported flags after
    ``VITDEPLOY_CPU_MASK``) and the cores this process may use."""
    features = features or cpu_features()
    return {"cpu": features.model, "family_model": features.family_model, "machine": features.machine,
            "flags": [f for f in REPORTED if f in features.flags], "cores": available_cores()}



__all__ = ["PROVENANCE", "RUNTIME_DISTRIBUTIONS", "file_bytes", "file_identity", "machine_fingerprint", "model_digest",
           "props_digest", "runtime_versions"]
