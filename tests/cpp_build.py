"""Building cpp/ for the tests: one ``cpp/build.sh`` run per session, shared by the C++ app tests
(tests/cpp/test_cpp.py) and the fused attention kernel tests (tests/runtime/forms/test_relpos_kernel.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CPP = Path(__file__).resolve().parents[1] / "cpp"
BUILD = CPP / "build"


def toolchain_missing() -> str | None:
    """Why cpp/ cannot be built here, or None."""
    if not shutil.which("cmake"):
        return "cmake is not installed (apt-get install cmake)"
    if not (shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")):
        return "no C++ compiler is installed (apt-get install g++)"
    return None


def run_build_sh(build: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    """``cpp/build.sh BUILD`` without ctest, with this Python's onnxruntime (configure + build; incremental)."""
    env = dict(os.environ, PYTHON=sys.executable, SKIP_CTEST="1", JOBS=str(os.cpu_count() or 2))
    return subprocess.run(["bash", str(CPP / "build.sh"), str(build)], env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def cpp_build() -> Path:
    """cpp/build after ``cpp/build.sh``: the library, sam_cli, the ctest suites and libvitdeploy_ort_ops.so. One
    build at a time (``pytest -n``'s workers share cpp/build): the first worker builds, the next finds it built."""
    import fcntl

    BUILD.mkdir(parents=True, exist_ok=True)
    with open(BUILD / ".tests.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = run_build_sh(BUILD)
    assert done.returncode == 0, f"C++ build failed:\n{done.stdout[-6000:]}\n{done.stderr[-6000:]}"
    assert "TensorRT backend: " in done.stdout, "CMake must report whether the TensorRT backend is built"
    return BUILD
