"""A playbook's versions on its origin: `PLAYBOOK_PATH` alone on the orphan branch
`PLAYBOOK_BRANCH`, one commit per version, its number and batch in the commit's trailers.

Git is the store, so every version is diffable and a rollback is just another version.
`PlaybookWorkflow` is the only writer; a write is a compare-and-swap of the branch to a
commit that a retry makes again to the same sha, so a retried activity changes nothing
twice. On an origin reached by URL or named by a user, the swap is a leased push from a
write clone; on the service's own origin (workspace/stores.py), as for a run's commits,
the objects go straight into its store and the swap is `update-ref` with the old value:
no clone, no fetch, no push.

Plain synchronous code (no Temporal imports), like workspace/integration.py, whose branch
heads, leased pushes and trailers it reuses. Reads go through OriginReader's access (the
origin in place, or a bare cache of a remote one): no working clone needed.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from pygit2 import Repository

from loopworks.schemas.playbook import (
    BATCH_TRAILER,
    PLAYBOOK_BRANCH,
    PLAYBOOK_PATH,
    REFERENCES_DIR,
    SKILLS_DIR,
    SOURCE_TRAILER,
    VERSION_TRAILER,
    Playbook,
    PlaybookVersion,
    VersionWrite,
)
from loopworks.workspace.integration import (
    BranchMovedError,
    IntegrationWorkspaces,
    message_trailers,
)
from loopworks.workspace.objects import (
    blobs_in,
    commit_message_of,
    commit_of,
    open_repository,
    read_path,
    ref_target,
    tree_of,
    update_refs,
    write_files_tree,
)
from loopworks.workspace.refs import checked_commit, redact
from loopworks.workspace.runner import CloneTooLargeError, GitError, _rmtree
from loopworks.workspace.stores import own_origin_store
from loopworks.workspace.sweep import used

# The one clone a playbook's writes use (under the data dir, beside the runs' clones).
WRITE_SLOT = "playbook"
_REF = f"refs/heads/{PLAYBOOK_BRANCH}"
_NOT_KEY = re.compile(r"[^A-Za-z0-9._-]+")
# Log records: \x1e starts a commit, \x1f separates its fields; numstat lines follow.
_LOG_FORMAT = "%x1e%H%x1f%cI%x1f%B%x1f"


class PlaybookVersionError(GitError):
    """The branch is not at the version a write follows: the writer's view of the playbook
    and origin's disagree. Not retryable: another attempt reads the same head."""


@dataclass(frozen=True)
class _Commit:
    sha: str
    committed_at: str
    trailers: dict[str, str]
    items: int

    @property
    def version(self) -> int | None:
        return _version_in(self.trailers)

    def entry(self) -> PlaybookVersion | None:
        if self.version is None:
            return None
        return PlaybookVersion(
            version=self.version,
            commit=self.sha,
            batch_id=self.trailers.get(BATCH_TRAILER),
            source=self.trailers.get(SOURCE_TRAILER),
            committed_at=self.committed_at,
            items=self.items,
        )


def write_key(origin: str, name: str) -> str:
    """The write clone's directory name: readable, and distinct per origin."""
    digest = hashlib.sha256(f"{origin}\n{name}".encode()).hexdigest()[:10]
    return f"playbook-{_NOT_KEY.sub('-', name).strip('-.')[:60]}-{digest}"


def commit_message(playbook: Playbook, batch_id: str, source: str) -> str:
    # A source is free text: one line, or it could forge a trailer of its own.
    one_line = " ".join(source.split())
    return (
        f"playbook {playbook.name} v{playbook.version}: {batch_id}\n\n"
        f"{VERSION_TRAILER}: {playbook.version}\n"
        f"{BATCH_TRAILER}: {batch_id}\n"
        f"{SOURCE_TRAILER}: {one_line}\n"
    )


class PlaybookStore(IntegrationWorkspaces):
    """Reads and writes playbook versions on origins, with `workspaces`' clones and identity."""

    # -- reading -----------------------------------------------------------------------

    def current(self, origin: str, name: str) -> Playbook | None:
        """The version at the branch's head; None when origin has no playbook branch.

        The head commit and its file, whatever the length of the history (every run's
        hydration and curation reads this)."""
        return self.located(origin, name, None)[0]

    def located(
        self, origin: str, name: str, version: int | None
    ) -> tuple[Playbook | None, str | None]:
        """`current` (version None) or `at_version`, and the commit it was read from: where
        a run given its items finds their files (docs/playbook.md#files)."""
        if version is not None:
            found = next((c for c in self._history(origin) if c.version == version), None)
            if found is None:
                return None, None
            return self._read(origin, name, found.sha, version), found.sha
        with self._origin_git_dir(origin, commit=None) as git_dir:
            repo = open_repository(git_dir)
            head = commit_of(repo, f"{_REF}^{{commit}}")
            if head is None:
                return None, None
            message = commit_message_of(repo, head)
            content, files = _contents(repo, head)
        version = _version_in(message_trailers(message))
        if version is None:
            raise GitError(
                f"{PLAYBOOK_BRANCH} on {redact(origin)} is at a commit that carries no "
                f"{VERSION_TRAILER} trailer: it was not written by the playbook's writer"
            )
        return Playbook.from_jsonl(name, version, content, files), head

    def at_version(self, origin: str, name: str, version: int) -> Playbook | None:
        """The version `version` as its commit holds it; None when no commit is that version."""
        return self.located(origin, name, version)[0]

    def versions(self, origin: str, name: str) -> list[PlaybookVersion]:
        """Every version on the branch, newest first (commits without a version skipped)."""
        entries = (c.entry() for c in self._history(origin))
        return [e for e in entries if e is not None]

    def _read(self, origin: str, name: str, commit: str, version: int) -> Playbook:
        with self._origin_git_dir(origin, commit=commit) as git_dir:
            content, files = _contents(open_repository(git_dir), commit)
        return Playbook.from_jsonl(name, version, content, files)

    def _history(self, origin: str) -> list[_Commit]:
        """The branch's first-parent line, newest first, each commit with the playbook's
        item count there (its lines, summed from the root's numstat: one git process)."""
        with self._origin_git_dir(origin, commit=None) as git_dir:
            prefix = [f"--git-dir={git_dir}"]
            head = commit_of(open_repository(git_dir), f"{_REF}^{{commit}}")
            if head is None:
                return []
            out = self._git(
                [
                    *prefix,
                    "log",
                    "--first-parent",
                    "--diff-merges=first-parent",
                    "--no-renames",
                    "--numstat",
                    # Counted by git itself, never by a program origin's attributes name.
                    "--no-ext-diff",
                    "--no-textconv",
                    f"--format={_LOG_FORMAT}",
                    head,
                    "--",
                ]
            ).stdout
        parsed: list[tuple[str, str, dict[str, str], int]] = []
        for record in out.split("\x1e")[1:]:
            sha, date, body, stats = [*record.split("\x1f", 3), "", "", ""][:4]
            trailers = message_trailers(body)
            parsed.append((sha.strip(), date.strip(), trailers, _line_delta(stats)))
        commits: list[_Commit] = []
        items = 0
        for sha, date, trailers, delta in reversed(parsed):
            items += delta
            commits.append(_Commit(sha=sha, committed_at=date, trailers=trailers, items=items))
        return commits[::-1]

    # -- writing -----------------------------------------------------------------------

    def write_version(
        self, origin: str, playbook: Playbook, batch_id: str, source: str, when: datetime
    ) -> str:
        """Commit `playbook` as version `playbook.version`: `write_versions` of one."""
        write = VersionWrite(playbook=playbook, batch_id=batch_id, source=source)
        return self.write_versions(origin, [write], when)[0]

    def write_versions(
        self, origin: str, versions: list[VersionWrite], when: datetime
    ) -> list[str]:
        """Commit consecutive versions, each on the one before, on top of the version before
        the first, and push them in one push only if the branch is still where it was
        read; each version's commit sha.

        The first version makes the branch, an orphan. A retry finds its own last version at
        the head and returns the chain it pushed; a head at any version but the one before
        the first raises PlaybookVersionError; a branch moved meanwhile by someone else,
        BranchMovedError.
        """
        if not versions:
            return []
        first, last = versions[0].playbook.version, versions[-1].playbook.version
        if first < 1:
            raise ValueError(f"playbook {versions[0].playbook.name} v{first}: versions start at 1")
        if [v.playbook.version for v in versions] != list(range(first, last + 1)):
            raise ValueError(f"playbook versions {first}..{last} are not consecutive")
        key = write_key(origin, versions[0].playbook.name)
        with self.locked(key, WRITE_SLOT):
            own = own_origin_store(origin)
            if own is not None:
                return self._write_in_place(origin, own.parent, versions, when)
            workdir = self._write_clone(key, origin)
            head = self._fetch_head(workdir, origin)
            trailers = self.trailers(workdir, head) if head is not None else {}
            if head is not None and _is_version(trailers, last, versions[-1].batch_id):
                return self._chain(workdir, head, len(versions))
            self._check_follows(origin, head, trailers, first)
            commits = self._commits(workdir, head, versions, when)
            try:
                self.push_leased(workdir, PLAYBOOK_BRANCH, commits[-1], expected=head)
            except BranchMovedError:
                moved = self._fetch_head(workdir, origin)
                if moved is not None and _is_version(
                    self.trailers(workdir, moved), last, versions[-1].batch_id
                ):
                    return self._chain(workdir, moved, len(versions))
                raise
            return commits

    def _write_in_place(
        self, origin: str, git_dir: Path, versions: list[VersionWrite], when: datetime
    ) -> list[str]:
        """`write_versions` on the service's own origin: the commits made in its store, the
        branch moved by `update-ref` only from the head that was read."""
        last = versions[-1]
        head, trailers = self._head_in(git_dir)
        if head is not None and _is_version(trailers, last.playbook.version, last.batch_id):
            return self._chain(git_dir, head, len(versions))
        self._check_follows(origin, head, trailers, versions[0].playbook.version)
        commits = self._commits(git_dir, head, versions, when)
        # The old value makes it a compare-and-swap (None: the branch must not exist yet).
        try:
            update_refs(open_repository(git_dir), {_REF: commits[-1]}, expected={_REF: head})
            return commits
        except GitError:
            pass  # moved meanwhile, or locked by a writer moving it
        moved, moved_trailers = self._head_in(git_dir)
        if moved is not None and _is_version(moved_trailers, last.playbook.version, last.batch_id):
            return self._chain(git_dir, moved, len(versions))
        raise BranchMovedError(
            f"{_REF} on {redact(origin)} is at {moved}, not {head}: another writer moved it"
        )

    def _head_in(self, git_dir: Path) -> tuple[str | None, dict[str, str]]:
        """The branch's head in a repository this process reads in place, and its trailers;
        (None, {}) when the branch does not exist."""
        repo = open_repository(git_dir)
        head = ref_target(repo, _REF)
        if head is None:
            return None, {}
        return head, message_trailers(commit_message_of(repo, head))

    def _commits(
        self, cwd: Path, head: str | None, versions: list[VersionWrite], when: datetime
    ) -> list[str]:
        """One commit per version, each on the one before, the first on `head`."""
        commits: list[str] = []
        parent = head
        for write in versions:
            tree = self._tree(cwd, write)
            message = commit_message(write.playbook, write.batch_id, write.source)
            parent = self.commit_merge(cwd, tree, [parent] if parent else [], message, when)
            commits.append(parent)
        return commits

    def _chain(self, workdir: Path, head: str, count: int) -> list[str]:
        """`head` and its first parents, `count` commits, oldest first."""
        # Named, never found from the cwd: `workdir` is a bare origin when written in place
        # (safe.bareRepository=explicit, workspace/runner.py).
        git_dir = open_repository(workdir).path
        args = ["rev-list", "--first-parent", f"--max-count={count}", checked_commit(head)]
        return self._git([f"--git-dir={git_dir}", *args]).stdout.split()[::-1]

    def _write_clone(self, key: str, origin: str) -> Path:
        """An empty repository whose `origin` is origin: only the playbook branch is ever
        fetched into it, never the code's history."""
        workdir = self.workdir(key, WRITE_SLOT)
        if not self._is_clone(workdir):
            _rmtree(workdir)
            workdir.parent.mkdir(parents=True, exist_ok=True)
            self._git(["init", "--quiet", str(workdir)])
        self._git(["config", "remote.origin.url", self._local_origin(origin)], cwd=workdir)
        used(self.root, workdir)
        return workdir

    def _fetch_head(self, workdir: Path, origin: str) -> str | None:
        """The branch's head on origin, its commit in the clone (fetched when missing; the
        clone's remote-tracking ref is not kept up to date); None when it does not exist."""
        head = self.branch_head(origin, PLAYBOOK_BRANCH)
        if head is None or self._has_commit(head, workdir):
            return head  # most often the version this writer made last: nothing to fetch
        tracking = f"refs/remotes/origin/{PLAYBOOK_BRANCH}"
        fetch = [*self._to_origin(workdir, "fetch", "--quiet", "--no-tags"), "origin"]
        fetch.append(f"+{_REF}:{tracking}")
        try:
            self._git_capped(fetch, workdir / ".git", f"the playbook of {redact(origin)}", workdir)
        except CloneTooLargeError:
            _rmtree(workdir)
            raise
        return self.fetched_branch(workdir, PLAYBOOK_BRANCH)

    def _check_follows(
        self, origin: str, head: str | None, trailers: dict[str, str], version: int
    ) -> None:
        if head is None:
            if version == 1:
                return
            raise PlaybookVersionError(
                f"{PLAYBOOK_BRANCH} does not exist on {redact(origin)}, so v{version} cannot "
                f"follow v{version - 1}: the playbook's writer and origin disagree"
            )
        found = trailers.get(VERSION_TRAILER, "")
        if found != str(version - 1):
            at = f"v{found}" if found else "a commit without a version"
            raise PlaybookVersionError(
                f"{PLAYBOOK_BRANCH} on {redact(origin)} is at {at} ({head}), so v{version} "
                f"cannot follow v{version - 1}: the playbook's writer and origin disagree"
            )

    def _tree(self, cwd: Path, write: VersionWrite) -> str:
        """A tree holding PLAYBOOK_PATH and the files its items name (the version's new
        ones written from `write.contents`, the others blobs of earlier versions), its
        objects written in the repository at `cwd` (a write clone, or a bare origin: no
        index or work tree needed)."""
        contents = {path: text.encode() for path, text in write.contents.items()}
        contents[PLAYBOOK_PATH] = write.playbook.to_jsonl().encode()
        return write_files_tree(open_repository(cwd), write.playbook.files, contents)


def _contents(repo: Repository, commit: str) -> tuple[str, dict[str, str]]:
    """The playbook's text at `commit` and the files beside it (path to blob id)."""
    tree = tree_of(repo, f"{commit}^{{commit}}")
    if tree is None:
        raise GitError(f"{repo.path} has no commit {commit}")
    text = read_path(repo, tree, PLAYBOOK_PATH)
    content = text[1].decode("utf-8") if text is not None and text[0] == "blob" else ""
    return content, blobs_in(repo, tree, (SKILLS_DIR, REFERENCES_DIR))


def _version_in(trailers: dict[str, str]) -> int | None:
    """The playbook version a commit's trailers name, None when they name none."""
    value = trailers.get(VERSION_TRAILER, "")
    return int(value) if value.isdigit() else None


def _is_version(trailers: dict[str, str], version: int, batch_id: str) -> bool:
    return trailers.get(VERSION_TRAILER) == str(version) and trailers.get(BATCH_TRAILER) == batch_id


def _line_delta(numstat: str) -> int:
    """Lines added minus deleted in the playbook file, from `git log --numstat` output."""
    delta = 0
    for line in numstat.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[2] == PLAYBOOK_PATH and parts[0].isdigit():
            delta += int(parts[0]) - int(parts[1])
    return delta
