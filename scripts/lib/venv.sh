# Sourced by scripts/test.sh and scripts/run-demo.sh: make a virtual environment from this checkout's
# own files and print its directory.
#   default                  .venv, every package at the version in requirements.lock (what CI runs)
#   VITDEPLOY_DEPS=latest    .venv-latest, the newest releases pyproject.toml allows (no lock)
#   PYTHON=python3.11        the interpreter to create it with (default: python3)
#   VITDEPLOY_INSTALLER=pip  install the locked set with pip itself (default: uv, see below)
#
# The locked set is installed by uv (pinned here, put beside the venv in $venv/.uv, not into it), handed the indexes,
# links, constraints and certificate this machine's pip is configured with (scripts/lib/pip_to_uv.py). The versions
# are the lock's either way; uv takes 22 s where pip took 115 s for the main install on 2 cores (Intel Xeon, a fresh
# venv, an empty uv cache, 2026-11-29): pip spends 30 s matching wheel tags across the indexes before it installs one
# of the 7 GB. Where uv cannot be installed or pip has a setting it does not translate, pip installs, as before. uv
# compiles the bytecode as pip does (--compile-bytecode, about 5 s more on 2 cores): without it, where
# PYTHONDONTWRITEBYTECODE is set, every process of the suite compiled torch's modules again, and .ci/run's pytest took
# 13 min 40 s instead of 11 min 37 s (1377 s of CPU against 1239).
VITDEPLOY_UV_VERSION=0.13.8

vitdeploy_venv() {
    local extras="$1" venv lock=() install=()
    local python="${PYTHON:-python3}"
    case "${VITDEPLOY_DEPS:-locked}" in
        locked) venv=.venv; lock=(-c requirements.lock) ;;
        latest) venv=.venv-latest; lock=(--upgrade --upgrade-strategy eager) ;;
        *) echo "VITDEPLOY_DEPS must be 'locked' or 'latest', not '${VITDEPLOY_DEPS}'" >&2; return 2 ;;
    esac
    [ -x "$venv/bin/python" ] || "$python" -m venv "$venv" >&2
    install=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)
    if [ "$venv" = .venv ] && [ "${VITDEPLOY_INSTALLER:-uv}" = uv ]; then
        local uv_out uv_config
        if { [ -x "$venv/.uv/bin/uv" ] && [ "$("$venv/.uv/bin/uv" --version)" = "uv $VITDEPLOY_UV_VERSION" ]; } \
            || "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade --target "$venv/.uv" \
                "uv==$VITDEPLOY_UV_VERSION" >&2; then
            if uv_out="$("$venv/bin/python" scripts/lib/pip_to_uv.py)"; then
                mapfile -t uv_config <<< "$uv_out"  # the certificate file, then uv's arguments
                install=(env ${uv_config[0]:+SSL_CERT_FILE="${uv_config[0]}"} "$venv/.uv/bin/uv" pip install --quiet
                         --compile-bytecode --python "$venv/bin/python" --index-strategy unsafe-best-match
                         "${uv_config[@]:1}")
            else
                echo "note: pip has a setting uv would not follow (above): installing with pip" >&2
            fi
        else
            echo "note: could not install uv $VITDEPLOY_UV_VERSION: installing with pip" >&2
        fi
    fi
    "${install[@]}" "${lock[@]}" -e ".[$extras]" >&2
    if [[ ",$extras," == *",dev,"* ]]; then
        # SAM 2's official package, the reference of the sam2_* families (vitdeploy/models/sam2.py): an sdist whose
        # build needs torch, so it is built here, after torch, without build isolation and without its optional
        # CUDA extension. Not in pyproject's extras for that reason (pip would fetch torch into an isolated build).
        SAM2_BUILD_CUDA=0 "${install[@]}" --no-build-isolation "${lock[@]}" "sam2>=1.1" "antlr4-python3-runtime==4.9.3" >&2
        # SAM 3's official package, the reference of the sam3_* families (vitdeploy/models/sam3_*.py): a wheel that pins
        # numpy<2.4, tqdm<4.68 and huggingface-hub<2 (older than the lock's, which it runs with), so it is installed
        # without its dependencies, and the ones it imports are named here.
        "${install[@]}" --no-deps "${lock[@]}" "sam3>=0.1.4" ftfy regex einops psutil wcwidth >&2
        # CLIP's BPE vocabulary for SAM 3's tokenizer, which the sam3 wheel does not ship: open_clip_torch's wheel
        # carries it (vitdeploy/runtime/processing/clip_tokenizer.py finds it there; nothing of open_clip is imported)
        "${install[@]}" --no-deps "${lock[@]}" open_clip_torch >&2
    fi
    # onnxruntime-web for the server's page (the decoder in the browser): pinned, checked, not committed (14 MB)
    "$venv/bin/python" scripts/fetch_page_assets.py >&2
    echo "$venv"
}
