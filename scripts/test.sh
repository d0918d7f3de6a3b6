#!/usr/bin/env bash
# Install everything the tests need into .venv, check style and types, run the suite.
# Arguments go to pytest (e.g. -m unit). Exits non-zero on any failure, including
# pytest's "no tests ran" (exit 5).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
# Strict editable mode: a tree of links under build/ that mypy, IDEs and import-linter
# can read (scripts/editable_install.py); installing again refreshes it.
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]' \
    --config-settings editable_mode=strict
# What scripts/up.sh installs, and more: it need not install again (and so rebuild the
# link tree) while the suite runs it.
touch .venv/.loopworks-installed
bash scripts/install-deploy-tools.sh
.venv/bin/python -m ruff check .
# The packages' layers: pyproject's [tool.importlinter] contracts.
.venv/bin/lint-imports --no-cache --no-logo
bash scripts/typecheck.sh
# Most tests wait on servers, git and subprocesses: one pytest process per core it may
# use, up to four, cuts the suite's time by a third or more on two cores. A module's tests
# stay in one process (--dist loadscope), so its fixtures start once.
# LOOPS_TEST_PROCESSES=0 runs them all in pytest's own process.
cores='import os; print(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)'
processes="${LOOPS_TEST_PROCESSES:-$(.venv/bin/python -c "$cores")}"
[ "$processes" -le 4 ] || processes=4
.venv/bin/python -m pytest --numprocesses "$processes" --dist loadscope "$@"
