#!/usr/bin/env bash
# SHA-256 of every artifact the shipped tiny recipes make, one line each: run it before and after a change
# that must not change what vitdeploy writes, and diff the two lists.
#   scripts/export-digests.sh [OUT_DIR]   # default: a temporary folder, removed at the end
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/venv.sh
vd="$(vitdeploy_venv dev)/bin/vitdeploy"
out="${1:-$(mktemp -d)}"
[[ $# -ge 1 ]] || trap 'rm -rf "$out"' EXIT
mkdir -p "$out" && rm -f "$out"/*.onnx "$out"/*.onnx.data
run() { "$vd" "$@" >/dev/null 2>&1 || { echo "failed: vitdeploy $*" >&2; exit 1; }; }
for target in generic tensorrt onnxruntime-cpu; do
  for ln in matmul native; do
    run export -r sam_tiny --random-weights --seed 0 --target "$target" --layernorm2d "$ln" -o "$out/enc-$target-$ln.onnx"
  done
done
for ln in matmul native; do
  run export -r sam_tiny_decoder --random-weights --seed 0 --layernorm2d "$ln" -o "$out/dec-$ln.onnx"
done
run export -r sam_tiny --random-weights --seed 0 --input-size 128 --batch 2 -o "$out/enc-128-b2.onnx"
run export -r sam_tiny --random-weights --seed 0 --dynamic-batch -o "$out/enc-dynamic.onnx"
run calibrate "$out/enc-generic-matmul.onnx" -p fp16 -o "$out/enc-fp16.onnx"
run calibrate "$out/enc-onnxruntime-cpu-matmul.onnx" -p int8 -o "$out/enc-cpu-int8.onnx"
run optimize "$out/enc-onnxruntime-cpu-matmul.onnx" -o "$out/enc-cpu-optimized.onnx"
run optimize "$out/enc-onnxruntime-cpu-matmul.onnx" --fused-attention -o "$out/enc-cpu-fused.onnx"
run optimize "$out/enc-tensorrt-matmul.onnx" -o "$out/enc-trt-optimized.onnx"
run export -r timm_deit_small_patch16_224 --random-weights --seed 0 -o "$out/deit-s.onnx"
run export -r timm_hiera_tiny_224 --random-weights --seed 0 -o "$out/hiera-t.onnx"
for part in "" _decoder _memory_encoder _memory_attention; do
  run export -r "sam2_tiny$part" --random-weights --seed 0 -o "$out/sam2$part.onnx"
done
for part in "" _text _detector _interactive; do
  run export -r "sam3_tiny$part" --random-weights --seed 0 -o "$out/sam3$part.onnx"
done
cd "$out" && sha256sum -- *.onnx *.onnx.data 2>/dev/null | sort -k2
