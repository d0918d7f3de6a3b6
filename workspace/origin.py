"""Reading a run's files from its origin without a working clone: a local origin is read
in place, a remote one through a bare cache under the data directory."""

from __future__ import annotations

import hashlib
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
        spec = f"{commit}:{relpath}"
        with self._origin_git_dir(origin, commit=commit) as git_dir:
            if "\n" in relpath:
                # A name cat-file --batch cannot take on a line of its own: one at a time.
                if not self._has_commit(commit, git_dir=git_dir):
                    raise GitError(f"commit {commit} is not on origin {redact(origin)}")
                kind = self._git([f"--git-dir={git_dir}", "cat-file", "-t", spec], check=False)
                if kind.returncode != 0 or kind.stdout.strip() != "blob":
                    return None
                data = self._git_bytes([f"--git-dir={git_dir}", "cat-file", "blob", spec], b"")
                return data.stdout.decode("utf-8", errors="replace")
            # Whether the commit exists and what the path holds there: one git process.
            found, blob = self._batch(git_dir, [f"{commit}^{{commit}}", spec])
        if found is None or found[0] != "commit":
            raise GitError(f"commit {commit} is not on origin {redact(origin)}")
        if blob is None or blob[0] != "blob":
            return None
        return blob[1].decode("utf-8", errors="replace")

    def _batch(self, git_dir: str, names: list[str]) -> list[tuple[str, bytes] | None]:
        """(type, content) of each object `git cat-file --batch` finds, None for a missing
        one, in the order asked."""
        text = "".join(f"{name}\n" for name in names).encode()
        out = self._git_bytes([f"--git-dir={git_dir}", "cat-file", "--batch"], text).stdout
        found: list[tuple[str, bytes] | None] = []
        pos = 0
        for _ in names:
            end = out.index(b"\n", pos)
            # "<oid> <type> <size>" then the content and a newline, or "<name> missing"
            # (or "ambiguous"): a name with spaces never ends in a number there.
            header = out[pos:end].split(b" ")
            pos = end + 1
            if len(header) == 3 and header[2].isdigit():
                size = int(header[2])
                found.append((header[1].decode(), out[pos : pos + size]))
                pos += size + 1
            else:
                found.append(None)
        return found

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
            # ls-tree of `commit^{commit}` fails when there is no such commit: no check first.
            args = ["ls-tree", "-r", "-z", "--name-only", f"{commit}^{{commit}}", *under]
            listed = self._git([f"--git-dir={git_dir}", *args], check=False)
        if listed.returncode != 0:
            raise GitError(f"commit {commit} is not on origin {redact(origin)}")
        return sorted(path for path in listed.stdout.split("\0") if path)

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
