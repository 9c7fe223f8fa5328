#!/usr/bin/env bash
# GPU verification in one command, on a machine with an NVIDIA GPU and onnxruntime-gpu and/or TensorRT 10/11
# (+ polygraphy, cuda-python) or TensorRT for RTX (+ cuda-python):
#   install the project -> export the full-size SAM ViT-B encoder (random weights) and its mask decoder
#   -> FP16 / INT8 ONNX via 'vitdeploy calibrate'
#   -> ONNX Runtime's CUDA provider: parity of every ONNX file against the eager official model (named
#      tolerances) and a benchmark against eager PyTorch (FP32, FP16/BF16 autocast) on the same GPU
#   -> with TensorRT (the library 'build-engine --builder auto' takes: classic where it imports, else
#      TensorRT-RTX): FP32 / FP16 / INT8 engines, their parity, static batch 1 and dynamic batch 1/4/8 benchmarks
#   -> the gated tests (pytest -m "tensorrt or gpu") -> one report.
#
#   scripts/gpu-check.sh                 # everything this machine can run, into out/gpu-check/
#   OUT_DIR=/tmp/gc RUNS=20 scripts/gpu-check.sh
#   PYTHON=/path/to/python SKIP_INSTALL=1 scripts/gpu-check.sh   # an environment already set up
#   SKIP_PYTEST=1 scripts/gpu-check.sh   # without the gated tests (run them on their own: pytest -m gpu)
#   PARITY_IMAGES=3 scripts/gpu-check.sh  # bundled images per parity check (default 3; each costs a CPU eager forward)
#   RANDOM_INPUTS=2 scripts/gpu-check.sh  # seeded random inputs per parity check besides the images (default 2)
#   FILES_ONLY=1 scripts/gpu-check.sh    # only the exports and precision passes (no GPU library needed yet)
#   REUSE=1 scripts/gpu-check.sh         # keep exports and precision passes already in $OUT_DIR (a second call)
#   SKIP_DYNAMIC=1 scripts/gpu-check.sh  # without the dynamic-batch export, engine and benchmark
#   SKIP_INT8=1 scripts/gpu-check.sh     # without the INT8 calibration (minutes on the CPU) and its checks
#   PYTEST_PATHS="tests/engine" scripts/gpu-check.sh   # the gated tests of these paths only (default: tests)
#   MODEL=sam3 scripts/gpu-check.sh      # SAM 3's vision encoder (full size, 1008 px) instead of SAM ViT-B: FP32 and
#                                        # FP16 files, no decoder or INT8; then benchmarks/gpu_sam3_vision.py (the
#                                        # official module's own FP16/BF16 beside the files, on the same GPU)
#   MODEL=sam3 SAM3_RECIPE=sam3_tiny scripts/gpu-check.sh   # the same on the tests' tiny model (a dry run)
#
# Every step runs even if an earlier one failed (as far as its inputs exist); each step's status, time
# and log land in $OUT_DIR/report.md and report.json. Exit code: 0 all passed, 1 a step failed,
# 2 this machine has neither TensorRT nor ONNX Runtime's CUDA provider ('vitdeploy doctor' says why).
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
OUT="${OUT_DIR:-out/gpu-check}"
RUNS="${RUNS:-50}"
WARMUP="${WARMUP:-10}"
MODEL="${MODEL:-sam_vit_b}"
case "$MODEL" in
    # ENC: the encoder files' stem; EXPORT: how it is exported; CALIBRATE: the FP16 pass's extra options (SAM 3 at
    # full size: 3 calibration images and 2 held out, no eager parity there: validate --device cuda measures it).
    sam_vit_b) ENC=sam_vit_b; EXPORT=(--recipe sam_vit_b --layernorm2d native); CALIBRATE=() ;;
    sam3) ENC=sam3; EXPORT=(--recipe "${SAM3_RECIPE:-sam3}"); SKIP_INT8=1; SKIP_DYNAMIC=1
          CALIBRATE=(--max-images 5 --holdout 2 --min-images 4 --no-eager) ;;
    *) echo "MODEL must be sam_vit_b or sam3, not '$MODEL'" >&2; exit 2 ;;
esac
mkdir -p "$OUT/logs"
STEPS="$OUT/steps.tsv"
: > "$STEPS"

# step NAME CMD...: run, log to $OUT/logs/NAME.log, record "NAME<TAB>status<TAB>seconds".
step() {
    local name="$1"; shift
    local start=$SECONDS status
    echo "== $name: $*"
    if "$@" > "$OUT/logs/$name.log" 2>&1; then status=passed; else status="FAILED (exit $?)"; fi
    tail -n 25 "$OUT/logs/$name.log"
    printf '%s\t%s\t%s\n' "$name" "$status" "$((SECONDS - start))" >> "$STEPS"
    echo "== $name: $status in $((SECONDS - start)) s"
    [ "$status" = passed ]
}
skip() { printf '%s\tskipped: %s\t0\n' "$1" "$2" >> "$STEPS"; echo "== $1: skipped: $2"; }

# --- install: the full extras when the package index is reachable, else this checkout on top of what is there.
if [ "${SKIP_INSTALL:-0}" = 1 ]; then
    echo "SKIP_INSTALL=1: using the vitdeploy already importable by $PYTHON"
elif ! "$PYTHON" -m pip install --quiet --disable-pip-version-check -e ".[dev,tensorrt]" > "$OUT/logs/install.log" 2>&1; then
    echo "full install failed (offline?), installing this checkout without dependencies; see $OUT/logs/install.log"
    "$PYTHON" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e . >> "$OUT/logs/install.log" 2>&1 \
        || { echo "cannot install the project"; exit 1; }
fi
# Every verb refuses to replace an existing output unless --force: a rerun of this script replaces its own files.
vd() { "$PYTHON" -m vitdeploy "$@" --force; }
VD=(vd)

step doctor "${VD[@]}" doctor --report "$OUT/doctor.json"
TRT_REASON=$("$PYTHON" -c "from vitdeploy.doctor import tensorrt_unavailable_reason as r; print(r() or '')")
ORT_CUDA=$("$PYTHON" -c "import onnxruntime as o; print('yes' if 'CUDAExecutionProvider' in o.get_available_providers() else '')")
TRT_LIB=$("$PYTHON" -c "from vitdeploy.engine.library import load_library as l; print(l('auto', 'gpu-check').name)" 2>/dev/null)
echo "TensorRT library for the engines: ${TRT_LIB:-none}"
if [ -n "$TRT_REASON" ] && [ -z "$ORT_CUDA" ] && [ "${FILES_ONLY:-0}" != 1 ]; then
    echo "this machine has neither TensorRT ($TRT_REASON) nor ONNX Runtime's CUDA provider (pip install onnxruntime-gpu)"; exit 2
fi
[ -n "$TRT_REASON" ] && echo "no TensorRT here ($TRT_REASON): the ONNX Runtime CUDA steps run, the engine steps are skipped"
TORCH_CUDA=$("$PYTHON" -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')")
# A few bundled images per parity check: each one costs an eager forward of the reference on the CPU.
PARITY=()
for img in $(ls calibration/images/*.jpg calibration/images/*.png 2>/dev/null | sort | head -n "${PARITY_IMAGES:-3}"); do
    PARITY+=(--images "$img")
done
# parity_inputs NAME: IMAGES = what validate compares on besides random inputs (the decoder takes embeddings and prompts).
parity_inputs() { case $1 in *decoder*) IMAGES=() ;; *) IMAGES=("${PARITY[@]}") ;; esac; }

# reused NAME FILE: with REUSE=1, a file an earlier call made is kept (the step is recorded as skipped).
reused() { [ "${REUSE:-0}" = 1 ] && [ -s "$2" ] && skip "$1" "REUSE=1: $2 is there"; }

# --- export (random weights: the numbers are meaningless, parity and speed are not).
reused export_encoder "$OUT/$ENC.onnx" || step export_encoder "${VD[@]}" export "${EXPORT[@]}" --random-weights --seed 0 \
    -o "$OUT/$ENC.onnx" --report "$OUT/$ENC.export.json"
if [ "${SKIP_DYNAMIC:-0}" = 1 ]; then
    skip export_encoder_dynamic "SKIP_DYNAMIC=1"
elif [ -z "$TRT_REASON" ] || [ "${FILES_ONLY:-0}" = 1 ]; then  # only the engine with a batch profile reads it
    reused export_encoder_dynamic "$OUT/sam_vit_b_dyn.onnx" || step export_encoder_dynamic "${VD[@]}" export --recipe sam_vit_b --random-weights --seed 0 --layernorm2d native \
        --dynamic-batch -o "$OUT/sam_vit_b_dyn.onnx"
else
    skip export_encoder_dynamic "no TensorRT: only the dynamic-batch engine uses it"
fi
if [ "$MODEL" != sam_vit_b ]; then
    skip export_decoder "MODEL=$MODEL: the encoder only"
elif [ -f export/sam_vit_b_decoder.toml ]; then
    reused export_decoder "$OUT/sam_vit_b_decoder.onnx" || step export_decoder "${VD[@]}" export --recipe sam_vit_b_decoder --random-weights --seed 0 -o "$OUT/sam_vit_b_decoder.onnx"
else
    skip export_decoder "no export/sam_vit_b_decoder.toml recipe in this checkout"
fi

# --- precision passes (vitdeploy calibrate): FP16 mixed and INT8 Q/DQ ONNX from the FP32 export.
if "${VD[@]}" calibrate --help > /dev/null 2>&1; then
    reused calibrate_fp16 "$OUT/$ENC.fp16.onnx" || step calibrate_fp16 "${VD[@]}" calibrate "$OUT/$ENC.onnx" --precision fp16 -o "$OUT/$ENC.fp16.onnx" \
        --images calibration/images "${CALIBRATE[@]}" --report "$OUT/$ENC.fp16.calibrate.json"
    if [ "${SKIP_INT8:-0}" = 1 ]; then skip calibrate_int8 "SKIP_INT8=1"; else
    reused calibrate_int8 "$OUT/sam_vit_b.int8.onnx" || step calibrate_int8 "${VD[@]}" calibrate "$OUT/sam_vit_b.onnx" --precision int8 -o "$OUT/sam_vit_b.int8.onnx" \
        --images calibration/images --report "$OUT/sam_vit_b.int8.calibrate.json"
    fi
else
    skip calibrate_fp16 "'vitdeploy calibrate' is not in this checkout"
    skip calibrate_int8 "'vitdeploy calibrate' is not in this checkout"
fi
if [ "${FILES_ONLY:-0}" = 1 ]; then
    cat "$STEPS"; echo "FILES_ONLY=1: the exports and precision passes are in $OUT"
    if grep -q "FAILED" "$STEPS"; then exit 1; fi
    exit 0
fi

# --- ONNX Runtime's CUDA provider: parity of every ONNX file (FP32 with TF32 off; the eager reference runs on the
#     CPU) and a benchmark on the GPU (against eager PyTorch on the GPU where this PyTorch has CUDA).
if [ -n "$ORT_CUDA" ]; then
    ENCODERS=()
    for f in "$OUT/$ENC.onnx" "$OUT/$ENC.fp16.onnx" "$OUT/$ENC.int8.onnx" "$OUT/${ENC}_decoder.onnx"; do
        [ -f "$f" ] || continue
        name=$(basename "$f" .onnx)
        parity_inputs "$name"
        [[ $name == *decoder* ]] || ENCODERS+=("$f")
        step "validate_cuda_$name" "${VD[@]}" validate "$f" --device cuda "${IMAGES[@]}" --random-inputs "${RANDOM_INPUTS:-2}" --runs 0 \
            --report "$OUT/$name.cuda.validate.json"
    done
    EAGER_CUDA=(--eager-precision fp32 --eager-precision fp16 --eager-precision bf16)
    [ "$TORCH_CUDA" = cuda ] || EAGER_CUDA=(--no-eager)
    if [ "$MODEL" = sam3 ]; then  # gpu_sam3_vision below times the same contenders (and the official FP16 forms)
        skip benchmark_cuda_onnxruntime "MODEL=sam3: benchmarks/gpu_sam3_vision.py times the files and eager"
    elif [ ${#ENCODERS[@]} -gt 0 ]; then
        step benchmark_cuda_onnxruntime "${VD[@]}" benchmark "${ENCODERS[@]}" --device cuda --allow-unverified \
            "${EAGER_CUDA[@]}" --runs "$RUNS" --warmup "$WARMUP" --threads "$(nproc)" \
            --report "$OUT/benchmark_cuda_onnxruntime.json"
    fi
else
    skip validate_cuda "ONNX Runtime's CUDA provider is missing (pip install onnxruntime-gpu)"
fi

# --- SAM 3: the official module's own FP16/BF16 (autocast and whole) beside the files on ONNX Runtime's CUDA provider.
if [ "$MODEL" = sam3 ]; then
    if [ -n "$ORT_CUDA" ] && [ "$TORCH_CUDA" = cuda ]; then
        step gpu_sam3_vision "$PYTHON" benchmarks/gpu_sam3_vision.py --workdir "$OUT" --runs "$RUNS" --warmup "$WARMUP" \
            --report "$OUT/gpu_sam3_vision.json"
    else
        skip gpu_sam3_vision "needs ONNX Runtime's CUDA provider and PyTorch with CUDA"
    fi
fi

# --- engines: strongly typed, a verbose log each, one shared timing cache on classic TensorRT (TensorRT-RTX
#     has none: it JIT-compiles on the GPU at load).
ENGINES=()
CACHE=(--timing-cache "$OUT/timing.cache")
[ "$TRT_LIB" = tensorrt-rtx ] && CACHE=()
build() {  # build NAME ONNX [extra build-engine options]
    local name="$1" onnx="$2"; shift 2
    if [ -n "$TRT_REASON" ]; then skip "build_$name" "no TensorRT: $TRT_REASON"; return; fi
    if [ ! -f "$onnx" ]; then skip "build_$name" "$onnx was not produced"; return; fi
    step "build_$name" "${VD[@]}" build-engine "$onnx" -o "$OUT/$name.plan" "${CACHE[@]}" \
        --log-file "$OUT/logs/build_$name.trt.log" --report "$OUT/$name.build.json" "$@" && ENGINES+=("$OUT/$name.plan")
}
build "$ENC" "$OUT/$ENC.onnx"
build "$ENC.fp16" "$OUT/$ENC.fp16.onnx"
[ "${SKIP_INT8:-0}" = 1 ] || build "$ENC.int8" "$OUT/$ENC.int8.onnx"
[ "${SKIP_DYNAMIC:-0}" = 1 ] || build sam_vit_b_dyn "$OUT/sam_vit_b_dyn.onnx" --batch-profile 1 4 8
[ "$MODEL" != sam_vit_b ] || build sam_vit_b_decoder "$OUT/sam_vit_b_decoder.onnx"

# --- parity of every engine against the eager official model (CPU, FP32: the reference), named tolerances.
for plan in "${ENGINES[@]}"; do
    name=$(basename "$plan" .plan)
    parity_inputs "$name"
    step "validate_$name" "${VD[@]}" validate "$plan" "${IMAGES[@]}" --random-inputs 2 --runs 0 \
        --report "$OUT/$name.validate.json"
done

# --- benchmark against eager PyTorch on the same GPU (CPU eager if this PyTorch has no CUDA).
STATIC=()
for p in "$OUT/$ENC.plan" "$OUT/$ENC.fp16.plan" "$OUT/$ENC.int8.plan"; do [ -f "$p" ] && STATIC+=("$p"); done
EAGER=(--eager-precision fp32 --eager-precision fp16 --eager-precision bf16)
if [ "$TORCH_CUDA" = cpu ]; then EAGER=(--eager-precision fp32); RUNS=5; WARMUP=1; fi
if [ ${#STATIC[@]} -gt 0 ]; then
    step benchmark_batch1 "${VD[@]}" benchmark "${STATIC[@]}" --device "$TORCH_CUDA" "${EAGER[@]}" --runs "$RUNS" \
        --warmup "$WARMUP" --threads "$(nproc)" --report "$OUT/benchmark_batch1.json"
else
    skip benchmark_batch1 "no static engine was built"
fi
if [ -f "$OUT/sam_vit_b_dyn.plan" ]; then
    step benchmark_batches "${VD[@]}" benchmark "$OUT/sam_vit_b_dyn.plan" --device "$TORCH_CUDA" "${EAGER[@]}" \
        --batch 1 --batch 4 --batch 8 --runs "$RUNS" --warmup "$WARMUP" --threads "$(nproc)" --report "$OUT/benchmark_batches.json"
else
    skip benchmark_batches "no dynamic-batch engine was built"
fi

# --- masks through the decoder, embeddings and latency against the official model (and torch.compile) on this GPU.
if [ ${#STATIC[@]} -gt 0 ] && [ "$TORCH_CUDA" = cuda ] && [ "$MODEL" = sam_vit_b ]; then
    step gpu_engines "$PYTHON" benchmarks/gpu_engines.py --workdir "$OUT" --runs "$RUNS" --warmup "$WARMUP" \
        --report "$OUT/gpu_engines.json"
else
    skip gpu_engines "needs a static SAM ViT-B engine and PyTorch with CUDA"
fi

# --- the gated tests: the TensorRT/GPU tests that skip everywhere else.
if [ "${SKIP_PYTEST:-0}" = 1 ]; then
    skip pytest_gpu "SKIP_PYTEST=1"
else
    # shellcheck disable=SC2086  # PYTEST_PATHS is a list of paths
    step pytest_gpu "$PYTHON" -m pytest -m "tensorrt or gpu or tensorrt_rtx" -rs -q -p no:cacheprovider ${PYTEST_PATHS:-tests}
fi

# --- one report.
"$PYTHON" - "$OUT" <<'PY'
import json
import pathlib
import sys

out = pathlib.Path(sys.argv[1])
steps = [dict(zip(("step", "status", "seconds"), line.split("\t"))) for line in (out / "steps.tsv").read_text().splitlines()]
data = {"steps": steps}
for name in ("doctor", "benchmark_cuda_onnxruntime", "benchmark_batch1", "benchmark_batches", "gpu_engines", "gpu_sam3_vision"):
    path = out / f"{name}.json"
    if path.exists():
        data[name] = json.loads(path.read_text())
data["validation"] = {}
for path in sorted(out.glob("*.validate.json")):
    v = json.loads(path.read_text())
    data["validation"][path.name] = {"passed": v["passed"], "tolerance": v["tolerance"]["name"],
                                     "worst_cosine": min(p["cosine"] for p in v["parity"]),
                                     "worst_rel_l2": max(p["rel_l2"] for p in v["parity"])}
(out / "report.json").write_text(json.dumps(data, indent=2))
lines = ["# vitdeploy GPU check", "", "| step | status | seconds |", "|---|---|---|"]
lines += [f"| {s['step']} | {s['status']} | {s['seconds']} |" for s in steps]
lines += ["", "## Parity of each file vs the eager official model", "",
          "| file | tolerance | worst cosine | worst rel L2 | passed |", "|---|---|---|---|---|"]
lines += [f"| {k} | {v['tolerance']} | {v['worst_cosine']:.6f} | {v['worst_rel_l2']:.3g} | {v['passed']} |"
          for k, v in data["validation"].items()]
for name in ("benchmark_cuda_onnxruntime", "benchmark_batch1", "benchmark_batches", "gpu_engines", "gpu_sam3_vision"):
    log = out / "logs" / f"{name}.log"
    if log.exists():
        text = log.read_text()
        table = text[text.find("contender"):] if "contender" in text else text[-3000:]
        lines += ["", f"## {name}", "", "```", table.strip(), "```"]
doctor = out / "logs" / "doctor.log"
if doctor.exists():
    lines += ["", "## Machine (vitdeploy doctor)", "", "```", doctor.read_text().strip(), "```"]
(out / "report.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
PY
echo "report: $OUT/report.md and $OUT/report.json"
if grep -q "FAILED" "$STEPS"; then exit 1; fi
exit 0
