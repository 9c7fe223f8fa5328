"""Which TensorRT is installed, and what that version allows: lazy imports with errors for people.

TensorRT 11 removed weak typing (``BuilderFlag.FP16/INT8/BF16``, INT8 calibrators, precision
constraints): every network is strongly typed and ``NetworkDefinitionCreationFlag.STRONGLY_TYPED``
is kept only for API compatibility (ignored). So the legacy weakly typed FP16 build exists only on
TensorRT 10, and is decided here from the installed version, never probed by calling a removed API.
"""

from __future__ import annotations

import re
from types import ModuleType

from vitdeploy.errors import MissingDependencyError

TENSORRT_INSTALL_HINT = (
    "install NVIDIA TensorRT 10 or 11 for Python on a machine with an NVIDIA GPU and driver "
    "('pip install tensorrt', or JetPack on Jetson), then 'pip install vitdeploy[tensorrt]'"
)
POLYGRAPHY_INSTALL_HINT = "pip install 'vitdeploy[tensorrt]' (or: pip install polygraphy)"

#: First TensorRT major version without the weak-typing precision flags.
WEAK_TYPING_REMOVED_IN = 11
#: Oldest TensorRT major version this code is written against.
MIN_TENSORRT_MAJOR = 10


def import_tensorrt(purpose: str) -> ModuleType:
    """``import tensorrt``, or MissingDependencyError naming what to install.

    A wheel whose native libraries are missing raises OSError rather than ImportError; both mean
    "not usable here", and the original message is kept in the hint.
    """
    try:
        import tensorrt
    except ImportError as exc:
        raise MissingDependencyError("tensorrt", purpose, TENSORRT_INSTALL_HINT) from exc
    except OSError as exc:  # libnvinfer.so present in the wheel list but not loadable
        raise MissingDependencyError("tensorrt", purpose, f"its libraries do not load ({exc}); {TENSORRT_INSTALL_HINT}") from exc
    major = parse_version(tensorrt.__version__)[:1]
    if major and major[0] < MIN_TENSORRT_MAJOR:
        raise MissingDependencyError(
            "tensorrt>=10", purpose, f"TensorRT {tensorrt.__version__} is too old; {TENSORRT_INSTALL_HINT}"
        )
    return tensorrt


def import_polygraphy_trt(purpose: str) -> ModuleType:
    """``polygraphy.backend.trt`` (Polygraphy's TensorRT loaders), or MissingDependencyError."""
    try:
        from polygraphy.backend import trt as polygraphy_trt
    except ImportError as exc:
        raise MissingDependencyError("polygraphy", purpose, POLYGRAPHY_INSTALL_HINT) from exc
    return polygraphy_trt


def installed_tensorrt_version() -> tuple[str | None, str]:
    """(version, note): the importable TensorRT's version, or None and why it is not usable."""
    try:
        module = import_tensorrt("TensorRT")
    except MissingDependencyError as exc:
        return None, str(exc).replace("TensorRT needs the 'tensorrt' package, which is ", "")
    return str(module.__version__), "importable"


def parse_version(text: str) -> tuple[int, ...]:
    """``"10.13.0.35"`` -> ``(10, 13, 0, 35)``; stops at the first part without leading digits."""
    parts = []
    for piece in str(text).split("."):
        match = re.match(r"\d+", piece)
        if not match:
            break
        parts.append(int(match.group()))
    return tuple(parts)


def release(text: str) -> tuple[int, ...]:
    """Major, minor, patch of a TensorRT version (the build number is packaging, not the release)."""
    return parse_version(text)[:3]


def weak_typing_available(version: str) -> bool:
    """Whether this TensorRT still has the weakly typed precision flags (TensorRT 10 and older)."""
    parsed = parse_version(version)
    return bool(parsed) and parsed[0] < WEAK_TYPING_REMOVED_IN
