#!/usr/bin/env bash
# mypy over the `loopworks` package ([tool.mypy] packages), as the strict editable
# install lays it out (scripts/editable_install.py says why, and checks it is current).
# Paths in mypy's messages are given as the checkout's.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
.venv/bin/python scripts/editable_install.py --require-link-tree
.venv/bin/python -m mypy | sed -u 's|^build/__editable__[^/]*/loopworks/||'
