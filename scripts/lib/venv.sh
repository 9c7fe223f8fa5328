# Sourced by scripts/test.sh and scripts/run-demo.sh: make a virtual environment from this checkout's
# own files and print its directory.
#   default                  .venv, every package at the version in requirements.lock (what CI runs)
#   VITDEPLOY_DEPS=latest    .venv-latest, the newest releases pyproject.toml allows (no lock)
#   PYTHON=python3.11        the interpreter to create it with (default: python3)
vitdeploy_venv() {
    local extras="$1" venv lock=()
    local python="${PYTHON:-python3}"
    case "${VITDEPLOY_DEPS:-locked}" in
        locked) venv=.venv; lock=(-c requirements.lock) ;;
        latest) venv=.venv-latest; lock=(--upgrade --upgrade-strategy eager) ;;
        *) echo "VITDEPLOY_DEPS must be 'locked' or 'latest', not '${VITDEPLOY_DEPS}'" >&2; return 2 ;;
    esac
    [ -x "$venv/bin/python" ] || "$python" -m venv "$venv" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${lock[@]}" -e ".[$extras]" >&2
    if [[ ",$extras," == *",dev,"* ]]; then
        # SAM 2's official package, the reference of the sam2_* families (vitdeploy/models/sam2.py): an sdist whose
        # build needs torch, so it is built here, after torch, without build isolation and without its optional
        # CUDA extension. Not in pyproject's extras for that reason (pip would fetch torch into an isolated build).
        SAM2_BUILD_CUDA=0 "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-build-isolation \
            "${lock[@]}" "sam2>=1.1" "antlr4-python3-runtime==4.9.3" >&2
        # SAM 3's official package, the reference of the sam3_* families (vitdeploy/models/sam3.py): a wheel that pins
        # numpy<2.4, tqdm<4.68 and huggingface-hub<2 (older than the lock's, which it runs with), so it is installed
        # without its dependencies, and the ones it imports are named here.
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "${lock[@]}" \
            "sam3>=0.1.4" ftfy regex einops psutil wcwidth >&2
        # CLIP's BPE vocabulary for SAM 3's tokenizer, which the sam3 wheel does not ship: open_clip_torch's wheel
        # carries it (vitdeploy/runtime/processing/clip_tokenizer.py finds it there; nothing of open_clip is imported)
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "${lock[@]}" open_clip_torch >&2
    fi
    # onnxruntime-web for the server's page (the decoder in the browser): pinned, checked, not committed (14 MB)
    "$venv/bin/python" scripts/fetch_page_assets.py >&2
    echo "$venv"
}
