"""Running git: one place that starts git processes, with an environment that cannot
point them at another repository, a timeout, and git's own words when one fails.

Plain synchronous code (no Temporal imports): activities call it from a thread.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shlex
import shutil
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path

from loopworks.schemas.git_credentials import ENV_VAR as CREDENTIALS_ENV_VAR
from loopworks.schemas.git_names import is_url, valid_ref_name
from loopworks.workspace.refs import redact

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
    # Programs git would ask for a password: the credential helper below is the only
    # source of credentials (GIT_ASKPASS is set empty in `_env`, which also hides these).
    "SSH_ASKPASS",
    CREDENTIALS_ENV_VAR,
)
# The one credential helper git may use: answers for configured https hosts only
# (schemas/git_credentials.py). `!` makes git run it through the shell, hence the quoting.
CREDENTIAL_HELPER = f"!{shlex.quote(sys.executable)} -m loopworks.workspace.git_credential"
# Before it, an empty `credential.helper` clears every helper git's config files named
# (system, global, a repository's, url-scoped ones): command-line config is read last.
# core.askPass empty and GIT_ASKPASS empty leave git no program to ask for a password.
# No redirects: an admitted host must not send git on to one the origin policy refuses
# (workspace/origin_policy.py judged the host named, not where it redirects).
_CREDENTIAL_CONFIG = (
    "-c",
    "credential.helper=",
    "-c",
    f"credential.helper={CREDENTIAL_HELPER}",
    "-c",
    "core.askPass=",
    "-c",
    "http.followRedirects=false",
)


class GitCounts:
    """How many git commands this process ran, by subcommand: what scripts/bench.py
    reports per run and what tests assert a cached step does not do. Counting is a lock
    and a dict update beside the command, so it stays on."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, args: Sequence[str]) -> None:
        command = _subcommand(args)
        with self._lock:
            self._counts[command] += 1

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return self._counts.copy()


def _subcommand(args: Sequence[str]) -> str:
    """`cat-file` of `--git-dir=x -c k=v cat-file -e sha`: the first word not an option."""
    words = iter(args)
    for word in words:
        if word == "-c":
            next(words, None)
        elif not word.startswith("-"):
            return word
    return "?"


# git processes started (this module), and git's plumbing answered in-process instead
# (workspace/objects.py), each by the git command it is.
GIT_SPAWNS = GitCounts()
GIT_IN_PROCESS = GitCounts()


class GitError(RuntimeError):
    """A git command failed (the message carries git's stderr) or a ref is unusable."""


class OriginLacksError(GitError):
    """Origin answered, and lacks what the run starts from (the branch named, any commit):
    asking again cannot help, so the step fails at once instead of retrying."""


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


def _shown(cmd: Sequence[str]) -> str:
    return redact(" ".join(cmd))


@contextmanager
def _spawning(cmd: Sequence[str]) -> Iterator[None]:
    """git's failures to start or finish in time, as GitError."""
    try:
        yield
    except subprocess.TimeoutExpired as exc:
        raise GitError(f"{_shown(cmd)} timed out after {GIT_TIMEOUT_SECONDS:.0f}s") from exc
    except OSError as exc:
        raise GitError(f"{_shown(cmd)} could not run: {exc}") from exc


class GitRunner:
    """Runs git for one data directory (`root`): a clean environment, timeouts, and git's
    stderr in the error when a command fails."""

    def __init__(
        self,
        root: Path,
        author_name: str,
        author_email: str,
        credentials: str | None = None,
        origin_check: Callable[[str], None] | None = None,
    ) -> None:
        self.root = Path(root)
        self.author_name = author_name
        self.author_email = author_email
        # LOOPS_GIT_CREDENTIALS as configured, handed to the credential helper only through
        # git's environment; None: git gets no credential at all.
        self.credentials = credentials
        # Called with every origin before git is given it (workspace/origin_access.py);
        # raises when the deployment does not allow it. None: every origin is used as is.
        self.origin_check = origin_check

    # -- running git -------------------------------------------------------------------

    @cached_property
    def _ceiling(self) -> str:
        # Resolved once: resolving walks every component with a syscall, on every spawn.
        return str(self.root.resolve())

    def _env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _STRIPPED_ENV}
        env.update(
            GIT_AUTHOR_NAME=self.author_name,
            GIT_AUTHOR_EMAIL=self.author_email,
            GIT_COMMITTER_NAME=self.author_name,
            GIT_COMMITTER_EMAIL=self.author_email,
            GIT_TERMINAL_PROMPT="0",
            # Set and empty: git asks no askpass program (core.askPass and SSH_ASKPASS
            # included: git only looks at them when this is unset).
            GIT_ASKPASS="",
            # A clone deleted under a running step (a worker's data directory is a cache)
            # must make git fail, never find a repository above the clones and commit there.
            GIT_CEILING_DIRECTORIES=self._ceiling,
        )
        if self.credentials:
            env[CREDENTIALS_ENV_VAR] = self.credentials
        env.update(extra or {})
        return env

    def _git(
        self,
        args: Sequence[str],
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        cmd = self._command(args, cwd)
        with _spawning(cmd):
            proc = subprocess.run(
                cmd,
                cwd=cwd,
                env=self._env(env),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=GIT_TIMEOUT_SECONDS,
            )
        if check and proc.returncode != 0:
            raise GitError(
                f"{_shown(cmd)} failed with exit code {proc.returncode}: "
                f"{redact(proc.stderr.strip())}"
            )
        return proc

    @staticmethod
    def _command(args: Sequence[str], cwd: Path | None) -> list[str]:
        # Processes for what touches a work tree or the network; git's plumbing (object
        # and ref reads, ref moves, status, trees) is asked in-process: workspace/objects.py
        # says why, on measured numbers.
        # A workspace's hooks and fsmonitor are content the model could have written: never
        # run them (the sandbox keeps .git read-only too; this holds with LOOPS_SANDBOX=off).
        cmd = [
            "git",
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
            *_CREDENTIAL_CONFIG,
            *args,
        ]
        logger.debug("git: %s (cwd=%s)", _shown(cmd), cwd)
        GIT_SPAWNS.add(args)
        return cmd

    def _local_origin(self, origin: str) -> str:
        # A leading dash would be read as an option (e.g. --upload-pack=<command>).
        if origin.startswith("-"):
            raise GitError(f"origin {redact(origin)!r} is neither a URL nor a path")
        if self.origin_check is not None:
            self.origin_check(origin)
        # Absolute paths keep working from any cwd and in a clone's remote config.
        return origin if is_url(origin) else str(Path(origin).expanduser().resolve())

    def _ls_remote(self, origin: str, *patterns: str, symref: bool = False) -> list[list[str]]:
        args = ["ls-remote", *(["--symref"] if symref else []), self._local_origin(origin)]
        out = self._git([*args, *patterns]).stdout
        return [line.split("\t") for line in out.splitlines() if line.strip()]

    def _check_ref(self, ref: str) -> None:
        if not valid_ref_name(ref):
            raise GitError(f"{ref!r} is not a valid git ref name")
