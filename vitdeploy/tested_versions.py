"""The versions of the packages vitdeploy imports that its test suite has passed with.

``requirements.lock`` at the top of the checkout holds the full locked set the README's commands
install (the first version of each entry below is the locked one; a test keeps them equal). Further
versions listed were also run through the whole suite (see README, "Tested versions").
``vitdeploy doctor`` compares what is installed against this table without importing anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

#: distribution name -> versions the suite passed with (locked first).
TESTED: dict[str, tuple[str, ...]] = {
    "torch": ("2.14.1",),
    "torchvision": ("0.29.1",),
    "segment-anything": ("1.0",),
    "sam2": ("1.1.0",),
    "sam3": ("0.1.4",),
    "timm": ("1.0.31",),
    "onnx": ("1.23.2",),
    "onnxscript": ("0.7.2",),
    "onnx-ir": ("1.1.0",),
    "onnxruntime": ("1.32.0", "1.31.1"),
    "onnxconverter-common": ("1.16.0",),
    "numpy": ("2.4.6",),
    "protobuf": ("7.36.2",),
    "ml_dtypes": ("0.6.0",),
    "click": ("8.5.1",),
    "safetensors": ("0.8.0",),
    "pillow": ("13.0.0",),
    "polygraphy": ("0.53.6",),
    "openvino": ("2026.4.1",),
    "tensorrt-rtx-cu13-bindings": ("1.7.1.116",),
}


@dataclass(frozen=True)
class VersionDrift:
    """An installed package whose version the suite has not been run with."""

    package: str
    installed: str
    tested: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.package} {self.installed} (tested: {', '.join(self.tested)})"


#: Distributions that install the same importable package under another name (onnxruntime-gpu's module is
#: ``onnxruntime``, same release numbers): their versions are checked against the package's row.
ALTERNATIVE_DISTRIBUTIONS: dict[str, tuple[str, ...]] = {"onnxruntime": ("onnxruntime-gpu",)}


def _imported_distribution_version(name: str) -> str | None:
    """Version of the distribution whose files Python would import for ``name``, where several provide it
    (onnxruntime and onnxruntime-gpu side by side: the one first on sys.path wins). Located, not imported."""
    from importlib.metadata import distribution
    from importlib.util import find_spec

    spec = find_spec(name)
    folder = Path(spec.origin).resolve().parents[1] if spec is not None and spec.origin else None  # its site-packages
    found = []
    for dist_name in (name, *ALTERNATIVE_DISTRIBUTIONS[name]):
        try:
            dist = distribution(dist_name)
        except PackageNotFoundError:
            continue
        if Path(str(dist.locate_file(""))).resolve() == folder:
            return dist.version
        found.append(dist.version)
    return found[0] if found else None


def installed_versions(packages: list[str] | None = None) -> dict[str, str | None]:
    """Installed version of each package (None when absent), from package metadata: nothing is imported."""
    out: dict[str, str | None] = {}
    for name in packages or list(TESTED):
        if name in ALTERNATIVE_DISTRIBUTIONS:
            out[name] = _imported_distribution_version(name)
            continue
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def version_drift(installed: dict[str, str | None] | None = None) -> list[VersionDrift]:
    """Installed packages outside the tested set (absent ones are not drift: doctor reports them as missing)."""
    installed = installed if installed is not None else installed_versions()
    return [VersionDrift(name, v, TESTED[name]) for name, v in installed.items()
            if v is not None and name in TESTED and v not in TESTED[name]]


__all__ = ["ALTERNATIVE_DISTRIBUTIONS", "TESTED", "VersionDrift", "installed_versions", "version_drift"]
