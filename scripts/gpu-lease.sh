#!/usr/bin/env bash
# scripts/gpu-check.sh on a lent GPU machine that reaches no package index and takes at most 64 MiB of
# carried files a call: TensorRT for RTX's libs wheel (95 MB) travels in two pieces over two calls.
#
# Here, once (wheels for the GPU machine's Python 3.12, into the git-ignored .whl/):
#   scripts/gpu-lease.sh prepare          # .whl/a: first piece + small wheels; .whl/b: second piece + bindings
# There, two calls back to back on the same warm machine:
#   scripts/gpu-lease.sh files            # carry .whl/a: installs, exports SAM ViT-B + decoder, FP16/INT8 passes
#   scripts/gpu-lease.sh engines          # carry .whl/b: joins the wheel, builds, runs and checks the engines
# Everything lands in $GC (default /tmp/gc on that machine) and the report and logs are copied to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
GC="${GC:-/tmp/gc}"
STAGE=/tmp/vitdeploy-stage
RTX=1.7.1.116

prepare() {
    local py=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
              --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
    mkdir -p .whl/a .whl/b .whl/dl
    grep -qx '/.whl/' .git/info/exclude || echo /.whl/ >> .git/info/exclude
    python3 -m pip download -q --no-deps "${py[@]}" -d .whl/dl "tensorrt-rtx-cu13-libs==$RTX" \
        "tensorrt-rtx-cu13-bindings==$RTX" segment-anything==1.0 polygraphy==0.53.6 onnxconverter-common==1.16.0
    local libs=(.whl/dl/tensorrt_rtx_cu13_libs-*.whl)
    split -n 2 -d "${libs[0]}" ".whl/dl/$(basename "${libs[0]}").part"
    mv .whl/dl/*.part00 .whl/a/ && mv .whl/dl/*.part01 .whl/b/
    cp .whl/dl/segment_anything-*.whl .whl/dl/polygraphy-*.whl .whl/dl/onnxconverter_common-*.whl .whl/a/
    cp .whl/dl/tensorrt_rtx_cu13_bindings-*.whl .whl/b/
    du -sh .whl/a .whl/b
}

# install: the wheels of this call into /tmp/site, vitdeploy itself editable (its recipes and images are data packages).
install() {
    mkdir -p "$STAGE" "$GC"
    cp "$1"/* "$STAGE"/
    local wheels=("$STAGE"/*.whl)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "${wheels[@]}" || exit 1
    python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . > /dev/null || exit 1
}

collect() {
    [ -n "${OUT:-}" ] || return 0
    cp "$GC"/report.md "$GC"/report.json "$GC"/gpu_engines.json "$OUT"/ 2>/dev/null
    tar czf "$OUT/logs.tgz" -C "$GC" logs steps.tsv $(cd "$GC" && ls ./*.json 2>/dev/null) 2>/dev/null
}

export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
case "${1:-}" in
    prepare) prepare ;;
    files)
        nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
        python3 -c "import torch, onnx, onnxruntime; print('torch', torch.__version__, torch.version.cuda, 'onnx', onnx.__version__, 'onnxruntime', onnxruntime.__version__)"
        install .whl/a
        FILES_ONLY=1 REUSE=1 OUT_DIR="$GC" PYTHON=python3 SKIP_INSTALL=1 bash scripts/gpu-check.sh
        rc=$?; collect; exit $rc ;;
    engines)
        install .whl/b
        parts=("$STAGE"/*.part00)
        cat "${parts[0]}" "${parts[0]%00}01" > "${parts[0]%.part00}" && rm "$STAGE"/*.part0?
        python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site --upgrade "$STAGE"/tensorrt_rtx_cu13_libs-*.whl || exit 1
        REUSE=1 OUT_DIR="$GC" PYTHON=python3 SKIP_INSTALL=1 RUNS="${RUNS:-50}" \
            PYTEST_PATHS="tests/engine tests/runtime/backends/test_engine_runner_interface.py" bash scripts/gpu-check.sh
        rc=$?; collect; exit $rc ;;
    *) echo "usage: scripts/gpu-lease.sh prepare|files|engines" >&2; exit 2 ;;
esac
