#!/usr/bin/env bash
# Set up (a venv from this checkout's own files, at the versions in requirements.lock) and run the
# test suite. CI runs exactly this. Arguments go to pytest.
#   scripts/test.sh                         # the locked versions (.venv)
#   VITDEPLOY_DEPS=latest scripts/test.sh   # the newest releases pyproject.toml allows (.venv-latest)
#   VITDEPLOY_TEST_WORKERS=0 scripts/test.sh tests/test_tune.py   # one process (default: one worker per core)
# The suite runs in parallel workers (pytest-xdist), one test file per worker at a time (--dist loadfile), so a
# file's module fixtures are made once; on 2 cores this took the suite from 24.5 to 15 min (2026-11-26, Zen 3).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/venv.sh
venv="$(vitdeploy_venv dev)"
exec "$venv/bin/python" -m pytest -n "${VITDEPLOY_TEST_WORKERS:-auto}" --dist loadfile "$@"
