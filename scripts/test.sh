#!/usr/bin/env bash
# Install everything the tests need into .venv, check style and types, run the suite.
# Arguments go to pytest (e.g. -m unit). Exits non-zero on any failure, including
# pytest's "no tests ran" (exit 5).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
bash scripts/install-deploy-tools.sh
.venv/bin/python -m ruff check .
bash scripts/typecheck.sh
.venv/bin/python -m pytest "$@"
