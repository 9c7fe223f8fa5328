"""Artifact metadata: what every file vitdeploy writes carries, so a runtime needs nothing else.

Stored as string key/value pairs in ONNX ``metadata_props`` (prefix ``vitdeploy.``) and in the JSON
sidecar next to a TensorRT engine. Non-string values are JSON-encoded. The keys are a contract with
the runtime (Python and C++): add keys, never rename them.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Mapping
from typing import Any

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


def tool_versions() -> dict[str, str]:
    """Versions of the tools that shaped an artifact (those importable here)."""
    import vitdeploy

    versions = {"vitdeploy": vitdeploy.__version__, "python": platform.python_version()}
    for module in ("torch", "onnx", "onnxruntime", "onnxscript", "segment_anything", "timm"):
        try:
            mod = __import__(module)
        except ImportError:
            continue
        versions[module] = str(getattr(mod, "__version__", "unknown"))
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


def read_onnx_metadata(path: str) -> dict[str, Any]:
    """Metadata of an ONNX file, without loading its weights."""
    import onnx

    model = onnx.load(path, load_external_data=False)
    return decode({p.key: p.value for p in model.metadata_props})


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
        "precision": "fp32",
        "random_weights": random_seed is not None,
        "random_seed": random_seed,
        "checkpoint": checkpoint_name,
        "checkpoint_sha256": checkpoint_sha256,
        "architecture": architecture,
        **family_keys,
        "vitdeploy_version": versions["vitdeploy"],
        "tool_versions": versions,
    }
