#!/usr/bin/env bash
# Set up (a venv from this checkout's own files, at the versions in requirements.lock) and run the main job on the embedded default,
# ONNX Runtime on the CPU: export the full-size SAM ViT-B encoder and validate it against the
# eager official model (replacing out/ from an earlier run: --force). Without a checkpoint argument it uses seeded random weights (clearly labelled).
#   scripts/run-demo.sh                      # random weights
#   scripts/run-demo.sh sam_vit_b_01ec64.pth # a real checkpoint
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/venv.sh
venv="$(vitdeploy_venv dev)"
mkdir -p out
if [ $# -ge 1 ]; then WEIGHTS=(--checkpoint "$1"); VALIDATE=(--checkpoint "$1"); else WEIGHTS=(--random-weights --seed 0); VALIDATE=(); fi
"$venv/bin/vitdeploy" export --recipe sam_vit_b "${WEIGHTS[@]}" -o out/sam_vit_b.onnx --report out/sam_vit_b.export.json --force
"$venv/bin/vitdeploy" validate out/sam_vit_b.onnx "${VALIDATE[@]}" --images calibration/images/calib_00_landscape.jpg --images calibration/images/calib_01_shapes.png --random-inputs 1 \
    --runs 3 --threads 2 --report out/sam_vit_b.validate.json --force
