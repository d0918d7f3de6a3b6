"""The operator's origin allow-list as the settings give it (LOOPS_ALLOWED_ORIGINS,
LOOPS_ALLOWED_SCHEMES, LOOPS_LOCAL_ROOTS), parsed when they are read: what admits an
origin by these rules is workspace/origin_policy.py's `admit`."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from loopworks.schemas.git_names import is_url

ALLOWED_ORIGINS = "LOOPS_ALLOWED_ORIGINS"
ALLOWED_SCHEMES = "LOOPS_ALLOWED_SCHEMES"
LOCAL_ROOTS = "LOOPS_LOCAL_ROOTS"
GIT_CREDENTIALS = "LOOPS_GIT_CREDENTIALS"

# The schemes git speaks itself; any other makes git run `git-remote-<scheme>`.
KNOWN_SCHEMES = frozenset({"https", "ssh", "http", "git", "file"})
DEFAULT_SCHEMES = frozenset({"https", "ssh"})
SCHEME_ALIASES = {"git+ssh": "ssh", "ssh+git": "ssh"}


@dataclass(frozen=True)
class OriginRules:
    """The operator's allow-list, paths already absolute and resolved."""

    allowed: tuple[str, ...] = ()
    schemes: frozenset[str] = DEFAULT_SCHEMES
    local_roots: tuple[str, ...] = ()
    # The data and workspaces directories: never an origin (the service's own clones and
    # caches), whatever root contains them.
    private_dirs: tuple[str, ...] = ()
    # The service's own default origin, as the service names it: always admitted.
    own: tuple[str, ...] = ()


def _split_list(raw: str | None) -> list[str]:
    return [item.strip() for item in (raw or "").split(",") if item.strip()]


def rules_from(
    allowed: str | None,
    schemes: str,
    local_roots: str | None,
    own: tuple[str, ...],
    private_dirs: tuple[Path, ...],
) -> OriginRules:
    """The rules the settings of those names make, directories resolved (symlinks too)."""
    return OriginRules(
        allowed=tuple(_split_list(allowed)),
        schemes=schemes_from(schemes),
        local_roots=tuple(_real(root) for root in _split_list(local_roots)),
        private_dirs=tuple(_real(str(path)) for path in private_dirs),
        own=tuple(o if is_url(o) else _real(o) for o in own),
    )


def schemes_from(raw: str) -> frozenset[str]:
    """The schemes LOOPS_ALLOWED_SCHEMES names; ValueError for one git does not speak."""
    named = {SCHEME_ALIASES.get(s.lower(), s.lower()) for s in _split_list(raw)}
    if unknown := named - KNOWN_SCHEMES:
        known = ", ".join(sorted(KNOWN_SCHEMES))
        raise ValueError(f"{ALLOWED_SCHEMES}: unknown scheme(s) {sorted(unknown)}; use {known}")
    return frozenset(named)


def _real(path: str) -> str:
    return os.path.realpath(os.path.expanduser(path))
