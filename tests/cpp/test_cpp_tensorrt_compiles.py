"""The C++ TensorRT backend compiles for x86-64 and for aarch64 (a Jetson's CPU) against given TensorRT headers.

No GPU and no libnvinfer are needed: ``cpp/src/tensorrt_backend.cpp`` is compiled with warnings as errors, not linked
(``tests/cpp/test_cpp_tensorrt.py`` builds and runs it where TensorRT and a GPU are). The headers come from
``VITDEPLOY_TENSORRT_INCLUDE`` (the folder holding ``NvInferRuntime.h``: a TensorRT tar install's ``include/``,
JetPack's ``/usr/include/aarch64-linux-gnu``, or the public ``include/`` of github.com/NVIDIA/TensorRT at a release
branch), the CUDA runtime's from ``CUDA_HOME`` (default ``/usr/local/cuda``; its headers are the same on both
architectures). Skipped, with the reason, where either is missing or the cross compiler is not installed
(``apt-get install g++-aarch64-linux-gnu``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

CPP = Path(__file__).resolve().parents[2] / "cpp"
HEADERS = os.environ.get("VITDEPLOY_TENSORRT_INCLUDE", "")
CUDA_INCLUDE = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"


def _version(include: Path) -> str:
    """``10.3.0`` from NvInferVersion.h (TensorRT 10's NV_TENSORRT_* or 11's TRT_*_ENTERPRISE defines)."""
    text = (include / "NvInferVersion.h").read_text()
    parts = [re.search(rf"#define (?:NV_TENSORRT|TRT)_{part}(?:_ENTERPRISE)? (\d+)", text) for part in
             ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) if m else "?" for m in parts)


@pytest.mark.parametrize("compiler", ["g++", "aarch64-linux-gnu-g++"])
def test_the_tensorrt_backend_compiles_against_the_given_headers(compiler: str) -> None:
    if not HEADERS:
        pytest.skip("VITDEPLOY_TENSORRT_INCLUDE is not set (the folder holding TensorRT's NvInferRuntime.h)")
    include = Path(HEADERS)
    if not (include / "NvInferRuntime.h").is_file():
        pytest.skip(f"no NvInferRuntime.h in VITDEPLOY_TENSORRT_INCLUDE={include}")
    if not (CUDA_INCLUDE / "cuda_runtime_api.h").is_file():
        pytest.skip(f"no cuda_runtime_api.h in {CUDA_INCLUDE} (set CUDA_HOME)")
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} is not installed")
    done = subprocess.run(
        [compiler, "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", "-DVITDEPLOY_WITH_TENSORRT",
         f"-I{CPP / 'include'}", "-isystem", str(include), "-isystem", str(CUDA_INCLUDE),
         str(CPP / "src" / "tensorrt_backend.cpp")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"TensorRT {_version(include)}, {compiler}:\n{done.stderr[-4000:]}"
    print(f"TensorRT {_version(include)} headers: tensorrt_backend.cpp compiles with {compiler}")
