"""Git workspaces: per-run working clones of an origin, with the artifact kept as commits.

Plain synchronous code (no Temporal imports) so activities can call it from a thread
and tests can drive it against real repositories on disk.
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path
from typing import ClassVar

from loopworks.schemas.git_names import is_url
from loopworks.schemas.steps import GitLocation
from loopworks.workspace import files, playbook_files
from loopworks.workspace.changes import FileChange, changes_between
from loopworks.workspace.commits import CommitPublisher, detached_head
from loopworks.workspace.default_origin import create_default_origin
from loopworks.workspace.objects import (
    clone_shared,
    commit_of,
    head_of,
    open_repository,
    ref_target,
    tree_size,
)
from loopworks.workspace.origin import Absent
from loopworks.workspace.refs import (
    FULL_SHA,
    checked_commit,
    checked_run_id,
    redact,
    safe_relpath,
    work_ref,
)
from loopworks.workspace.runner import (
    CloneTooLargeError,
    CommitNotFoundError,
    GitError,
    OriginLacksError,
    _rmtree,
)
from loopworks.workspace.stores import borrowed_stores, own_origin_store, reached_by_git
from loopworks.workspace.sweep import used

logger = logging.getLogger(__name__)

# Origin's branches, as a clone keeps them.
_BRANCHES = "+refs/heads/*:refs/remotes/origin/*"


class GitWorkspaces(CommitPublisher):
    """Working clones under `root`, one per run, plus read-only caches of remote origins."""

    # Whether checkout also brings the clone's refs/remotes/origin/* up to date when it
    # holds the commit already: a loop's step needs only its commit, but a merge queue
    # reads task branches there (IntegrationWorkspaces sets this).
    fetches_branches: ClassVar[bool] = False

    # -- origins -----------------------------------------------------------------------

    def ensure_default_origin(self, path: Path) -> str:
        """Create a bare origin at `path` with one commit on `main`, unless it exists."""
        return create_default_origin(self, path)

    def resolve_base(self, origin: str, base_branch: str | None) -> tuple[str, str]:
        """(branch, sha) of `base_branch` on origin, or of origin's default branch. The
        service's own origin is read in place, as its clones are made; any other is asked."""
        # An http(s) origin is never our own: it is checked when ls-remote reaches it.
        own = own_origin_store(self._local_origin(origin, reached_next=True))
        in_place = None if own is None else open_repository(own.parent)
        if base_branch is None:
            target, sha = head_of(in_place) if in_place is not None else self._remote_head(origin)
            if target is None:
                raise OriginLacksError(
                    f"origin {redact(origin)} has a detached HEAD: name a base branch explicitly"
                )
            branch = target.removeprefix("refs/heads/")
            if sha is None:
                raise OriginLacksError(
                    f"default branch {branch!r} of {redact(origin)} has no commits"
                )
            return branch, sha
        branch = base_branch.removeprefix("refs/heads/")
        ref = f"refs/heads/{branch}"
        self._check_ref(ref)
        if in_place is not None:
            found = ref_target(in_place, ref)
        else:
            rows = self._ls_remote(origin, ref)
            found = next((r[0] for r in rows if len(r) == 2 and r[1] == ref), None)
        if found is None:
            raise OriginLacksError(f"branch {branch!r} does not exist on origin {redact(origin)}")
        return branch, found

    def _remote_head(self, origin: str) -> tuple[str | None, str | None]:
        """`head_of` for an origin asked with `ls-remote`."""
        rows = self._ls_remote(origin, "HEAD", symref=True)
        # The pattern matches ref tails too (refs/remotes/origin/HEAD of a non-bare origin).
        head = [r[0] for r in rows if r[1:] == ["HEAD"]]
        if not head:
            raise OriginLacksError(f"origin {redact(origin)} is empty: it has no commits")
        symbolic = next((v for v in head if v.startswith("ref: ")), None)
        target = None if symbolic is None else symbolic.removeprefix("ref: ")
        return target, next((v for v in head if not v.startswith("ref: ")), None)

    # -- run workspaces ----------------------------------------------------------------

    def workdir(self, run_id: str, slot: str | None = None) -> Path:
        """Where the run's working clone lives (it may not exist yet).

        A `slot` gives one run several clones, for steps that read the tree in parallel.
        """
        name = checked_run_id(run_id)
        return self.root / (f"{name}.{checked_run_id(slot)}" if slot else name)

    def checkout(self, run_id: str, origin: str, commit: str, slot: str | None = None) -> Path:
        """The run's clone with its tree exactly at `commit`, whatever was there before.

        The worker's clones are its cache: a commit already in the clone (commits never
        change) is checked out without asking origin anything; a missing one is fetched,
        from the run's own clone on this worker when that has it, else from origin.
        """
        workdir = self.workdir(run_id, slot)
        checked_commit(commit)
        if not self._resume(workdir, origin, commit):
            try:
                self._sync(workdir, run_id, origin, commit, slot)
            except GitError as exc:
                if isinstance(exc, CommitNotFoundError | CloneTooLargeError):
                    raise
                # A crashed attempt can leave locks or a corrupt clone; start over once.
                logger.warning("re-cloning workspace %s after: %s", workdir, exc)
                self._forget(workdir)
                self._sync(workdir, run_id, origin, commit, slot)
        # Kept by retention (workspace/sweep.py) for as long again; a slot borrows the
        # run's clone's objects, so that one too.
        used(self.root, workdir)
        if slot is not None:
            used(self.root, self.workdir(run_id))
        playbook_files.forget(workdir)
        return workdir

    def checkout_at(self, run_id: str, location: GitLocation, slot: str | None = None) -> Path:
        """`checkout`, and the run's playbook files beside the tree (docs/playbook.md#files)."""
        workdir = self.checkout(run_id, location.origin, location.commit, slot)
        given = location.playbook_files
        if given is not None and given.files:
            found = playbook_files.read_blobs(str(workdir), given.files)
            if len(found) < len(given.files):
                commit = checked_commit(given.commit)
                with self._origin_git_dir(location.origin, commit=commit) as git_dir:
                    found = playbook_files.read_blobs(git_dir, given.files)
            playbook_files.write(workdir, found, given.files)
        return workdir

    def _resume(self, workdir: Path, origin: str, commit: str) -> bool:
        """Whether the clone is ready at the commit this instance made there last, nothing
        having been handed out since (the step after PRODUCE, REFINE, close): its tracked
        files are that commit; removing what is left beside them (ignored files, empty
        directories) is all a checkout would change. No question to git, no checkout.
        A merge queue's clone is moved by its merges between commits: never resumed."""
        committed = self._committed.pop(workdir, None)
        if self.fetches_branches or committed != commit or detached_head(workdir) != commit:
            return False
        try:
            self._ensure_origin(workdir, self._local_origin(origin))
            self._git(["clean", "-ffdxq"], cwd=workdir)
        except GitError:
            return False  # the clone went away meanwhile: checkout as ever
        return True

    def read_files(
        self, run_id: str, origin: str, commit: str, paths: list[str]
    ) -> dict[str, str | Absent]:
        """The text of each of `paths` at `commit`, without a checkout: from the run's
        clone on this worker when it holds the commit (no round trip), else from origin.

        For steps that only read the tree (EVALUATE's pattern and judge groups): a commit's
        tree is what a checkout of it holds, so they need no working clone of their own."""
        clone = self.workdir(run_id) / ".git"
        if FULL_SHA.match(commit) and clone.is_dir():
            read = self.read_tree_files(str(clone), commit, paths)
            if read is not None:
                used(self.root, clone.parent)
                return read
        with self._origin_git_dir(origin, commit=commit) as git_dir:
            read = self.read_tree_files(git_dir, commit, paths)
        if read is None:
            raise CommitNotFoundError(f"commit {commit} is not on origin {redact(origin)}")
        return read

    def run_changes(self, run_id: str, origin: str, old: str, new: str) -> list[FileChange]:
        """What differs from commit `old` to `new`, read as `read_files` reads: from the
        run's clone on this worker when it holds both, else from origin."""
        checked_commit(old)
        checked_commit(new)
        clone = self.workdir(run_id) / ".git"
        if clone.is_dir() and all(self._holds(clone.parent, c) for c in (old, new)):
            used(self.root, clone.parent)
            return changes_between(clone, old, new)
        with self._origin_git_dir(origin, commit=new) as git_dir:
            return changes_between(git_dir, old, new)

    def _is_clone(self, workdir: Path) -> bool:
        return self._probe(workdir, None)[0]

    def _probe(self, workdir: Path, commit: str | None) -> tuple[bool, bool]:
        """(is `workdir` a clone of its own, does it hold `commit`), asked in one opening.

        A clone of its own: its .git is a directory and git finds it there, not in some
        repository above a broken one. Only a full sha counts as held: a short one could
        name another commit once origin's are fetched too."""
        if not (workdir / ".git").is_dir():
            return False, False
        if not all(store.is_dir() for store in borrowed_stores(workdir / ".git")):
            return False, False  # a slot whose run's clone is gone: cloned again, whole
        wanted = commit is not None and FULL_SHA.match(commit) is not None
        try:
            repo = open_repository(workdir)
        except GitError:
            return False, False
        is_clone = Path(repo.path).resolve() == (workdir / ".git").resolve()
        held = is_clone and wanted and commit_of(repo, f"{commit}^{{commit}}") is not None
        return is_clone, held

    def _sync(self, workdir: Path, run_id: str, origin: str, commit: str, slot: str | None) -> None:
        url = self._local_origin(origin)
        is_clone, held = self._probe(workdir, commit)
        from_origin = False
        if not is_clone:
            self._forget(workdir)
            from_origin = self._clone(url, workdir, self._beside(run_id, slot))
            held = self._probe(workdir, commit)[1]
        if not held:
            from_origin = self._fetch(workdir, run_id, url, commit, slot) or from_origin
        elif self.fetches_branches:
            self._ensure_origin(workdir, url)
            self._fetched(workdir, url, [*self._fetch_from(url), "origin", _BRANCHES])
        elif slot is None:
            self._ensure_origin(workdir, url)  # what the run's commits are published to
        if from_origin:
            # The checkout below writes the tree of what origin sent: a small pack can
            # hold a large tree.
            self._check_tree_size(workdir, url, commit)
        # An evaluation slot publishes nothing: its remote is set when it must fetch.
        # Every step starts from exactly the commit it is handed, whatever an earlier
        # attempt left behind: tracked files forced back, everything else removed (a
        # clone made just now has nothing else to remove).
        self._git(["checkout", "--quiet", "--detach", "--force", commit], cwd=workdir)
        if is_clone:
            self._git(["clean", "-ffdxq"], cwd=workdir)

    def _fetch(self, workdir: Path, run_id: str, url: str, commit: str, slot: str | None) -> bool:
        """Bring `commit` into the clone, or raise CommitNotFoundError; whether it was
        fetched from origin (not from the run's own clone beside it)."""
        main = self._beside(run_id, slot)
        if main is not None and FULL_SHA.match(commit):
            # A step running beside the run's clone (an evaluation group) most often wants
            # the commit that clone just made: a local fetch, no round trip to origin.
            local = [*self._fetch_from(str(main)), str(main), commit]
            if self._git(local, cwd=workdir, check=False).returncode == 0 and self._holds(
                workdir, commit
            ):
                self._ensure_origin(workdir, url)
                return False
        self._ensure_origin(workdir, url)
        ref = work_ref(run_id)
        fetch = [*self._fetch_from(url), "origin", _BRANCHES]
        # A loop's commit is on a branch or is the run's published work: both in one round
        # trip. The work ref is absent until the run's first publish, and asking for a ref
        # origin lacks fails the whole fetch, so then the branches alone. A merge queue's
        # commits are on branches: it has no work ref to ask for.
        with_ref = [*fetch, f"+{ref}:{ref}"]
        if self.fetches_branches or not self._fetched(workdir, url, with_ref, check=False):
            self._fetched(workdir, url, fetch)
        if self._holds(workdir, commit):
            return True
        if FULL_SHA.match(commit):
            # A commit pushed by a step that was later superseded is no longer on the
            # work ref; most servers (protocol v2) still serve it when asked by sha.
            by_sha = [*self._fetch_from(url), "origin", commit]
            if self._fetched(workdir, url, by_sha, check=False) and self._holds(workdir, commit):
                return True
        raise CommitNotFoundError(f"commit {commit} is not on origin's branches or {ref}")

    def _fetch_from(self, url: str) -> list[str]:
        """`git fetch` from `url`, quietly, without tags."""
        return self._reaching(url, "fetch", "--quiet", "--no-tags")

    def _fetched(self, workdir: Path, url: str, args: list[str], check: bool = True) -> bool:
        """Whether the fetch `args` into the clone succeeded (`check`: raise when not). A
        clone the fetch took past the size cap is removed: it is of no use to any step."""
        try:
            self._git_capped(args, workdir / ".git", f"the clone of origin {redact(url)}", workdir)
        except CloneTooLargeError:
            self._forget(workdir)
            raise
        except GitError:
            if check:
                raise
            return False
        return True

    def _check_tree_size(self, workdir: Path, url: str, commit: str) -> None:
        """Refuse (and remove) a clone whose checkout of `commit` would write more than
        the cap: git's compression makes a small pack of a large tree."""
        cap = self.max_clone_bytes
        if cap is None:
            return
        size = tree_size(open_repository(workdir), f"{commit}^{{commit}}")
        if size is not None and size > cap:
            self._forget(workdir)
            raise CloneTooLargeError(f"the tree of {commit} on origin {redact(url)}", cap)

    def _beside(self, run_id: str, slot: str | None) -> Path | None:
        """The git dir of the run's own clone on this worker, for a slot beside it (an
        evaluation group's clone) to borrow objects from without asking origin; None for
        the run's clone itself, a merge queue's, or when there is none.

        A slot borrows the run's clone's object store (git alternates), which the sandbox
        binds read-only beside the slot (checks/bwrap.py). Should the run's clone vanish
        (a worker's data directory is a cache), checkout finds the slot's borrowed store
        gone and clones the slot again: from the run's clone if one is back, else from
        origin, whole."""
        if slot is None or self.fetches_branches:
            return None
        main = self.workdir(run_id) / ".git"
        return main if main.is_dir() else None

    def _holds(self, workdir: Path, commit: str) -> bool:
        return self._has_commit(commit, workdir)

    def _ensure_origin(self, workdir: Path, url: str) -> None:
        """The clone's `origin` (which fetches and publishing use) is `url`."""
        if self._origin_urls.get(workdir) != url:
            self._git(["remote", "set-url", "origin", url], cwd=workdir)
            self._origin_urls[workdir] = url

    def _forget(self, workdir: Path) -> None:
        self._origin_urls.pop(workdir, None)
        _rmtree(workdir)

    def _clone(self, url: str, workdir: Path, beside: Path | None = None) -> bool:
        """Clone origin at `url` into `workdir`; from the run's clone `beside` instead when
        there is one (a local clone, no round trip), its `origin` then set by checkout.
        Whether origin's objects were copied (not borrowed from a store on this machine)."""
        workdir.parent.mkdir(parents=True, exist_ok=True)
        # Clone aside and rename, so a directory at `workdir` is always a complete clone.
        staging = workdir.parent / f".{workdir.name}.clone-{uuid.uuid4().hex}"
        copied = False
        try:
            if beside is not None and _borrowed(beside, staging):
                # Borrowing the run's clone's objects (alternates): nothing copied, and every
                # commit the run makes there is in the slot at once, no fetch.
                source = str(beside)
            elif own_origin_store(url) is not None:
                # The service's own origin: borrow its store, and write commits into it
                # (workspace/commits.py), nothing copied either way.
                clone_shared(url, staging)
                source = url
            else:
                # No automatic gc or maintenance after each commit and fetch: a clone lives
                # as long as its run, and each would spawn one more process. No template
                # either: its sample hooks never run here, and copying them is a good part of a
                # clone's cost (docs/benchmarks.md#figures-behind-individual-choices).
                # A path that sends git elsewhere (alternates above all) is cloned as a URL
                # would be (`--no-local`): git's shortcut for a path, hard links, copies
                # its alternates, which could lend the clone, and the sandbox, any directory
                # on the machine; this way the clone holds every object itself. Any other
                # path keeps the shortcut: packing a repository costs a second a run where
                # linking it costs nothing.
                elsewhere = not is_url(url) and reached_by_git(os.path.realpath(url))
                local = ["--no-local"] if elsewhere else []
                clone = self._reaching(
                    url, "clone", "--quiet", "--no-checkout", "--template=", *local
                )
                args = [*clone, "-c", "maintenance.auto=false", url, str(staging)]
                self._git_capped(args, staging, f"origin {redact(url)}")
                source, copied = url, True
            os.rename(staging, workdir)
            self._origin_urls[workdir] = source
        finally:
            _rmtree(staging)
        return copied


def _borrowed(source: Path, staging: Path) -> bool:
    """Whether `staging` is now a clone borrowing the store of the repository at `source`;
    when it is not (that repository is broken), nothing is left at `staging`."""
    try:
        clone_shared(source, staging)
    except GitError:
        _rmtree(staging)
        return False
    return True


def file_sha256(workdir: Path, path: str) -> str | None:
    """Hex SHA-256 of a workspace file's bytes, or None when it is absent; a symlink out
    of the workspace is `files.Refused`."""
    return files.sha256(Path(workdir), safe_relpath(path))
