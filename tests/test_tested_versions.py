"""The tested-version table doctor checks against agrees with requirements.lock, and drift is reported."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from vitdeploy.tested_versions import TESTED, VersionDrift, version_drift

LOCK = Path(__file__).resolve().parents[1] / "requirements.lock"


def _lock() -> dict[str, str]:
    pins = {}
    for line in LOCK.read_text().splitlines():
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^\s;]+)", line.strip())
        if match:
            pins[match.group(1).lower().replace("_", "-")] = match.group(2)
    return pins


def test_the_locked_version_is_the_first_tested_one() -> None:
    pins = _lock()
    for package, versions in TESTED.items():
        key = package.lower().replace("_", "-")
        assert key in pins, f"{package} is in the tested table but not in requirements.lock"
        assert pins[key] == versions[0], f"{package}: lock {pins[key]}, tested table {versions}"


def test_drift_names_the_package_and_the_tested_versions() -> None:
    installed = {"onnxruntime": "9.9.9", "torch": TESTED["torch"][0], "timm": None}
    drift = version_drift(installed)
    assert drift == [VersionDrift("onnxruntime", "9.9.9", TESTED["onnxruntime"])]
    assert str(drift[0]).startswith("onnxruntime 9.9.9 (tested: ")


def test_onnxruntime_gpu_is_checked_as_onnxruntime_and_the_imported_one_counts(tmp_path) -> None:
    """onnxruntime-gpu installs the module ``onnxruntime``: doctor must read its version (seen on the GPU machine:
    both installed, the CPU one's 1.30.0 reported while onnxruntime-gpu 1.31.1 was the one imported)."""
    (tmp_path / "onnxruntime").mkdir()
    (tmp_path / "onnxruntime" / "__init__.py").write_text("")
    info = tmp_path / "onnxruntime_gpu-9.9.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: onnxruntime-gpu\nVersion: 9.9.9\n")
    code = ("from vitdeploy.tested_versions import installed_versions, version_drift; v = installed_versions(['onnxruntime']); "
            "print(v['onnxruntime'], [str(d) for d in version_drift(v)])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert done.stdout.split()[0] == "9.9.9", done.stdout  # the distribution first on sys.path, not the venv's onnxruntime
    assert "onnxruntime 9.9.9 (tested:" in done.stdout, done.stdout
