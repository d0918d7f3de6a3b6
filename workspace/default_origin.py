"""The origin of runs that name no repository.

With LOOPS_DEFAULT_ORIGIN a URL it is a git server's repository, shared by every worker and
the API, so a worker's data directory holds nothing but caches; the server side creates and
seeds that repository (deploy/git-server.sh), never a worker. Otherwise it is a bare
repository on disk, created on first use: `loops up` and any single machine.
"""

from __future__ import annotations

from pathlib import Path

from loopworks.schemas.git_names import is_url
from loopworks.schemas.settings import Settings
from loopworks.workspace.git import GitWorkspaces


def default_origin(settings: Settings) -> str:
    """Where the default origin is, without touching it: the URL as configured, else an
    absolute path (every process names it the same way, and its playbook by it)."""
    configured = settings.default_origin_location
    if configured and is_url(configured):
        return configured
    path = Path(configured).expanduser() if configured else settings.default_origin
    return str(path.resolve())


def ensure_default_origin(settings: Settings, workspaces: GitWorkspaces) -> str:
    """The default origin, created first when it is a path that does not exist yet."""
    origin = default_origin(settings)
    if is_url(origin):
        return origin
    return workspaces.ensure_default_origin(Path(origin))
