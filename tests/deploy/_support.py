"""Shared helpers for the deploy tests: repo paths, the .env file, the validators."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from loopworks.deploy.binaries import find_binary

REPO = Path(__file__).resolve().parents[2]
INSTALL_HINT = "run scripts/install-deploy-tools.sh (as root for the apt packages)"

# Variables deploy/processes.py lists that the worker containers get from their env
# files (compose: loopworks.worker.env; Kubernetes: the loopworks-worker-secrets
# Secret) instead of `environment`. An `environment` entry would override the file
# (and an empty LOOPS_LLM is not a valid provider), so they must NOT be there.
ENV_FILE_NAMES = frozenset({"ANTHROPIC_API_KEY", "LOOPS_LLM"})


def require_tool(name: str) -> str:
    """Path of a validator binary; fail (never skip) when it is missing."""
    try:
        return find_binary(name)
    except FileNotFoundError:
        pytest.fail(f"{name} not found beside {sys.executable} or on PATH: {INSTALL_HINT}")


def run(args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def read_dotenv(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of an env file, comments and blank lines skipped."""
    values: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep, f"{path.name}: not KEY=VALUE: {raw!r}"
        values[key.strip()] = value.strip()
    return values


def mentioned_env_names(path: Path) -> set[str]:
    """Names assigned in an env file, including commented-out `# NAME=value` lines."""
    names: set[str] = set()
    for raw in path.read_text().splitlines():
        line = raw.strip().lstrip("#").strip()
        key, sep, _ = line.partition("=")
        if sep and key.isidentifier() and key.isupper():
            names.add(key)
    return names
