"""The origin of runs that name no repository.

With LOOPS_DEFAULT_ORIGIN a URL it is a git server's repository, shared by every worker and
the API, so a worker's data directory holds nothing but caches; the server side creates and
seeds that repository (deploy/git-server.sh), never a worker. Otherwise it is a bare
repository on disk, created on first use: `loops up` and any single machine.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

from loopworks.schemas.git_names import is_url
from loopworks.schemas.settings import Settings
from loopworks.workspace.lockdown import serving_program
from loopworks.workspace.runner import GitRunner, _rmtree
from loopworks.workspace.stores import mark_own_origin

logger = logging.getLogger(__name__)

DEFAULT_BRANCH = "main"

_README = (
    "# loopworks runs\n\n"
    "This repository holds loopworks run branches: each run works on its own branch,\n"
    "and its in-progress commits are kept under refs/loopworks/<run id>.\n"
)


def default_origin(settings: Settings) -> str:
    """Where the default origin is, without touching it: the URL as configured, else an
    absolute path (every process names it the same way, and its playbook by it)."""
    configured = settings.default_origin_location
    if configured and is_url(configured):
        return configured
    path = Path(configured).expanduser() if configured else settings.default_origin
    return str(path.resolve())


def ensure_default_origin(settings: Settings, git: GitRunner) -> str:
    """The default origin, created first when it is a path that does not exist yet."""
    origin = default_origin(settings)
    if is_url(origin):
        return origin
    return create_default_origin(git, Path(origin))


def create_default_origin(git: GitRunner, path: Path) -> str:
    """Create a bare origin at `path` with one commit on `main`, unless it exists."""
    path = Path(path)
    if path.exists():
        return str(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the target and rename into place: a racing process either wins
    # the rename or finds the finished repository, never a half-built one.
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        bare, clone = staging / "origin.git", staging / "clone"
        git._git(["init", "--quiet", "--bare", f"--initial-branch={DEFAULT_BRANCH}", str(bare)])
        git._git(["clone", "--quiet", *serving_program(str(bare), "clone"), str(bare), str(clone)])
        (clone / "README.md").write_text(_README, encoding="utf-8")
        mark_own_origin(bare)
        git._git(["add", "README.md"], cwd=clone)
        git._git(
            [
                "-c",
                "commit.gpgsign=false",
                "commit",
                "--quiet",
                "--no-verify",
                "-m",
                "Initial commit",
            ],
            cwd=clone,
        )
        push = ["push", "--quiet", *serving_program(str(bare), "push"), "origin"]
        git._git([*push, f"HEAD:refs/heads/{DEFAULT_BRANCH}"], cwd=clone)
        try:
            os.rename(bare, path)
            logger.info("created default origin at %s", path)
        except OSError:
            if not path.exists():
                raise
            logger.debug("default origin %s was created concurrently", path)
    finally:
        _rmtree(staging)
    return str(path)
