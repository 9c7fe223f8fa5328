#!/usr/bin/env bash
# vitdeploy's torch-free runtime on 64-bit Arm (aarch64), under emulation, against the same files on x86-64.
#
#   sudo scripts/arm-check.sh [OUT]        # default OUT: build/arm-check
#   sudo scripts/arm-check.sh --prepare    # only make (or update) the arm64 root: what scripts/test.sh runs first
#
# 1. an arm64 Debian 12 root (Python 3.11, as here), made once with debootstrap and kept in
#    $VITDEPLOY_ARM_ROOT (default /var/cache/vitdeploy/arm64-root), with the runtime install of
#    requirements-aarch64.lock in /opt/vitdeploy-venv (reinstalled when the lock changes);
# 2. the tiny models exported here, on x86-64 (seeded random weights), into OUT/files;
# 3. scripts/runtime_check.py on both machines over the same files: the SAM predictor, the automatic mask generator,
#    a dataset job in one process, bad inputs, and SAM 2 video tracking (VITDEPLOY_ARM_VIDEO=0 leaves video out)
#    -> OUT/x86_64.npz and OUT/aarch64.npz
#    (aarch64 programs run through qemu-user-static's binfmt handler: the same binaries a Jetson or a Graviton runs,
#    10-50x slower, so this proves behaviour, not speed);
# 4. tests/test_arm.py compares the two (it runs this script when the root exists, else skips with the reason).
#
# Needs root (debootstrap, chroot, binfmt_misc) and Debian's qemu-user-static, binfmt-support and debootstrap
# (installed here when apt-get is there). Exit 77: this machine cannot run it (not root, no binfmt_misc).
set -euo pipefail
cd "$(dirname "$0")/.."
prepare=0
if [ "${1:-}" = --prepare ]; then prepare=1; shift; fi
out="$(realpath -m "${1:-build/arm-check}")"
root="${VITDEPLOY_ARM_ROOT:-/var/cache/vitdeploy/arm64-root}"
venv=/opt/vitdeploy-venv

say() { echo "arm-check: $*" >&2; }
cannot() { say "cannot run here: $*"; exit 77; }

[ "$(id -u)" = 0 ] || cannot "needs root (debootstrap, chroot, binfmt_misc)"
if ! command -v debootstrap >/dev/null || ! [ -x /usr/bin/qemu-aarch64-static ]; then
    command -v apt-get >/dev/null || cannot "needs qemu-user-static and debootstrap (Debian packages)"
    apt-get install -y -qq qemu-user-static binfmt-support debootstrap >/dev/null 2>&1 \
        || { apt-get update -qq && apt-get install -y -qq qemu-user-static binfmt-support debootstrap >/dev/null; }
fi
if [ ! -e /proc/sys/fs/binfmt_misc/register ]; then
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null || cannot "no binfmt_misc in this kernel"
fi
[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 \
    || cannot "qemu-aarch64 is not registered with binfmt_misc"

if [ ! -x "$root/usr/bin/python3" ]; then
    say "making the arm64 root in $root (debootstrap, about 4 min)"
    rm -rf "$root.partial"
    debootstrap --arch=arm64 --variant=minbase --include=python3,python3-venv,ca-certificates,libgomp1 bookworm \
        "$root.partial" http://deb.debian.org/debian >/dev/null
    mv "$root.partial" "$root"
fi
cp /etc/resolv.conf "$root/etc/resolv.conf"
# This machine's certificate authorities (a proxy's own included), so pip in the root trusts what pip here trusts
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
lock_hash="$(sha256sum requirements-aarch64.lock | cut -c1-16)"
if [ "$(cat "$root$venv/.lock" 2>/dev/null)" != "$lock_hash" ]; then
    say "installing the runtime (requirements-aarch64.lock) in $root$venv"
    rm -rf "$root$venv"
    chroot "$root" /usr/bin/python3 -m venv "$venv"
    cp requirements-aarch64.lock "$root/tmp/requirements.lock"
    chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/bin:/bin "$venv/bin/pip" install -q --disable-pip-version-check \
        --cert /etc/ssl/certs/ca-certificates.crt -r /tmp/requirements.lock
    echo "$lock_hash" > "$root$venv/.lock"
fi
if [ "$prepare" = 1 ]; then
    say "the arm64 root is ready in $root"
    exit 0
fi

python="${PYTHON_X86:-$(source scripts/lib/venv.sh && vitdeploy_venv dev)/bin/python}"
rm -rf "$out" && mkdir -p "$out/files"
# SAM 2's four video graphs only where the video part runs (below): each export is about 10 s of a CI core
pairs=("sam_tiny sam_enc" "sam_tiny_decoder sam_dec")
[ "${VITDEPLOY_ARM_VIDEO:-1}" = 0 ] || pairs+=("sam2_tiny v_enc" "sam2_tiny_decoder v_dec" "sam2_tiny_memory_encoder v_menc"
                                           "sam2_tiny_memory_attention v_matt")
for pair in "${pairs[@]}"; do
    set -- $pair
    "$python" -m vitdeploy export -r "$1" --random-weights -o "$out/files/$2.onnx" >/dev/null
done
# the attention form vitdeploy's fused kernel swaps into (ONNX Runtime's folded MultiHeadAttention)
"$python" -m vitdeploy export -r sam_tiny --random-weights --target onnxruntime-cpu -o "$out/files/sam_enc_ortcpu.onnx" >/dev/null
say "x86_64: $("$python" -c 'import platform; print(platform.machine())')"
start=$SECONDS
# SAM 2 video runs unless VITDEPLOY_ARM_VIDEO=0: under qemu on an AMD EPYC Zen 4 host its four graphs tracked three tiny
# frames in 19 s (2026-11-28); on an Intel Xeon host (family 6 model 207) they took more than 13 minutes for
# the same (ONNX Runtime's vector kernels ran ~1,500x slower emulated than natively there)
parts="sam_predictor,openvino,mask_generator,dataset_job,bad_inputs"
[ "${VITDEPLOY_ARM_VIDEO:-1}" = 0 ] || parts+=",video"
"$python" scripts/runtime_check.py "$out/files" "$out/x86_64.npz" "$parts"
say "x86_64 took $((SECONDS - start)) s"

# A constructed /sys and /proc/cpuinfo for the emulated CPUs: this machine's CPU count as an arm64 topology (one
# cluster of Neoverse-N1 IDs, 64 KiB L1, 1 MiB L2, a shared 32 MiB L3). Under qemu-user both are the x86 host's: with
# them ONNX Runtime's cpuinfo crashed and oneDNN made no matmul; with no /sys, OpenVINO's Arm plugin spun in its CPU
# discovery or crashed. What the programs run on is still qemu's CPU, whose features they read from the auxiliary
# vector (vitdeploy too), not from these files.
arm_cpu_files() {
    local sys="$1/sys" cpuinfo="$1/cpuinfo" n c i
    n="$(nproc)"
    rm -rf "$sys" && mkdir -p "$sys/devices/system/cpu" "$sys/devices/system/node/node0"
    for f in possible present online; do echo "0-$((n - 1))" > "$sys/devices/system/cpu/$f"; done
    echo "$n" > "$sys/devices/system/cpu/kernel_max"
    : > "$cpuinfo"
    echo "0-$((n - 1))" > "$sys/devices/system/node/node0/cpulist"
    echo 0 > "$sys/devices/system/node/online"; echo 0 > "$sys/devices/system/node/possible"
    for ((c = 0; c < n; c++)); do
        local d="$sys/devices/system/cpu/cpu$c"
        mkdir -p "$d/topology" "$d/regs/identification"
        echo 1 > "$d/online"; echo "$c" > "$d/topology/core_id"; echo 0 > "$d/topology/physical_package_id"
        echo 0 > "$d/topology/cluster_id"; echo "$c" > "$d/topology/thread_siblings_list"
        echo "0-$((n - 1))" > "$d/topology/core_siblings_list"
        printf "%x\n" $((1 << c)) > "$d/topology/thread_siblings"; printf "%x\n" $(((1 << n) - 1)) > "$d/topology/core_siblings"
        # the same Neoverse-N1 (implementer 0x41, part 0xd0c, r4p1) in /proc/cpuinfo and MIDR_EL1
        printf "processor\t: %d\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x4\nCPU part\t: 0xd0c\nCPU revision\t: 1\n\n" \
            "$c" >> "$cpuinfo"
        echo 0x00000000414fd0c1 > "$d/regs/identification/midr_el1"
        i=0
        for spec in "1 Data 64K $c" "1 Instruction 64K $c" "2 Unified 1024K $c" "3 Unified 32768K 0-$((n - 1))"; do
            set -- $spec
            mkdir -p "$d/cache/index$i"
            echo "$1" > "$d/cache/index$i/level"; echo "$2" > "$d/cache/index$i/type"; echo "$3" > "$d/cache/index$i/size"
            echo 64 > "$d/cache/index$i/coherency_line_size"; echo "$4" > "$d/cache/index$i/shared_cpu_list"
            i=$((i + 1))
        done
    done
}
mkdir -p "$root/src" "$root/out" "$root/proc" "$root/sys" "$root$PWD"
arm_cpu_files "$out/cpu"
mount --bind "$PWD" "$root/src"
mount --bind "$PWD" "$root$PWD"  # also at its own path: the C++ tests hold the absolute path of runtime_facts.json
mount --bind "$out" "$root/out"
mount -t proc proc "$root/proc"
mount --bind "$out/cpu/cpuinfo" "$root/proc/cpuinfo"
mount --bind "$out/cpu/sys" "$root/sys"
trap 'umount "$root/proc/cpuinfo" 2>/dev/null; umount "$root/src" "$root$PWD" "$root/out" "$root/proc" "$root/sys" 2>/dev/null || true' EXIT
say "aarch64 (qemu): $(chroot "$root" /usr/bin/python3 -c 'import platform; print(platform.machine())')"
start=$SECONDS
chroot "$root" /usr/bin/env -i HOME=/root PATH="$venv/bin:/usr/bin:/bin" PYTHONPATH=/src PYTHONDONTWRITEBYTECODE=1 \
    "$venv/bin/python" /src/scripts/runtime_check.py /out/files /out/aarch64.npz "$parts"
say "aarch64 took $((SECONDS - start)) s"

# The C++ library, its unit tests and sam_cli, cross-built here for aarch64 against the root as the sysroot
# (cpp/cmake/aarch64-linux-gnu.cmake), and run in the root (not through 'qemu -L' from here: ONNX Runtime's cpuinfo
# then reads this machine's /sys and the emulated program crashes).
if [ "${VITDEPLOY_ARM_CPP:-1}" = 1 ]; then
    command -v aarch64-linux-gnu-g++ >/dev/null || apt-get install -y -qq g++-aarch64-linux-gnu >/dev/null
    if [ ! -e "$root/usr/include/png.h" ] || [ ! -e "$root/usr/include/openssl/sha.h" ]; then
        say "installing the C++ library's build dependencies in the root"
        chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/bin:/bin:/usr/sbin:/sbin DEBIAN_FRONTEND=noninteractive \
            sh -c "apt-get update -qq && apt-get install -y -qq --no-install-recommends libssl-dev libpng-dev zlib1g-dev \
                   libjpeg62-turbo-dev libstdc++-12-dev" >/dev/null
    fi
    ort="$(cd "$root$venv" && ls lib/python3.11/site-packages/onnxruntime/capi/libonnxruntime.so.1.* | head -1)"
    mkdir -p "$root/opt/ort-lib" "$out/cpp/onnxruntime-lib"
    ln -sf "../vitdeploy-venv/$ort" "$root/opt/ort-lib/libonnxruntime.so.1"
    ln -sf "$root$venv/$ort" "$out/cpp/onnxruntime-lib/libonnxruntime.so"
    ln -sf "$root$venv/$ort" "$out/cpp/onnxruntime-lib/libonnxruntime.so.1"
    bash cpp/scripts/fetch_debian_headers.sh "$out/cpp/_deps" >/dev/null
    start=$SECONDS
    cmake -S cpp -B "$out/cpp" -DCMAKE_TOOLCHAIN_FILE="$PWD/cpp/cmake/aarch64-linux-gnu.cmake" -DVITDEPLOY_ARM_ROOT="$root" \
        -DONNXRUNTIME_LIBRARY="$out/cpp/onnxruntime-lib/libonnxruntime.so" -DVITDEPLOY_WITH_OPENVINO=OFF >/dev/null
    cmake --build "$out/cpp" -j "$(nproc)" >/dev/null
    say "C++ cross-built for $(file -b "$out/cpp/sam_cli" | cut -d, -f2 | xargs) in $((SECONDS - start)) s"
    inroot() { chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/bin:/bin LD_LIBRARY_PATH=/opt/ort-lib "$@"; }
    inroot /out/cpp/tests/vitdeploy_unit_tests > "$out/cpp-unit.txt" 2>&1 || { cat "$out/cpp-unit.txt" >&2; exit 1; }
    tail -1 "$out/cpp-unit.txt" >&2
    start=$SECONDS
    inroot /out/cpp/sam_cli --encoder /out/files/sam_enc.onnx --decoder /out/files/sam_dec.onnx \
        --image /src/calibration/images/calib_00_landscape.jpg --point 100,80 --out /out/cpp-mask.png --threads 1 \
        --runtime onnxruntime --json 2>/dev/null > "$out/cpp-aarch64.json"
    say "sam_cli on aarch64 took $((SECONDS - start)) s"
    # the fused rel-pos attention kernel's NEON path: every path asked of it, against float64, and swapped into a
    # tiny encoder's onnxruntime-cpu file against ONNX Runtime's own attention
    start=$SECONDS
    chroot "$root" /usr/bin/env -i HOME=/root PATH="$venv/bin:/usr/bin:/bin" PYTHONPATH=/src PYTHONDONTWRITEBYTECODE=1 \
        "$venv/bin/python" /src/scripts/arm_kernel_check.py /out/kernel-aarch64.json /out/cpp/libvitdeploy_ort_ops.so \
        /out/files/sam_enc_ortcpu.onnx
    say "the fused kernel on aarch64 took $((SECONDS - start)) s"
    # --runtime auto with a profile the aarch64 Python runtime wrote for this machine: sam_cli uses it only where its
    # own reading of the CPU (the auxiliary vector, as Python's) is the same machine
    chroot "$root" /usr/bin/env -i HOME=/root PATH="$venv/bin:/usr/bin:/bin" PYTHONPATH=/src PYTHONDONTWRITEBYTECODE=1 \
        "$venv/bin/python" -c "
import json, sys
from vitdeploy.runtime.deploy.identity import machine_fingerprint, model_digest, runtime_versions
from vitdeploy.runtime.deploy.profiles import PROFILE_FORMAT, profile_path
model = sys.argv[1]
profile = {'format': PROFILE_FORMAT, 'model_sha256': model_digest(model), 'machine': machine_fingerprint(),
           'runtime_versions': runtime_versions(), 'candidates': [],
           'chosen': {'runtime': 'onnxruntime', 'precision': 'file', 'threads': 1, 'settings': {}}}
profile_path(model).write_text(json.dumps(profile))
print(json.dumps(profile['machine']))" /out/files/sam_enc.onnx > "$out/fingerprint-aarch64.json"
    inroot /out/cpp/sam_cli --encoder /out/files/sam_enc.onnx --decoder /out/files/sam_dec.onnx \
        --image /src/calibration/images/calib_00_landscape.jpg --point 100,80 --out /out/cpp-mask-auto.png \
        --json > /dev/null 2> "$out/cpp-auto.txt"
    rm -f "$out/files/sam_enc.profile.json"
    say "sam_cli --runtime auto on aarch64: $(grep -o 'sam_enc.profile.json[^;]*' "$out/cpp-auto.txt" | head -1)"
fi
