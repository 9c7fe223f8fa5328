#!/usr/bin/env bash
# Set up (a .venv from this checkout's own files) and run the test suite. CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
exec .venv/bin/python -m pytest "$@"
