#!/usr/bin/env bash
# Set up (a venv from this checkout's own files, at the versions in requirements.lock) and run the
# test suite. CI runs exactly this. Arguments go to pytest.
#   scripts/test.sh                         # the locked versions (.venv)
#   VITDEPLOY_DEPS=latest scripts/test.sh   # the newest releases pyproject.toml allows (.venv-latest)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/venv.sh
venv="$(vitdeploy_venv dev)"
exec "$venv/bin/python" -m pytest "$@"
