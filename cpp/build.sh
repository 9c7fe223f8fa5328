#!/usr/bin/env bash
# Build the vitdeploy C++ library, the sam_cli example and the tests, then run ctest.
#
#   bash cpp/build.sh [BUILD_DIR]          (default BUILD_DIR: cpp/build, git-ignored; reused between runs)
#
# Environment:
#   PYTHON         Python whose 'onnxruntime' wheel provides libonnxruntime (default: python3)
#   TENSORRT_ROOT  a TensorRT 10/11 install: builds the TensorRT backend too (found on the system otherwise)
#   JOBS           parallel compile jobs (default: all cores)
#   CMAKE_ARGS     extra cmake arguments, e.g. "-DVITDEPLOY_WITH_TENSORRT=ON" to fail when TensorRT is missing
#   SKIP_CTEST=1   build only
#   VITDEPLOY_GOLDEN_DIR  golden outputs from the Python runtime (tests/cpp/test_cpp.py sets it); without it the
#                  golden ctest suites are reported as skipped
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-$here/build}"
python="$(command -v "${PYTHON:-python3}")"
bash "$here/scripts/fetch_debian_headers.sh" "$build/_deps"  # ONNX Runtime's and nlohmann/json's headers
# shellcheck disable=SC2086
cmake -S "$here" -B "$build" -DVITDEPLOY_PYTHON="$python" ${TENSORRT_ROOT:+-DTENSORRT_ROOT="$TENSORRT_ROOT"} ${CMAKE_ARGS:-}
cmake --build "$build" -j "${JOBS:-$(nproc)}"
if [ "${SKIP_CTEST:-0}" != 1 ]; then
    ctest --test-dir "$build" --output-on-failure
fi
