"""Running git: one place that starts git processes, with an environment that cannot
point them at another repository, a timeout, and git's own words when one fails.

Plain synchronous code (no Temporal imports): activities call it from a thread.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from loopworks.workspace.refs import (
    is_url,
    redact,
)

logger = logging.getLogger(__name__)

GIT_TIMEOUT_SECONDS = 600.0
# Variables that would point git at some other repository or pin commit dates.
_STRIPPED_ENV = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_AUTHOR_DATE",
    "GIT_COMMITTER_DATE",
)


class GitError(RuntimeError):
    """A git command failed (the message carries git's stderr) or a ref is unusable."""


class CommitNotFoundError(GitError):
    """The commit asked for is on none of origin's branches nor the run's work ref."""


def _rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class GitRunner:
    """Runs git for one data directory (`root`): a clean environment, timeouts, and git's
    stderr in the error when a command fails."""

    def __init__(self, root: Path, author_name: str, author_email: str) -> None:
        self.root = Path(root)
        self.author_name = author_name
        self.author_email = author_email

    # -- running git -------------------------------------------------------------------

    def _env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _STRIPPED_ENV}
        env.update(
            GIT_AUTHOR_NAME=self.author_name,
            GIT_AUTHOR_EMAIL=self.author_email,
            GIT_COMMITTER_NAME=self.author_name,
            GIT_COMMITTER_EMAIL=self.author_email,
            GIT_TERMINAL_PROMPT="0",
        )
        env.update(extra or {})
        return env

    def _git(
        self,
        args: Sequence[str],
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        # A workspace's hooks and fsmonitor are content the model could have written: never
        # run them (the sandbox keeps .git read-only too; this holds with LOOPS_SANDBOX=off).
        cmd = ["git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", *args]
        shown = redact(" ".join(cmd))
        logger.debug("git: %s (cwd=%s)", shown, cwd)
        try:
            proc = subprocess.run(
                cmd,
                cwd=cwd,
                env=self._env(env),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=GIT_TIMEOUT_SECONDS,
            )
        except subprocess.TimeoutExpired as exc:
            raise GitError(f"{shown} timed out after {GIT_TIMEOUT_SECONDS:.0f}s") from exc
        except OSError as exc:
            raise GitError(f"{shown} could not run: {exc}") from exc
        if check and proc.returncode != 0:
            raise GitError(
                f"{shown} failed with exit code {proc.returncode}: {redact(proc.stderr.strip())}"
            )
        return proc

    def _local_origin(self, origin: str) -> str:
        # A leading dash would be read as an option (e.g. --upload-pack=<command>).
        if origin.startswith("-"):
            raise GitError(f"origin {redact(origin)!r} is neither a URL nor a path")
        # Absolute paths keep working from any cwd and in a clone's remote config.
        return origin if is_url(origin) else str(Path(origin).expanduser().resolve())

    def _ls_remote(self, origin: str, *patterns: str, symref: bool = False) -> list[list[str]]:
        args = ["ls-remote", *(["--symref"] if symref else []), self._local_origin(origin)]
        out = self._git([*args, *patterns]).stdout
        return [line.split("\t") for line in out.splitlines() if line.strip()]

    def _has_commit(self, commit: str, cwd: Path | None = None, git_dir: str | None = None) -> bool:
        prefix = [f"--git-dir={git_dir}"] if git_dir else []
        args = [*prefix, "cat-file", "-e", f"{commit}^{{commit}}"]
        return self._git(args, cwd=cwd, check=False).returncode == 0

    def _check_ref(self, ref: str) -> None:
        if self._git(["check-ref-format", ref], check=False).returncode != 0:
            raise GitError(f"{ref!r} is not a valid git ref name")
