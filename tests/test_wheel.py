"""A wheel that works outside the checkout: built with pip, installed into a fresh venv elsewhere, it
exports from its own recipes, predicts and calibrates on its own bundled images."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(cmd: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    # No build isolation: the build uses this venv's (locked) setuptools and needs no index.
    _run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q", "-w", str(dist)], dist)
    (built,) = dist.glob("vitdeploy-*.whl")
    return built


def test_wheel_carries_recipes_and_calibration_images(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    recipes = {Path(n).stem for n in names if n.startswith("vitdeploy/_recipes/") and n.endswith(".toml")}
    assert {p.stem for p in (ROOT / "export").glob("*.toml")} == recipes
    images = [n for n in names if n.startswith("vitdeploy/_calibration_images/") and n.endswith((".jpg", ".png"))]
    assert len(images) == len(list((ROOT / "calibration" / "images").glob("calib_*")))
    assert not any(n.startswith(("tests/", "benchmarks/", "cpp/")) for n in names)


def test_installed_wheel_exports_predicts_and_calibrates_elsewhere(wheel: Path, tmp_path: Path) -> None:
    venv, work = tmp_path / "venv", tmp_path / "work"
    work.mkdir()
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path)
    # Dependencies (torch, onnxruntime, ...) from this test environment's site-packages, nothing from the checkout.
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], work)
    where = _run([str(venv / "bin" / "python"), "-c", "import vitdeploy; print(vitdeploy.__file__)"], work).stdout.strip()
    assert where.startswith(str(venv)), f"vitdeploy imported from {where}, not from the installed wheel"
    vd = str(venv / "bin" / "vitdeploy")
    _run([vd, "export", "--recipe", "sam_tiny", "--random-weights", "-o", "enc.onnx"], work)
    _run([vd, "export", "--recipe", "sam_tiny_decoder", "--random-weights", "-o", "dec.onnx"], work)
    image = ROOT / "calibration" / "images" / "calib_00_landscape.jpg"
    done = _run([vd, "predict", "-e", "enc.onnx", "-d", "dec.onnx", "-i", str(image), "--point", "100,80", "-o", "mask.png"], work)
    assert (work / "mask.png").is_file() and "wrote mask" in done.stdout
    # No --images: the bundled set, read from the installed package.
    done = _run([vd, "calibrate", "enc.onnx", "-p", "int8", "-o", "enc.int8.onnx", "--no-eager", "--cache-dir", "cache"], work)
    assert (work / "enc.int8.onnx").is_file() and "_calibration_images" in done.stdout + done.stderr
