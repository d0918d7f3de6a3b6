"""Git workspaces: per-run working clones of an origin, with the artifact kept as commits.

Plain synchronous code (no Temporal imports) so activities can call it from a thread
and tests can drive it against real repositories on disk.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import posixpath
import re
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

logger = logging.getLogger(__name__)

WORK_REF_PREFIX = "refs/loopworks/"
DEFAULT_BRANCH = "main"
GIT_TIMEOUT_SECONDS = 600.0

_README = (
    "# loopworks runs\n\n"
    "This repository holds loopworks run branches: each run works on its own branch,\n"
    "and its in-progress commits are kept under refs/loopworks/<run id>.\n"
)
# Run ids name a directory and a ref component, so keep them to a safe alphabet.
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
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
_SHA = re.compile(r"^[0-9a-f]{7,64}$")
_FULL_SHA = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
_URL_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")


class GitError(RuntimeError):
    """A git command failed (the message carries git's stderr) or a ref is unusable."""


class CommitNotFoundError(GitError):
    """The commit asked for is on none of origin's branches nor the run's work ref."""


def is_url(origin: str) -> bool:
    """True for `scheme://…` and scp-like `host:path` origins, False for local paths."""
    if "://" in origin:
        return True
    head = origin.split("/", 1)[0]
    return ":" in head and not re.match(r"^[A-Za-z]:$", head)


def _redact(text: str) -> str:
    # Origins may embed tokens (https://user:token@host/...); keep them out of logs.
    return _URL_USERINFO.sub("***@", text)


def _checked_run_id(run_id: str) -> str:
    if not _RUN_ID.match(run_id) or run_id.endswith(".lock") or ".." in run_id:
        raise ValueError(f"run id {run_id!r} is not usable as a directory and ref name")
    return run_id


def work_ref(run_id: str) -> str:
    """The ref on origin holding a run's latest published commit."""
    return f"{WORK_REF_PREFIX}{_checked_run_id(run_id)}"


def _checked_commit(commit: str) -> str:
    # Commits arrive from workflow inputs; anything but a sha could be an option or a rev
    # expression that resolves differently on each worker.
    if not _SHA.match(commit):
        raise ValueError(f"{commit!r} is not a commit sha")
    return commit


def _safe_relpath(path: str) -> str:
    normal = posixpath.normpath(path.replace("\\", "/"))
    if posixpath.isabs(normal) or normal == ".." or normal.startswith("../") or normal == ".":
        raise ValueError(f"path {path!r} is not inside the repository")
    return normal


def _git_date(when: datetime) -> str:
    # Normalise to UTC so equal instants give equal commits whatever the worker's zone.
    aware = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    return aware.replace(microsecond=0).isoformat()


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


class GitWorkspaces:
    """Working clones under `root`, one per run, plus read-only caches of remote origins."""

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
        # A workspace's hooks are content the model could have written: never run them.
        cmd = ["git", "-c", "core.hooksPath=/dev/null", *args]
        shown = _redact(" ".join(cmd))
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
                f"{shown} failed with exit code {proc.returncode}: {_redact(proc.stderr.strip())}"
            )
        return proc

    def _local_origin(self, origin: str) -> str:
        # A leading dash would be read as an option (e.g. --upload-pack=<command>).
        if origin.startswith("-"):
            raise GitError(f"origin {_redact(origin)!r} is neither a URL nor a path")
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

    # -- origins -----------------------------------------------------------------------

    def ensure_default_origin(self, path: Path) -> str:
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
            self._git(
                ["init", "--quiet", "--bare", f"--initial-branch={DEFAULT_BRANCH}", str(bare)]
            )
            self._git(["clone", "--quiet", str(bare), str(clone)])
            (clone / "README.md").write_text(_README, encoding="utf-8")
            self._git(["add", "README.md"], cwd=clone)
            self._git(
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
            self._git(["push", "--quiet", "origin", f"HEAD:refs/heads/{DEFAULT_BRANCH}"], cwd=clone)
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

    def resolve_base(self, origin: str, base_branch: str | None) -> tuple[str, str]:
        """(branch, sha) of `base_branch` on origin, or of origin's default branch."""
        if base_branch is None:
            rows = self._ls_remote(origin, "HEAD", symref=True)
            # The pattern matches ref tails too (refs/remotes/origin/HEAD of a non-bare origin).
            head = [r[0] for r in rows if r[1:] == ["HEAD"]]
            target = next((v for v in head if v.startswith("ref: ")), None)
            sha = next((v for v in head if not v.startswith("ref: ")), None)
            if not head:
                raise GitError(f"origin {_redact(origin)} is empty: it has no commits")
            if target is None:
                raise GitError(
                    f"origin {_redact(origin)} has a detached HEAD: name a base branch explicitly"
                )
            branch = target.removeprefix("ref: ").removeprefix("refs/heads/")
            if sha is None:
                raise GitError(f"default branch {branch!r} of {_redact(origin)} has no commits")
            return branch, sha
        branch = base_branch.removeprefix("refs/heads/")
        ref = f"refs/heads/{branch}"
        self._check_ref(ref)
        for row in self._ls_remote(origin, ref):
            if len(row) == 2 and row[1] == ref:
                return branch, row[0]
        raise GitError(f"branch {branch!r} does not exist on origin {_redact(origin)}")

    # -- run workspaces ----------------------------------------------------------------

    def workdir(self, run_id: str, slot: str | None = None) -> Path:
        """Where the run's working clone lives (it may not exist yet).

        A `slot` gives one run several clones, for steps that read the tree in parallel.
        """
        name = _checked_run_id(run_id)
        return self.root / (f"{name}.{_checked_run_id(slot)}" if slot else name)

    def checkout(self, run_id: str, origin: str, commit: str, slot: str | None = None) -> Path:
        """The run's clone with its tree exactly at `commit`, whatever was there before."""
        workdir = self.workdir(run_id, slot)
        _checked_commit(commit)
        try:
            self._sync(workdir, run_id, origin, commit)
        except CommitNotFoundError:
            raise
        except GitError as exc:
            # A crashed attempt can leave locks or a corrupt clone; start over once.
            logger.warning("re-cloning workspace %s after: %s", workdir, exc)
            _rmtree(workdir)
            self._sync(workdir, run_id, origin, commit)
        return workdir

    def _is_clone(self, workdir: Path) -> bool:
        if not (workdir / ".git").is_dir():
            return False
        proc = self._git(["rev-parse", "--absolute-git-dir"], cwd=workdir, check=False)
        return proc.returncode == 0 and Path(proc.stdout.strip()) == (workdir / ".git").resolve()

    def _sync(self, workdir: Path, run_id: str, origin: str, commit: str) -> None:
        url = self._local_origin(origin)
        if not self._is_clone(workdir):
            _rmtree(workdir)
            self._clone(url, workdir)
        self._git(["remote", "set-url", "origin", url], cwd=workdir)
        self._git(
            ["fetch", "--quiet", "--no-tags", "origin", "+refs/heads/*:refs/remotes/origin/*"],
            cwd=workdir,
        )
        if not self._has_commit(commit, cwd=workdir):
            # The commit is not on a branch, so it must be the run's published work,
            # whose ref is absent until the run's first publish.
            ref = work_ref(run_id)
            if any(row[1:] == [ref] for row in self._ls_remote(url, ref)):
                self._git(["fetch", "--quiet", "--no-tags", "origin", f"+{ref}:{ref}"], cwd=workdir)
            if not self._has_commit(commit, cwd=workdir) and _FULL_SHA.match(commit):
                # A commit pushed by a step that was later superseded is no longer on the
                # work ref; most servers (protocol v2) still serve it when asked by sha.
                self._git(
                    ["fetch", "--quiet", "--no-tags", "origin", commit], cwd=workdir, check=False
                )
            if not self._has_commit(commit, cwd=workdir):
                raise CommitNotFoundError(f"commit {commit} is not on origin's branches or {ref}")
        self._git(["checkout", "--quiet", "--detach", "--force", commit], cwd=workdir)
        self._git(["clean", "-ffdxq"], cwd=workdir)

    def _clone(self, url: str, workdir: Path) -> None:
        workdir.parent.mkdir(parents=True, exist_ok=True)
        # Clone aside and rename, so a directory at `workdir` is always a complete clone.
        staging = workdir.parent / f".{workdir.name}.clone-{uuid.uuid4().hex}"
        try:
            self._git(["clone", "--quiet", "--no-checkout", url, str(staging)])
            os.rename(staging, workdir)
        finally:
            _rmtree(staging)

    def commit(self, workdir: Path, message: str, when: datetime) -> str:
        """Commit the whole tree; same parent, content, message and `when` give the same sha."""
        date = _git_date(when)
        self._git(["add", "-A"], cwd=workdir)
        self._git(
            [
                "-c",
                "commit.gpgsign=false",
                "commit",
                "--quiet",
                "--allow-empty",
                "--no-verify",
                "-m",
                message,
            ],
            cwd=workdir,
            env={"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date},
        )
        return self._git(["rev-parse", "HEAD"], cwd=workdir).stdout.strip()

    def changed_paths(self, workdir: Path) -> list[str]:
        """Paths (relative, sorted) whose content differs from HEAD: what `commit` would record."""
        out = self._git(
            ["status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames"],
            cwd=workdir,
        ).stdout
        # Each entry is "XY <path>"; without renames there is no second path.
        return sorted(entry[3:] for entry in out.split("\0") if len(entry) > 3)

    def publish(self, workdir: Path, run_id: str, commit: str) -> None:
        """Force-push `commit` to the run's work ref so any worker can fetch it."""
        ref = work_ref(run_id)
        _checked_commit(commit)
        self._git(
            ["push", "--quiet", "--force", "--no-verify", "origin", f"{commit}:{ref}"], cwd=workdir
        )

    def push_branch(self, workdir: Path, branch: str, commit: str) -> str:
        """Force-push `commit` to `branch` on origin and return the sha origin now reports."""
        ref = f"refs/heads/{branch}"
        self._check_ref(ref)
        _checked_commit(commit)
        full = self._git(
            ["rev-parse", "--verify", f"{commit}^{{commit}}"], cwd=workdir
        ).stdout.strip()
        self._git(
            ["push", "--quiet", "--force", "--no-verify", "origin", f"{full}:{ref}"], cwd=workdir
        )
        url = self._git(["remote", "get-url", "origin"], cwd=workdir).stdout.strip()
        remote = next(
            (r[0] for r in self._ls_remote(url, ref) if len(r) == 2 and r[1] == ref), None
        )
        if remote != full:
            raise GitError(f"origin has {ref} at {remote}, expected {full} after push")
        return remote

    # -- reading from origin -----------------------------------------------------------

    def read_file(self, origin: str, commit: str, path: str) -> str | None:
        """Text of `path` at `commit` on origin, or None when that commit has no such file."""
        relpath = _safe_relpath(path)
        _checked_commit(commit)
        with self._origin_git_dir(origin, commit=commit) as git_dir:
            if not self._has_commit(commit, git_dir=git_dir):
                raise GitError(f"commit {commit} is not on origin {_redact(origin)}")
            spec = f"{commit}:{relpath}"
            kind = self._git([f"--git-dir={git_dir}", "cat-file", "-t", spec], check=False)
            if kind.returncode != 0 or kind.stdout.strip() != "blob":
                return None
            data = subprocess.run(
                ["git", f"--git-dir={git_dir}", "cat-file", "blob", spec],
                env=self._env(),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                check=False,
                timeout=GIT_TIMEOUT_SECONDS,
            )
            if data.returncode != 0:
                raise GitError(
                    f"could not read {spec}: {data.stderr.decode(errors='replace').strip()}"
                )
            return data.stdout.decode("utf-8", errors="replace")

    def read_file_at_ref(self, origin: str, ref: str, path: str) -> str | None:
        """Text of `path` where `ref` points on origin now; None without the ref or file."""
        self._check_ref(ref)
        with self._origin_git_dir(origin, commit=None) as git_dir:
            found = self._git(
                [f"--git-dir={git_dir}", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
                check=False,
            )
        if found.returncode != 0:
            return None
        return self.read_file(origin, found.stdout.strip(), path)

    def list_files(self, origin: str, commit: str, directory: str) -> list[str]:
        """Paths of the files under `directory` at `commit` on origin, recursively, sorted;
        empty when the commit has no such directory."""
        relpath = _safe_relpath(directory)
        _checked_commit(commit)
        with self._origin_git_dir(origin, commit=commit) as git_dir:
            if not self._has_commit(commit, git_dir=git_dir):
                raise GitError(f"commit {commit} is not on origin {_redact(origin)}")
            args = ["ls-tree", "-r", "-z", "--name-only", commit, "--", f"{relpath}/"]
            out = self._git([f"--git-dir={git_dir}", *args]).stdout
        return sorted(path for path in out.split("\0") if path)

    def branch_log(self, origin: str, branch: str) -> list[str]:
        """Commit subjects of `branch` on origin, newest first."""
        ref = f"refs/heads/{branch.removeprefix('refs/heads/')}"
        self._check_ref(ref)
        with self._origin_git_dir(origin, commit=None) as git_dir:
            out = self._git([f"--git-dir={git_dir}", "log", "--format=%s", ref, "--"]).stdout
        return out.splitlines()

    @staticmethod
    def file_sha256(workdir: Path, path: str) -> str | None:
        """Hex SHA-256 of a workspace file's bytes, or None when it is absent."""
        return file_sha256(workdir, path)

    @contextmanager
    def _origin_git_dir(self, origin: str, commit: str | None) -> Iterator[str]:
        """A git dir holding origin's objects: origin itself when local, else a cache."""
        if not is_url(origin):
            local = Path(origin).expanduser().resolve()
            dotgit = local / ".git"
            yield str(dotgit if dotgit.exists() else local)
            return
        key = hashlib.sha256(origin.encode()).hexdigest()[:16]
        cache = self.root / ".cache" / key
        # Concurrent activities share the cache; git's ref locks would make fetches collide.
        with _file_lock(self.root / ".cache" / f"{key}.lock"):
            if not (cache / "HEAD").exists():
                _rmtree(cache)
                self._git(["init", "--quiet", "--bare", str(cache)])
            # Commits never change, so a cached one needs no fetch; branches do move.
            if commit is None or not self._has_commit(commit, git_dir=str(cache)):
                self._git(
                    [
                        f"--git-dir={cache}",
                        "fetch",
                        "--quiet",
                        "--no-tags",
                        "--prune",
                        self._local_origin(origin),
                        "+refs/heads/*:refs/heads/*",
                        "+refs/loopworks/*:refs/loopworks/*",
                    ]
                )
            yield str(cache)


def file_sha256(workdir: Path, path: str) -> str | None:
    """Hex SHA-256 of a workspace file's bytes, or None when it is absent."""
    target = Path(workdir) / _safe_relpath(path)
    if not target.is_file():
        return None
    return hashlib.sha256(target.read_bytes()).hexdigest()
