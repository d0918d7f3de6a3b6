"""Running git: one place that starts git processes, with an environment that cannot
point them at another repository, a timeout, and git's own words when one fails.

Plain synchronous code (no Temporal imports): activities call it from a thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path

from loopworks.schemas.git_credentials import ENV_VAR as CREDENTIALS_ENV_VAR
from loopworks.schemas.git_credentials import path_scoped_hosts
from loopworks.schemas.git_names import is_url, valid_ref_name
from loopworks.workspace.lockdown import (
    ALWAYS_ARGS,
    NO_LAZY_FETCH,
    RECEIVE_PACK,
    UPLOAD_PACK,
    WITH_USER_HELPERS_ARGS,
    path_scoped,
    serving_program,
)
from loopworks.workspace.refs import redact

logger = logging.getLogger(__name__)

GIT_TIMEOUT_SECONDS = 600.0
# How often a clone or fetch's directory is measured against the size cap: what it can
# overshoot by is what arrives in this time (git writes the pack as it receives it).
CAP_POLL_SECONDS = 0.1
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


class CloneTooLargeError(GitError):
    """Origin's repository, or the tree of a commit, is larger than LOOPS_MAX_CLONE_BYTES:
    asking again brings the same bytes, so the step fails at once instead of retrying."""

    def __init__(self, what: str, cap: int) -> None:
        super().__init__(
            f"{what} is larger than the clone size cap of {cap} bytes"
            f" ({cap / 1024**2:.0f} MiB, LOOPS_MAX_CLONE_BYTES)"
        )


def _rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def tree_bytes(path: Path) -> int:
    """Bytes of the files under `path` (apparent sizes, links not followed, as
    `du --apparent-size -s` counts them); 0 when it does not exist."""
    total = 0
    pending = [path]
    while pending:
        try:
            with os.scandir(pending.pop()) as found:
                for entry in found:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            pending.append(Path(entry.path))
                        else:
                            total += entry.stat(follow_symlinks=False).st_size
                    except FileNotFoundError:
                        continue  # removed while measured (git renames its temporaries)
        except (FileNotFoundError, NotADirectoryError):
            continue
    return total


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _is_web(url: str) -> bool:
    """An http(s) origin: one git reaches through libcurl, which a pin holds to addresses."""
    return url.split("://", 1)[0].lower() in ("http", "https")


def _shown(cmd: Sequence[str]) -> str:
    """The command as a message names it: the settings it always carries left out."""
    words = list(cmd)
    for always in (ALWAYS_ARGS, WITH_USER_HELPERS_ARGS):
        if words[1 : 1 + len(always)] == list(always):
            words[1 : 1 + len(always)] = []
            break
    shorter = {UPLOAD_PACK: "git upload-pack", RECEIVE_PACK: "git receive-pack"}
    for long, short in shorter.items():
        words = [word.replace(long, short) for word in words]
    return redact(" ".join(words))


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
        max_clone_bytes: int | None = None,
        credentials: str | None = None,
        origin_check: Callable[[str], Sequence[str]] | None = None,
        user_helpers: bool = False,
    ) -> None:
        self.root = Path(root)
        self.author_name = author_name
        self.author_email = author_email
        # LOOPS_MAX_CLONE_BYTES: what one clone of an origin may take (None: no cap).
        self.max_clone_bytes = max_clone_bytes
        # LOOPS_GIT_CREDENTIALS as configured, handed to the credential helper only through
        # git's environment; None: git gets no credential at all.
        self.credentials = credentials
        # Called with every origin before git is given it (workspace/origin_access.py);
        # raises when the deployment does not allow it, else returns the settings that pin
        # an http(s) origin's host to the addresses it admitted (`_reaching`). None: every
        # origin is used as is.
        self.origin_check = origin_check
        # LOOPS_GIT_USER_HELPERS: the credential helpers of the user's own git config are
        # asked too (a `loops up` on loopback, its user the operator); False: ours alone.
        self.user_helpers = user_helpers

    # -- running git -------------------------------------------------------------------

    @cached_property
    def _path_scoped(self) -> tuple[str, ...]:
        # Parsed once: git tells the helper the repository's path where a credential is
        # for some repositories of its host only.
        return path_scoped(path_scoped_hosts(self.credentials))

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
            **NO_LAZY_FETCH,
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

    def _git_capped(
        self, args: Sequence[str], grows: Path, what: str, cwd: Path | None = None
    ) -> None:
        """Run a git command that brings origin's objects into `grows` (a clone being
        made, a clone's or cache's git dir), stopped once `grows` passes the cap.

        git has no size limit on what a clone or fetch receives (`receive.maxInputSize`
        is the pushing side's), so the directory is measured while git writes into it and
        git killed, its helpers with it, once it is over: the disk fills by at most what
        arrives between two measures. What git left behind is the caller's to remove."""
        cap = self.max_clone_bytes
        if cap is None:
            self._git(args, cwd=cwd)
            return
        cmd = self._command(args, cwd)
        with _spawning(cmd):
            proc = subprocess.Popen(
                cmd,
                cwd=cwd,
                env=self._env(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                # Its own process group: index-pack, upload-pack and remote helpers go too.
                start_new_session=True,
            )
        deadline = time.monotonic() + GIT_TIMEOUT_SECONDS
        try:
            while True:
                try:
                    _, stderr = proc.communicate(timeout=CAP_POLL_SECONDS)
                    break
                except subprocess.TimeoutExpired:
                    if tree_bytes(grows) > cap:
                        raise CloneTooLargeError(what, cap) from None
                    if time.monotonic() > deadline:
                        raise GitError(
                            f"{_shown(cmd)} timed out after {GIT_TIMEOUT_SECONDS:.0f}s"
                        ) from None
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
        # Measured once more: a clone can finish between two measures.
        if tree_bytes(grows) > cap:
            raise CloneTooLargeError(what, cap)
        if proc.returncode != 0:
            raise GitError(
                f"{_shown(cmd)} failed with exit code {proc.returncode}: {redact(stderr.strip())}"
            )

    def _command(self, args: Sequence[str], cwd: Path | None) -> list[str]:
        # Processes for what touches a work tree or the network; git's plumbing (object
        # and ref reads, ref moves, status, trees) is asked in-process, for the CPU a process
        # costs (docs/benchmarks.md#figures-behind-individual-choices).
        # No program of the repository runs (HARDENING): neither an origin's nor what a
        # model could have written into a clone's .git (the sandbox keeps .git read-only
        # too; this holds with LOOPS_SANDBOX=off). git asks no credential but ours.
        always = WITH_USER_HELPERS_ARGS if self.user_helpers else ALWAYS_ARGS
        cmd = ["git", *always, *self._path_scoped, *args]
        logger.debug("git: %s (cwd=%s)", _shown(cmd), cwd)
        GIT_SPAWNS.add(args)
        return cmd

    def _local_origin(self, origin: str, reached_next: bool = False) -> str:
        """`origin` checked, as git is given it. `reached_next`: the caller does nothing
        with an http(s) origin before handing it to `_reaching`, which checks it itself to
        pin its addresses; it is not checked here too (its host looked up twice)."""
        # A leading dash would be read as an option (e.g. --upload-pack=<command>).
        if origin.startswith("-"):
            raise GitError(f"origin {redact(origin)!r} is neither a URL nor a path")
        if self.origin_check is not None and not (reached_next and _is_web(origin)):
            self.origin_check(origin)
        # Absolute paths keep working from any cwd and in a clone's remote config.
        return origin if is_url(origin) else str(Path(origin).expanduser().resolve())

    def _reaching(self, url: str, subcommand: str, *options: str) -> list[str]:
        """`<subcommand> <options>` for a git command that reaches origin `url` (clone,
        fetch, push, ls-remote), every such command's words built here: the hardened
        program git starts on the far side when that is a repository on this machine
        (`serving_program`), and for an http(s) origin, before the subcommand, its host
        pinned to the addresses the origin check admits now, right before git runs
        (`-c http.curloptResolve`): libcurl never looks the name up again, so DNS that
        answers differently after the check cannot send git elsewhere (SECURITY.md)."""
        pins = self.origin_check(url) if _is_web(url) and self.origin_check is not None else ()
        return [*pins, subcommand, *options, *serving_program(url, subcommand)]

    def _ls_remote(self, origin: str, *patterns: str, symref: bool = False) -> list[list[str]]:
        url = self._local_origin(origin, reached_next=True)
        args = [*self._reaching(url, "ls-remote", *(["--symref"] if symref else [])), url]
        out = self._git([*args, *patterns]).stdout
        return [line.split("\t") for line in out.splitlines() if line.strip()]

    def _check_ref(self, ref: str) -> None:
        if not valid_ref_name(ref):
            raise GitError(f"{ref!r} is not a valid git ref name")
