"""The git the service needs, checked when the worker and the API start.

Caches of a remote origin fetch with a negative refspec (`^refs/loopworks/_trajectory/*`,
docs/observability.md#the-trajectory), which git learnt in 2.29: an older git would fail
every read through a cache with "invalid refspec", long after a start that looked fine.
"""

from __future__ import annotations

import re
import subprocess

MIN_GIT = (2, 29)
_VERSION = re.compile(r"git version (\d+)\.(\d+)")


def git_refusal(git: str = "git") -> str | None:
    """Why this machine's git cannot serve, or None."""
    try:
        said = subprocess.run(
            [git, "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"git cannot be run ({err}): install git {_needed()}"
    found = _VERSION.search(said)
    if found is None:
        return f"`git --version` answered {said.strip()!r}, not a version: install git {_needed()}"
    version = (int(found[1]), int(found[2]))
    if version < MIN_GIT:
        return f"git {version[0]}.{version[1]} is too old: loopworks needs git {_needed()}"
    return None


def _needed() -> str:
    return f">= {MIN_GIT[0]}.{MIN_GIT[1]}"
