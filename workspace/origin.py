"""Reading a run's files from its origin without a working clone: a local origin is read
in place, a remote one through a bare cache under the data directory."""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from loopworks.workspace.refs import (
    checked_commit,
    is_url,
    redact,
    safe_relpath,
)
from loopworks.workspace.runner import (
    GIT_TIMEOUT_SECONDS,
    GitError,
    GitRunner,
    _file_lock,
    _rmtree,
)


class OriginReader(GitRunner):
    def read_file(self, origin: str, commit: str, path: str) -> str | None:
        """Text of `path` at `commit` on origin, or None when that commit has no such file."""
        relpath = safe_relpath(path)
        checked_commit(commit)
        with self._origin_git_dir(origin, commit=commit) as git_dir:
            if not self._has_commit(commit, git_dir=git_dir):
                raise GitError(f"commit {commit} is not on origin {redact(origin)}")
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
        commit = self.commit_at_ref(origin, ref)
        return None if commit is None else self.read_file(origin, commit, path)

    def commit_at_ref(self, origin: str, ref: str) -> str | None:
        """The commit `ref` points to on origin now; None without the ref."""
        self._check_ref(ref)
        with self._origin_git_dir(origin, commit=None) as git_dir:
            found = self._git(
                [f"--git-dir={git_dir}", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
                check=False,
            )
        return found.stdout.strip() if found.returncode == 0 else None

    def list_files(self, origin: str, commit: str, directory: str | None = None) -> list[str]:
        """Paths of the files under `directory` (None: the whole tree) at `commit` on
        origin, recursively, sorted; empty when the commit has no such directory."""
        under = [] if directory is None else ["--", f"{safe_relpath(directory)}/"]
        checked_commit(commit)
        with self._origin_git_dir(origin, commit=commit) as git_dir:
            if not self._has_commit(commit, git_dir=git_dir):
                raise GitError(f"commit {commit} is not on origin {redact(origin)}")
            args = ["ls-tree", "-r", "-z", "--name-only", commit, *under]
            out = self._git([f"--git-dir={git_dir}", *args]).stdout
        return sorted(path for path in out.split("\0") if path)

    def branch_log(self, origin: str, branch: str) -> list[str]:
        """Commit subjects of `branch` on origin, newest first."""
        ref = f"refs/heads/{branch.removeprefix('refs/heads/')}"
        self._check_ref(ref)
        with self._origin_git_dir(origin, commit=None) as git_dir:
            out = self._git([f"--git-dir={git_dir}", "log", "--format=%s", ref, "--"]).stdout
        return out.splitlines()

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
