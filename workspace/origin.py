"""Reading a run's files from its origin without a working clone: a local origin is read
in place, a remote one through a bare cache under the data directory."""

from __future__ import annotations

import hashlib
import logging
import posixpath
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path

from loopworks.schemas.git_names import is_url
from loopworks.workspace.changes import FileChange, changes_between
from loopworks.workspace.objects import (
    commit_of,
    holds_commit,
    open_repository,
    read_path,
    tree_of,
    tree_paths,
)
from loopworks.workspace.refs import CALLS_REF_PREFIX, checked_commit, redact, safe_relpath
from loopworks.workspace.runner import (
    CloneTooLargeError,
    GitError,
    GitRunner,
    _file_lock,
    _rmtree,
)
from loopworks.workspace.sweep import used

logger = logging.getLogger(__name__)

# What a cache of a remote origin fetches: its branches and the runs' work refs, but not
# the single-shot calls' refs beside them (tens of thousands on a busy origin, read only
# when someone asks for a trajectory). A negative refspec: git 2.29 or later.
WORK_REFSPECS = (
    "+refs/heads/*:refs/heads/*",
    "+refs/loopworks/*:refs/loopworks/*",
    f"^{CALLS_REF_PREFIX}*",
)


class Absent(Enum):
    """Why a tree has no file to read at a path."""

    MISSING = "missing"  # nothing there, a directory, or a symlink to nothing
    OUTSIDE = "outside"  # the path, or a symlink on it, leads out of the tree


def tree_path(relpath: str) -> str | None:
    """`relpath` as a path inside a tree, `..` and `.` resolved; None when it is absolute
    or climbs out of the tree."""
    if relpath.startswith("/"):
        return None
    path = posixpath.normpath(relpath)
    return None if path == ".." or path.startswith("../") else path


class OriginReader(GitRunner):
    def read_file(self, origin: str, commit: str, path: str) -> str | None:
        """Text of `path` at `commit` on origin, or None when that commit has no such file."""
        relpath = safe_relpath(path)
        checked_commit(commit)
        with self._origin_git_dir(origin, commit=commit) as git_dir:
            repo = open_repository(git_dir)
            tree = tree_of(repo, f"{commit}^{{commit}}")
            if tree is None:
                raise GitError(f"commit {commit} is not on origin {redact(origin)}")
            found = read_path(repo, tree, relpath)
        if found is None or found[0] != "blob":
            return None
        return found[1].decode("utf-8", errors="replace")

    def read_tree_files(
        self, git_dir: str, commit: str, paths: list[str]
    ) -> dict[str, str | Absent] | None:
        """The text of each of `paths` in `commit`'s tree, as a checkout of it would show
        it (symlinks inside the tree followed); None when `git_dir` does not hold the
        commit or cannot be read."""
        checked_commit(commit)
        try:
            repo = open_repository(git_dir)
        except GitError:
            return None  # e.g. a clone deleted under us: the caller asks elsewhere
        tree = tree_of(repo, f"{commit}^{{commit}}")
        if tree is None:
            return None
        read: dict[str, str | Absent] = {}
        for path in paths:
            inside = tree_path(path)
            try:
                found = None if inside is None else read_path(repo, tree, inside, True)
            except GitError:
                return None  # its objects went away under us: the caller asks elsewhere
            read[path] = _text(inside, found)
        return read

    def _has_commit(self, commit: str, repository: str | Path) -> bool:
        """Whether the repository at `repository` (a work tree or a git dir) exists and
        holds `commit`."""
        return holds_commit(repository, f"{commit}^{{commit}}")

    def read_file_at_ref(self, origin: str, ref: str, path: str) -> str | None:
        """Text of `path` where `ref` points on origin now; None without the ref or file."""
        commit = self.commit_at_ref(origin, ref)
        return None if commit is None else self.read_file(origin, commit, path)

    def commit_at_ref(self, origin: str, ref: str) -> str | None:
        """The commit `ref` points to on origin now; None without the ref."""
        self._check_ref(ref)
        with self._origin_git_dir(origin, commit=None) as git_dir:
            return commit_of(open_repository(git_dir), f"{ref}^{{commit}}")

    def list_files(self, origin: str, commit: str, directory: str | None = None) -> list[str]:
        """Paths of the files under `directory` (None: the whole tree) at `commit` on
        origin, recursively, sorted; empty when the commit has no such directory."""
        under = None if directory is None else safe_relpath(directory)
        checked_commit(commit)
        with self._origin_git_dir(origin, commit=commit) as git_dir:
            listed = tree_paths(open_repository(git_dir), f"{commit}^{{commit}}", under)
        if listed is None:
            raise GitError(f"commit {commit} is not on origin {redact(origin)}")
        return sorted(listed)

    def changes_since(self, origin: str, first: str, last: str) -> list[FileChange]:
        """What commits `first` to `last` changed: from `first`'s parent to `last` (a run's
        work, from its first commit's parent, the commit it started from, to its latest)."""
        checked_commit(first)
        checked_commit(last)
        with self._origin_git_dir(origin, commit=last) as git_dir:
            return changes_between(git_dir, f"{first}^", last)

    def branch_log(self, origin: str, branch: str) -> list[str]:
        """Commit subjects of `branch` on origin, newest first."""
        ref = f"refs/heads/{branch.removeprefix('refs/heads/')}"
        self._check_ref(ref)
        with self._origin_git_dir(origin, commit=None) as git_dir:
            out = self._git([f"--git-dir={git_dir}", "log", "--format=%s", ref, "--"]).stdout
        return out.splitlines()

    def _fetch_into(self, cache: Path, fetch: list[str], origin: str) -> None:
        try:
            self._git_capped(fetch, cache, f"origin {redact(origin)}")
        except CloneTooLargeError:
            _rmtree(cache)
            raise

    @contextmanager
    def _origin_git_dir(
        self, origin: str, commit: str | None, refspecs: tuple[str, ...] = WORK_REFSPECS
    ) -> Iterator[str]:
        """A git dir holding origin's objects: origin itself when local, else a cache,
        brought up to date by fetching `refspecs` (origin's branches and work refs; never
        its call refs, unless asked: workspace/call_records.py)."""
        if not is_url(origin):
            local = Path(self._local_origin(origin))
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
            if commit is None or not self._has_commit(commit, cache):
                url = self._local_origin(origin, reached_next=True)
                fetch = [
                    f"--git-dir={cache}",
                    *self._reaching(url, "fetch", "--quiet", "--no-tags", "--prune"),
                    url,
                    *refspecs,
                ]
                try:
                    self._fetch_into(cache, fetch, origin)
                except GitError:
                    # A git killed mid-fetch (a worker's crash, a timeout's kill) leaves
                    # its ref locks, and each fails every later fetch: none is held now
                    # (this process holds the cache's lock), so they go, and it is tried
                    # once more.
                    if not _clear_stale_locks(cache):
                        raise
                    logger.warning("cleared stale git locks in %s after a failed fetch", cache)
                    self._fetch_into(cache, fetch, origin)
            used(self.root, cache)
            yield str(cache)


def _clear_stale_locks(git_dir: Path) -> int:
    """Remove the lock files in a git dir no git works in now; how many there were."""
    stale = [path for path in git_dir.rglob("*.lock") if path.is_file()]
    for path in stale:
        path.unlink(missing_ok=True)
    return len(stale)


def _text(path: str | None, found: tuple[str, bytes] | None) -> str | Absent:
    if path is None:
        return Absent.OUTSIDE
    if found is None or found[0] not in ("blob", "symlink"):
        return Absent.MISSING
    if found[0] == "symlink":
        return Absent.OUTSIDE
    # As a checkout reads it (Path.read_text): universal newlines, so `^`/`$` patterns
    # match a CRLF file's lines the same way.
    text = found[1].decode("utf-8", errors="replace")
    return text.replace("\r\n", "\n").replace("\r", "\n")
