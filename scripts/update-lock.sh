#!/usr/bin/env bash
# Run the suite against the newest releases (.venv-latest) and, when it passes, write their versions
# to requirements.lock (then update the tested versions in vitdeploy/tested_versions.py; a test checks
# that the two agree).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/venv.sh
# The benchmarks' peers are locked too: installed before the suite runs, so the locked set is the tested set.
VITDEPLOY_DEPS=latest vitdeploy_venv dev,bench > /dev/null
VITDEPLOY_DEPS=latest bash scripts/test.sh -q "$@"
{ sed -n '/^#/p' requirements.lock; .venv-latest/bin/pip freeze --all | grep -v -E '^(-e |# Editable|pip==)'; } > requirements.lock.new
mv requirements.lock.new requirements.lock
git diff --stat requirements.lock
