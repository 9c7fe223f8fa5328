"""The probe's decisions, cached per machine in the user's cache folder (``$VITDEPLOY_CACHE_DIR/decisions``), keyed by
what they depend on (:func:`decision_key`): the CPU, the installed runtimes' versions, the threads and the file's
identity (:func:`~vitdeploy.runtime.deploy.identity.file_identity`). A decision for another CPU or runtime version
is never read; a damaged or hand-edited one is not trusted.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from vitdeploy.cpu_features import CpuFeatures
from vitdeploy.errors import InputError
from vitdeploy.runtime.deploy.deployment import Deployment
from vitdeploy.runtime.deploy.identity import file_identity, machine_fingerprint, runtime_versions
from vitdeploy.runtime.deploy.timing import Decision

#: The cached decision's format tag (a reader ignores any other).
DECISION_FORMAT = "vitdeploy-deployment-decision/1"


def decision_key(model: str | Path, metadata: dict[str, Any], threads: int,
                 features: CpuFeatures | None = None) -> dict[str, Any]:
    """Everything a cached decision must match to be read: machine, runtime versions, threads and the file."""
    return {"machine": machine_fingerprint(features), "runtime_versions": runtime_versions(), "threads": threads,
            "file": file_identity(model, metadata)}


def _as_json(key: dict[str, Any]) -> Any:
    """``key`` as it reads back from a decision file (tuples as lists, keys in order): what a cached key is compared
    with, and what its file name is hashed from."""
    return json.loads(json.dumps(key, sort_keys=True, default=str))


def decision_path(key: dict[str, Any], make: bool = True) -> Path | None:
    """``<cache>/decisions/<family>-<sha256 of the key>.json`` (None where the cache is off or cannot be made)."""
    from vitdeploy.fileio import user_cache_dir

    folder = user_cache_dir("decisions", make=make)
    if folder is None:
        return None
    digest = hashlib.sha256(json.dumps(_as_json(key), sort_keys=True).encode()).hexdigest()[:32]
    family = key["file"]["metadata"].get("family") or "model"
    return folder / f"{family}-{digest}.json"


def read_decision(path: Path, key: dict[str, Any]) -> Deployment | None:
    """The deployment cached at ``path`` if it was decided for exactly ``key`` (else None: probe again). A damaged
    or hand-edited decision is not trusted (the deployment is held to what a profile may hold)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(data, dict) or data.get("format") != DECISION_FORMAT or data.get("key") != _as_json(key):
        return None
    try:
        chosen = Deployment.from_dict(data.get("chosen"), f"'{path}'")
    except InputError:
        return None
    return replace(chosen, source=f"probe, cached {path} ({data.get('created', '')}): {data.get('summary', '')}")


def write_decision(path: Path, key: dict[str, Any], decision: Decision) -> None:
    """Write ``decision`` whole or not at all (a concurrent probe of the same file writes the same key)."""
    from vitdeploy.fileio import atomic_write_bytes

    data = {"format": DECISION_FORMAT, "created": decision.created, "key": _as_json(key),
            "chosen": decision.chosen.to_dict(), "chosen_label": decision.chosen.label(), "part": decision.part,
            "seconds": round(decision.seconds, 2), "summary": decision.summary(), "left_out": list(decision.left_out),
            "timings": [t.to_dict() for t in decision.ranking()]}
    try:
        atomic_write_bytes(path, (json.dumps(data, indent=2) + "\n").encode())
    except OSError:  # a read-only cache: the decision holds for this process, and the next probes again
        pass


def cached_decisions(features: CpuFeatures | None = None) -> list[dict[str, Any]]:
    """The decisions cached for this machine and these runtime versions (others in the folder are for another CPU or
    version, and are never read), newest first: each the file's metadata, the choice, when and how long it took."""
    from vitdeploy.fileio import user_cache_dir
    folder = user_cache_dir("decisions", make=False)
    if folder is None or not folder.is_dir():
        return []
    here = _as_json({"machine": machine_fingerprint(features), "runtime_versions": runtime_versions()})
    found = []
    for path in folder.glob("*.json"):
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
        if not isinstance(data, dict) or data.get("format") != DECISION_FORMAT or not isinstance(data.get("key"), dict):
            continue  # not a decision this vitdeploy wrote
        key = data["key"]
        if any(key.get(k) != v for k, v in here.items()):
            continue
        found.append({"path": str(path), "metadata": key.get("file", {}).get("metadata", {}), "threads": key.get("threads"),
                      "chosen": data.get("chosen_label"), "created": data.get("created"), "seconds": data.get("seconds"),
                      "part": data.get("part")})
    return sorted(found, key=lambda d: str(d["created"]), reverse=True)


__all__ = ["DECISION_FORMAT", "cached_decisions", "decision_key", "decision_path", "read_decision", "write_decision"]
