"""The environment a tool command runs with, and which variable names count as secrets.

The scrubbed environment is what actually keeps API keys out of reach of everything a command
starts; the command rules' secret checks (`secret_name`) only stop the obvious attempts early,
with a reason the model can read.
"""

from __future__ import annotations

import os
from pathlib import Path

SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
SECRET_PREFIXES = ("ANTHROPIC_", "AWS_", "GITHUB_")


def tool_env(workspace: Path) -> dict[str, str]:
    """The whole environment of a tool command: PATH, HOME (the workspace) and LANG, nothing else.

    Defense in depth: even a command the guard lets through (or a trick it misses) finds no API
    key, token or credential in its own environment.
    """
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(workspace),
        "LANG": "C.UTF-8",
    }


def secret_name(name: str) -> bool:
    """Whether an environment variable's name looks like it holds a secret (case-insensitive)."""
    upper = name.upper()
    return any(word in upper for word in SECRET_WORDS) or upper.startswith(SECRET_PREFIXES)
