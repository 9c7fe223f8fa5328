#!/usr/bin/env bash
# Put ONNX Runtime's C/C++ API headers under DEST/include/onnxruntime (default: cpp/build/_deps/onnxruntime).
#
# Why: the onnxruntime wheel that vitdeploy already depends on ships the shared library
# (onnxruntime/capi/libonnxruntime.so.*) but no headers. Debian packages the official headers in
# libonnxruntime-dev (trixie and later). This script downloads that one .deb with apt-get into a private
# apt state directory (the machine's apt configuration and installed packages are left untouched) and
# unpacks only its include/ folder. The ONNX Runtime C API is versioned and backward compatible: a
# program compiled against API version N runs on any library whose version is >= N, so these headers
# work with the newer library from the wheel (the C++ side checks this at run time and says so if not).
#
# Already have headers (an official release archive, a distribution package)? Skip this script and
# configure with -DONNXRUNTIME_INCLUDE_DIR=/path/to/dir/containing/onnxruntime_cxx_api.h.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
dest="${1:-$here/build/_deps/onnxruntime}"
suite="${VITDEPLOY_ORT_HEADERS_SUITE:-trixie}"
if [ -f "$dest/include/onnxruntime/onnxruntime_cxx_api.h" ]; then
    echo "ONNX Runtime headers already in $dest/include/onnxruntime"
    exit 0
fi
for tool in apt-get dpkg-deb; do
    command -v "$tool" >/dev/null || { echo "error: '$tool' not found: this script needs a Debian-based system; otherwise pass -DONNXRUNTIME_INCLUDE_DIR to cmake" >&2; exit 1; }
done
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -f "$keyring" ] || { echo "error: $keyring not found: install debian-archive-keyring, or pass -DONNXRUNTIME_INCLUDE_DIR to cmake" >&2; exit 1; }

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
echo "Fetching libonnxruntime-dev (headers) from Debian $suite ..."
apt-get "${apt_opts[@]}" -qq update
(cd "$work/deb" && apt-get "${apt_opts[@]}" -qq download libonnxruntime-dev)
deb="$(ls "$work"/deb/libonnxruntime-dev_*.deb)"
dpkg-deb -x "$deb" "$work/root"
mkdir -p "$dest/include"
rm -rf "$dest/include/onnxruntime.tmp"
cp -r "$work/root/usr/include/onnxruntime" "$dest/include/onnxruntime.tmp"
cp "$work/root/usr/share/doc/libonnxruntime-dev/copyright" "$dest/include/onnxruntime.tmp/COPYRIGHT.debian"
mv "$dest/include/onnxruntime.tmp" "$dest/include/onnxruntime"
echo "ONNX Runtime headers from $(basename "$deb") -> $dest/include/onnxruntime"
