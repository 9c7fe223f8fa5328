"""A wheel that works outside the checkout: built with pip, installed into a fresh venv elsewhere, it
exports from its own recipes, predicts and calibrates on its own bundled images."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.sam_tiny import TinySamArtifacts

pytest_plugins = ["tests.sam_tiny_fixtures"]

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


def test_wheel_carries_recipes_calibration_images_and_runtime_facts(wheel: Path) -> None:
    archive = zipfile.ZipFile(wheel)
    names = set(archive.namelist())
    # the facts the C++ library compiles in too, byte for byte the checkout's
    assert archive.read("vitdeploy/data/runtime_facts.json") == (ROOT / "vitdeploy" / "data" / "runtime_facts.json").read_bytes()
    recipes = {Path(n).stem for n in names if n.startswith("vitdeploy/_recipes/") and n.endswith(".toml")}
    assert {p.stem for p in (ROOT / "export").glob("*.toml")} == recipes
    images = [n for n in names if n.startswith("vitdeploy/_calibration_images/") and n.endswith((".jpg", ".png"))]
    assert len(images) == len(list((ROOT / "calibration" / "images").glob("calib_*")))
    assert not any(n.startswith(("tests/", "benchmarks/", "cpp/")) for n in names)
    page = ROOT / "vitdeploy" / "runtime" / "apps" / "serving" / "page"  # the server's page: every asset in the wheel
    assert {p.relative_to(ROOT).as_posix() for p in page.rglob("*") if p.is_file()} == \
        {n for n in names if n.startswith("vitdeploy/runtime/apps/serving/page/")}


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


def _requires_dist(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        (meta,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        text = archive.read(meta).decode()
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Requires-Dist:")]


def _runtime_closure(requirements: list[str]) -> dict[str, importlib.metadata.Distribution]:
    """The installed distributions a plain 'pip install <wheel>' pulls in (no extras), transitively."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found: dict[str, importlib.metadata.Distribution] = {}
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        key = canonicalize_name(req.name)
        if key in found:
            continue
        found[key] = importlib.metadata.distribution(req.name)
        todo += [Requirement(r) for r in found[key].requires or []]
    return found


def test_runtime_only_install_runs_the_runtime_verbs_without_torch(wheel: Path, tiny_sam_artifacts: TinySamArtifacts,
                                                                   tmp_path: Path) -> None:
    """'pip install vitdeploy' without extras: the runtime verbs work with no PyTorch anywhere, and the
    PyTorch-side verbs answer with the extra to install (exit 1, one line), before any work."""
    base = _requires_dist(wheel)
    closure = _runtime_closure(base)
    assert not {"torch", "torchvision", "segment-anything", "timm", "onnxscript", "safetensors"} & set(closure), sorted(closure)
    # A site directory holding exactly those distributions (links into this environment's site-packages).
    deps = tmp_path / "deps"
    deps.mkdir()
    size = 0
    for dist in closure.values():
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops:
            source = Path(dist.locate_file(top))
            if source.exists() and not (deps / top).exists():
                (deps / top).symlink_to(source)
                size += sum(p.stat().st_size for p in source.rglob("*") if p.is_file()) if source.is_dir() else source.stat().st_size
    print(f"runtime closure: {len(closure)} distributions, {size / 1e6:.0f} MB: {', '.join(sorted(closure))}")
    venv, work = tmp_path / "venv", tmp_path / "work"
    work.mkdir()
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path)
    python = str(venv / "bin" / "python")
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "deps.pth").write_text(f"{deps}\n")
    _run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], work)
    probe = subprocess.run([python, "-c", "import torch"], capture_output=True, text=True, cwd=work)
    assert probe.returncode != 0 and "No module named 'torch'" in probe.stderr

    encoder, decoder = tiny_sam_artifacts.encoder, tiny_sam_artifacts.decoder  # exported here, with torch
    vd = str(venv / "bin" / "vitdeploy")
    image = ROOT / "calibration" / "images" / "calib_00_landscape.jpg"
    done = _run([vd, "predict", "-e", str(encoder), "-d", str(decoder), "-i", str(image), "--point", "100,80", "-o", "mask.png"], work)
    assert (work / "mask.png").is_file() and "wrote mask" in done.stdout
    _run([vd, "segment-all", "-e", str(encoder), "-d", str(decoder), "-i", str(image), "-o", "all.json", "--points-per-side", "4"], work)
    assert (work / "all.json").is_file()
    refused = subprocess.run([vd, "serve", "-e", str(encoder), "-d", str(decoder), "--port", "0"], cwd=work,
                             capture_output=True, text=True, timeout=120)  # the server is the 'serve' extra
    assert refused.returncode == 1 and "pip install 'vitdeploy[serve]'" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    assert "inputs" in _run([vd, "inspect", str(encoder)], work).stdout
    _run([vd, "calibrate", str(encoder), "-p", "fp16", "-o", "enc.fp16.onnx", "--no-eager", "--cache-dir", "cache"], work)
    _run([vd, "benchmark", str(encoder), "--no-eager", "--runs", "2", "--warmup", "0"], work)
    doctor = _run([vd, "doctor"], work).stdout
    assert "vitdeploy[torch]" in doctor and "export         unavailable" in doctor

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    for verb in (["export", "-r", "sam_tiny", "--random-weights", "-o", "x.onnx"], ["validate", str(encoder)],
                 ["calibrate", str(encoder), "-p", "int8", "-o", "x.int8.onnx"], ["benchmark", str(encoder)]):
        failed = subprocess.run([vd, *verb], cwd=work, env=env, capture_output=True, text=True, timeout=120)
        assert failed.returncode == 1, (verb, failed.stdout, failed.stderr)
        lines = failed.stderr.strip().splitlines()
        assert len(lines) == 1 and "needs the 'torch' package" in lines[0] and "vitdeploy[torch]" in lines[0], (verb, failed.stderr)
        assert not (work / "x.onnx").exists() and not (work / "x.int8.onnx").exists()
