#!/usr/bin/env bash
# scripts/gpu-check.sh on a lent GPU machine that reaches no package index and takes at most 64 MiB of
# carried files a call: TensorRT for RTX's libs wheel (95 MB) travels in two pieces over two calls.
#
# Here, once (wheels for the GPU machine's Python 3.12, into the git-ignored .whl/):
#   scripts/gpu-lease.sh prepare          # .whl/a: first piece + small wheels; .whl/b: second piece + bindings
# There, two calls back to back on the same warm machine:
#   scripts/gpu-lease.sh files            # carry .whl/a: installs, exports SAM ViT-B + decoder, FP16/INT8 passes
#   scripts/gpu-lease.sh engines          # carry .whl/b: joins the wheel, builds, runs and checks the engines
#
# ONNX Runtime's CUDA provider instead (onnxruntime-gpu, 256 MB: five pieces over five calls; the exports run in the
# background on that machine while the pieces travel):
#   scripts/gpu-lease.sh ort-prepare      # .whl/ort/p0..p4: the pieces (p0 with the small wheels); .whl/c: what travels
#   scripts/gpu-lease.sh ort-next N       # here, before call N (0..4): puts piece N in .whl/c
#   scripts/gpu-lease.sh ort-dirs         # or once: .whl/c0..c4, one per call, so no step runs here between calls;
#                                         # call N carries .whl/cN and starts with: mkdir -p .whl/c && cp .whl/cN/* .whl/c/
#   (MODEL=sam3 before ort-first and ort-run: SAM 3's vision encoder instead of SAM ViT-B; on the H200 on 2026-11-28
#    the five calls took 9 min of device time, 7.7 min of it the last: exports 79 s, FP16 pass 205 s, checks 3 min)
#   scripts/gpu-lease.sh ort-first        # there, call 0 (carry .whl/c): installs, starts the exports, returns
#   scripts/gpu-lease.sh ort-piece        # there, calls 1..3: keeps the piece
#   scripts/gpu-lease.sh ort-run          # there, call 4: joins and installs the wheel, waits for the exports, runs
#                                         # the ONNX Runtime CUDA parity and benchmark steps of gpu-check.sh
# Everything lands in $GC (default /tmp/gc on that machine) and the report and logs are copied to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
GC="${GC:-/tmp/gc}"
STAGE=/tmp/vitdeploy-stage
RTX=1.7.1.116

# Wheels for the GPU machine's Python 3.12, and the small ones every lease carries.
WHEEL_TARGET=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
              --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
# (sam3 and what it imports that the GPU machine's image lacks: MODEL=sam3 runs SAM 3's vision encoder.)
SMALL_WHEELS=(segment-anything==1.0 polygraphy==0.53.6 onnxconverter-common==1.16.0
              sam3==0.1.4 ftfy==6.3.1 wcwidth==0.9.4 iopath==0.1.10 pycocotools==2.0.11)

# download WHEEL...: WHEEL... and the small wheels into the git-ignored .whl/dl.
download() {
    mkdir -p .whl/dl
    grep -qx '/.whl/' .git/info/exclude || echo /.whl/ >> .git/info/exclude
    local spec binary=() source=()
    for spec in "${SMALL_WHEELS[@]}"; do
        case "$spec" in iopath==*) source+=("$spec") ;; *) binary+=("$spec") ;; esac  # iopath: source only, pure Python
    done
    python3 -m pip download -q --no-deps "${WHEEL_TARGET[@]}" -d .whl/dl "$@" "${binary[@]}" || return 1
    python3 -m pip wheel -q --no-deps -w .whl/dl "${source[@]}"
}
copy_small_wheels() {
    local spec
    for spec in "${SMALL_WHEELS[@]}"; do cp .whl/dl/"$(echo "${spec%%==*}" | tr - _)"-*.whl "$1"/ || return 1; done
}
# site_install WHEEL...: into /tmp/site, the PYTHONPATH of every step there.
site_install() { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$@"; }

prepare() {
    mkdir -p .whl/a .whl/b
    download "tensorrt-rtx-cu13-libs==$RTX" "tensorrt-rtx-cu13-bindings==$RTX"
    local libs=(.whl/dl/tensorrt_rtx_cu13_libs-*.whl)
    split -n 2 -d "${libs[0]}" ".whl/dl/$(basename "${libs[0]}").part"
    mv .whl/dl/*.part00 .whl/a/ && mv .whl/dl/*.part01 .whl/b/
    copy_small_wheels .whl/a
    cp .whl/dl/tensorrt_rtx_cu13_bindings-*.whl .whl/b/
    du -sh .whl/a .whl/b
}

# install DIR [TREE]: what DIR carried into $STAGE, its wheels into /tmp/site, and vitdeploy from TREE (default: this
# checkout) editable (its recipes and images are data packages).
install() {
    mkdir -p "$STAGE" "$GC"
    cp "$1"/* "$STAGE"/
    local wheels=("$STAGE"/*.whl)
    site_install "${wheels[@]}" || exit 1
    python3 -m pip install -q --no-index --no-deps --no-build-isolation -e "${2:-.}" > /dev/null || exit 1
}

collect() {
    [ -n "${OUT:-}" ] || return 0
    cp "$GC"/report.md "$GC"/report.json "$GC"/gpu_engines.json "$GC"/gpu_sam3_vision.json "$OUT"/ 2>/dev/null
    tar czf "$OUT/logs.tgz" -C "$GC" logs steps.tsv $(cd "$GC" && ls ./*.json 2>/dev/null) 2>/dev/null
}

ORT_GPU=1.31.1
ort_prepare() {
    mkdir -p .whl/ort .whl/c
    download "onnxruntime-gpu==$ORT_GPU"
    split -n 5 -d -a 1 .whl/dl/onnxruntime_gpu-*.whl .whl/ort/onnxruntime_gpu.whl.part
    du -sh .whl/ort
}
ort_next() {  # here: .whl/c holds piece $1 (and with piece 0 the small wheels)
    rm -rf .whl/c && mkdir -p .whl/c
    cp .whl/ort/*.part"$1" .whl/c/
    [ "$1" != 0 ] || copy_small_wheels .whl/c
    du -sh .whl/c
}
# The CUDA 13 libraries PyTorch brought (cuBLAS, cuDNN, cuFFT, cuRAND, the runtime), for ONNX Runtime's CUDA provider.
cuda_library_path() {
    find "$(python3 -c 'import site; print(site.getsitepackages()[0])')/nvidia" -name 'lib*.so*' -printf '%h\n' 2>/dev/null \
        | sort -u | paste -sd:
}

export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
case "${1:-}" in
    ort-prepare) ort_prepare ;;
    ort-next) ort_next "${2:?piece number}" ;;
    ort-dirs) for n in 0 1 2 3 4; do ort_next "$n" > /dev/null && rm -rf ".whl/c$n" && mv .whl/c ".whl/c$n"; done; du -sh .whl/c? ;;
    ort-first)
        nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
        # a copy of this checkout, installed from there: the exports read it after the call returns, while the next
        # calls copy the working tree again
        mkdir -p /tmp/vitdeploy-tree && tar --exclude=./.whl -cf - . | tar -C /tmp/vitdeploy-tree -xf - || exit 1
        install .whl/c /tmp/vitdeploy-tree
        cd /tmp/vitdeploy-tree && setsid bash -c "FILES_ONLY=1 SKIP_INT8=1 SKIP_DYNAMIC=1 OUT_DIR=$GC PYTHON=python3 SKIP_INSTALL=1 \
            bash scripts/gpu-check.sh > $GC/files.log 2>&1; echo \$? > $GC/files.rc" < /dev/null > /dev/null 2>&1 &
        sleep 5; echo "exports started in the background: $GC/files.log" ;;
    ort-piece) cp .whl/c/*.part* "$STAGE"/ && ls -la "$STAGE"; tail -n 3 "$GC/files.log" ;;
    ort-run)
        cp .whl/c/*.part* "$STAGE"/
        cat "$STAGE"/onnxruntime_gpu.whl.part? > "$STAGE/onnxruntime_gpu-$ORT_GPU-cp312-cp312-manylinux_2_28_x86_64.whl" || exit 1
        site_install "$STAGE/onnxruntime_gpu-$ORT_GPU-cp312-cp312-manylinux_2_28_x86_64.whl" || exit 1
        export LD_LIBRARY_PATH="$(cuda_library_path):${LD_LIBRARY_PATH:-}"
        python3 -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())"
        while [ ! -f "$GC/files.rc" ]; do sleep 2; done
        echo "exports: exit $(cat "$GC/files.rc")"; tail -n 12 "$GC/files.log"
        cp "$GC/steps.tsv" "$GC/files.steps.tsv"
        # CHECK_LIMIT (seconds): stop the check in time to bring back what it wrote (the call's own limit loses it all)
        cd /tmp/vitdeploy-tree && REUSE=1 SKIP_INT8=1 SKIP_DYNAMIC=1 SKIP_PYTEST=1 OUT_DIR="$GC" PYTHON=python3 SKIP_INSTALL=1 \
            RUNS="${RUNS:-30}" WARMUP="${WARMUP:-5}" timeout "${CHECK_LIMIT:-86400}" bash scripts/gpu-check.sh
        rc=$?; cat "$GC/files.steps.tsv"; collect; cp "$GC/files.log" "$OUT/" 2>/dev/null; exit $rc ;;
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
        site_install "$STAGE"/tensorrt_rtx_cu13_libs-*.whl || exit 1
        REUSE=1 OUT_DIR="$GC" PYTHON=python3 SKIP_INSTALL=1 RUNS="${RUNS:-50}" \
            PYTEST_PATHS="tests/engine tests/runtime/backends/test_engine_runner_interface.py" bash scripts/gpu-check.sh
        rc=$?; collect; exit $rc ;;
    *) echo "usage: scripts/gpu-lease.sh prepare|files|engines|ort-prepare|ort-next N|ort-dirs|ort-first|ort-piece|ort-run" >&2; exit 2 ;;
esac
