#!/usr/bin/env bash
# Run the suite against the newest releases (.venv-latest) and, when it passes, write their versions
# to requirements.lock (then update the tested versions in vitdeploy/tested_versions.py; a test checks
# that the two agree).
set -euo pipefail
cd "$(dirname "$0")/.."
VITDEPLOY_DEPS=latest bash scripts/test.sh -q "$@"
.venv-latest/bin/pip install -q -e '.[dev,bench]'  # the benchmarks' peers are locked too
{ sed -n '/^#/p' requirements.lock; .venv-latest/bin/pip freeze --all | grep -v -E '^(-e |# Editable|pip==)'; } > requirements.lock.new
mv requirements.lock.new requirements.lock
git diff --stat requirements.lock
