"""Which packages are optional and how to get them.

``pip install vitdeploy`` is the runtime (ONNX Runtime, ONNX, NumPy, Pillow, click: predict, segment-all,
inspect, calibrate without eager parity, benchmark without the eager baseline, doctor). PyTorch and the
official model packages come with the ``torch`` extra; the verbs that rebuild the eager official model
(export, validate, benchmark's eager row, calibrate's eager parity) check for it before any work.
Checked with ``importlib.util.find_spec`` (nothing imported: no seconds of torch start-up).
"""

from __future__ import annotations

import importlib.util

from vitdeploy.errors import MissingDependencyError

#: Top-level modules of the ``torch`` extra (pyproject.toml), the import name of each distribution.
TORCH_SIDE_MODULES = ("torch", "torchvision", "segment_anything", "timm", "onnxscript", "safetensors")

TORCH_EXTRA_HINT = ("pip install 'vitdeploy[torch]' (without an NVIDIA GPU, take torch's CPU build first (no CUDA libraries): "
                    "pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu)")


def missing_torch_side() -> list[str]:
    """The modules of the ``torch`` extra that cannot be imported here."""
    return [name for name in TORCH_SIDE_MODULES if not _findable(name)]


def _findable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a finder that refuses the name, or a module without a spec
        return False


def require_torch_side(purpose: str, alternative: str | None = None) -> None:
    """Raise a one-line error naming the extra to install when ``purpose`` cannot run here."""
    missing = missing_torch_side()
    if missing:
        hint = TORCH_EXTRA_HINT + (f"; or {alternative}" if alternative else "")
        raise MissingDependencyError(missing[0], purpose, hint)


#: Top-level modules of the ``serve`` extra: the server's web framework, HTTP server and metrics.
SERVE_MODULES = ("fastapi", "uvicorn", "prometheus_client")


def require_serve_side() -> None:
    """Raise a one-line error naming the extra when ``vitdeploy serve`` cannot run here (checked before models load)."""
    missing = [name for name in SERVE_MODULES if not _findable(name)]
    if missing:
        raise MissingDependencyError(missing[0], "vitdeploy serve", "pip install 'vitdeploy[serve]'")


def torch_side_module(exc: ImportError) -> str | None:
    """The torch-extra module an ImportError is about, or None (for the CLI's last-resort handler)."""
    name = (getattr(exc, "name", None) or "").split(".")[0]
    return name if name in TORCH_SIDE_MODULES else None
