#!/usr/bin/env bash
# Set up (a venv from this checkout's own files, at the versions in requirements.lock) and run the
# test suite. CI runs exactly this. Arguments go to pytest.
#   scripts/test.sh                         # the locked versions (.venv)
#   VITDEPLOY_DEPS=latest scripts/test.sh   # the newest releases pyproject.toml allows (.venv-latest)
#   VITDEPLOY_TEST_WORKERS=0 scripts/test.sh tests/test_tune.py   # one process (default: one worker per physical
#                                                                 # core, as many as the memory holds: tests/conftest.py)
# The suite runs in parallel workers (pytest-xdist), one test file per worker at a time (--dist loadfile), so a
# file's module fixtures are made once; the files go out in collection order, longest first (tests/conftest.py).
# On AMD EPYC Zen 3 (2 cores), .ci/run's pytest took 26 min 35 s in one process (2026-11-25) and 14 min 43 s in two
# workers (2026-11-26), each in a fresh clone.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/venv.sh
venv="$(vitdeploy_venv dev)"
# The server's page is tested in a real browser (tests/runtime/apps/test_serve_page.py): Debian's Chromium and its
# driver (24 s to install on 2 cores), installed here when this runs as root with apt, as in CI; elsewhere that test
# skips and says why.
if ! command -v chromedriver >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    { apt-get install -y -qq chromium chromium-driver || { apt-get update -qq && apt-get install -y -qq chromium chromium-driver; }; } \
        >/dev/null 2>&1 || echo "note: could not install chromium + chromium-driver: the page's browser test will skip" >&2
fi
# vitdeploy's own bytecode, once: the install compiles the venv's (scripts/lib/venv.sh), but the checkout is installed
# editable, and where PYTHONDONTWRITEBYTECODE is set (this project's machines set it) every process of the suite (the
# CLI runs, the docs' blocks, Ray's workers) compiled the package's modules from source again (0.23 s against 0.15 s
# for a CLI's imports, in hundreds of processes). 0.3 s on 2 cores; the files are ignored by git.
"$venv/bin/python" -m compileall -q -j 0 vitdeploy >/dev/null
# --durations: the slowest tests, named in every run (what a shorter suite would work on first).
pytest=("$venv/bin/python" -m pytest -n "${VITDEPLOY_TEST_WORKERS:-auto}" --dist loadfile --no-loadscope-reorder --durations=25)
if [ $# -gt 0 ]; then  # the tests asked for, as asked
    exec "${pytest[@]}" "$@"
fi
# The whole suite: the main suite, then the Arm stage, each timed. The Arm stage runs the torch-free runtime and the
# C++ library on aarch64 under qemu (tests/test_arm.py, scripts/arm-check.sh) against the same files here: its arm64
# root is made once per machine where it is missing (debootstrap and pip under emulation, about 8 min on 2 cores) and
# kept in $VITDEPLOY_ARM_ROOT; a machine that cannot (not root, no binfmt_misc) says why and the stage's test skips.
# SAM 2 video stays out of it (VITDEPLOY_ARM_VIDEO=1 puts it in): on an Intel Xeon host its four graphs took more than
# 13 minutes under qemu. VITDEPLOY_ARM=0 leaves the stage out.
start=$SECONDS
"${pytest[@]}" --ignore=tests/test_arm.py
echo "main suite: $((SECONDS - start)) s"
if [ "${VITDEPLOY_ARM:-1}" != 0 ]; then
    start=$SECONDS
    bash scripts/arm-check.sh --prepare || [ $? = 77 ]  # 77: this machine cannot: the test says why
    VITDEPLOY_ARM_VIDEO="${VITDEPLOY_ARM_VIDEO:-0}" "$venv/bin/python" -m pytest -rs tests/test_arm.py
    echo "Arm stage: $((SECONDS - start)) s"
fi
