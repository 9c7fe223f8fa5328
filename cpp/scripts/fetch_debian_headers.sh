#!/usr/bin/env bash
# Put the headers the C++ build needs and the machine may lack under DEST (default: cpp/build/_deps):
#   DEST/onnxruntime/include/onnxruntime   ONNX Runtime's C/C++ API (Debian libonnxruntime-dev)
#   DEST/nlohmann_json/include/nlohmann    nlohmann/json, the JSON library (Debian nlohmann-json3-dev)
# Each is skipped when already there, or (nlohmann/json) when the system has it (/usr/include/nlohmann).
#
# Why: the onnxruntime wheel that vitdeploy already depends on ships the shared library
# (onnxruntime/capi/libonnxruntime.so.*) but no headers; nlohmann/json is header-only. Debian packages
# both. This script downloads the .debs with apt-get into a private apt state directory (the machine's
# apt configuration and installed packages are left untouched) and unpacks only their include/
# folders. The ONNX Runtime C API is versioned and backward compatible: a program compiled against API
# version N runs on any library whose version is >= N, so these headers work with the newer library
# from the wheel (the C++ side checks this at run time and says so if not).
#
# Already have them (an official release archive, a distribution package)? Skip this script and
# configure with -DONNXRUNTIME_INCLUDE_DIR=/dir/containing/onnxruntime_cxx_api.h and
# -Dnlohmann_json_DIR=/dir/with/nlohmann_jsonConfig.cmake (or install nlohmann-json3-dev).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
dest="${1:-$here/build/_deps}"
suite="${VITDEPLOY_DEBIAN_SUITE:-trixie}"
declare -A wanted=()  # Debian package -> the include/ folder it provides
[ -f "$dest/onnxruntime/include/onnxruntime/onnxruntime_cxx_api.h" ] || wanted[libonnxruntime-dev]=onnxruntime
[ -f "$dest/nlohmann_json/include/nlohmann/json.hpp" ] || [ -f /usr/include/nlohmann/json.hpp ] || wanted[nlohmann-json3-dev]=nlohmann
if [ "${#wanted[@]}" -eq 0 ]; then
    echo "ONNX Runtime and nlohmann/json headers already in $dest (or on the system)"
    exit 0
fi
for tool in apt-get dpkg-deb; do
    command -v "$tool" >/dev/null || { echo "error: '$tool' not found: this script needs a Debian-based system; otherwise pass -DONNXRUNTIME_INCLUDE_DIR / -Dnlohmann_json_DIR to cmake" >&2; exit 1; }
done
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -f "$keyring" ] || { echo "error: $keyring not found: install debian-archive-keyring, or pass -DONNXRUNTIME_INCLUDE_DIR / -Dnlohmann_json_DIR to cmake" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/deb"
echo "deb [signed-by=$keyring] http://deb.debian.org/debian $suite main" >"$work/sources.list"
apt_opts=(
    -o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o "Debug::NoLocking=1"
    # The download goes to a private directory of the user running this script, not apt's own cache.
    -o "APT::Sandbox::User=$(id -un)"
)
echo "Fetching ${!wanted[*]} (headers) from Debian $suite ..."
apt-get "${apt_opts[@]}" -qq update
(cd "$work/deb" && apt-get "${apt_opts[@]}" -qq download "${!wanted[@]}")
for package in "${!wanted[@]}"; do
    folder="${wanted[$package]}"
    name="$([ "$folder" = nlohmann ] && echo nlohmann_json || echo onnxruntime)"
    deb="$(ls "$work"/deb/"${package}"_*.deb)"
    dpkg-deb -x "$deb" "$work/root"
    mkdir -p "$dest/$name/include"
    rm -rf "$dest/$name/include/$folder.tmp"
    cp -r "$work/root/usr/include/$folder" "$dest/$name/include/$folder.tmp"
    cp "$work/root/usr/share/doc/$package/copyright" "$dest/$name/include/$folder.tmp/COPYRIGHT.debian"
    mv "$dest/$name/include/$folder.tmp" "$dest/$name/include/$folder"
    echo "headers from $(basename "$deb") -> $dest/$name/include/$folder"
done
