"""A step's work recorded: the commit in the run's clone, and the commit onto origin.

Onto origin by `git push`, except for the origin this service created on disk (the embedded
default, workspace/stores.py): a run's clone borrows that origin's object store, writes its
commits' objects straight into it, and moves origin's refs in one ref transaction
(workspace/objects.py). Origin ends with the same objects and refs a push leaves, without
the eight processes a local push starts (a shell, receive-pack, pack-objects,
unpack-objects, the connectivity walk, for-each-ref, gc --auto:
docs/benchmarks.md#figures-behind-individual-choices). An origin named by a user, even a
path, is always pushed to: its receive settings belong to its owner (its hooks never run:
workspace/lockdown.py, HARDENING).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from pathlib import Path
from typing import ClassVar

from loopworks.workspace import files, playbook_files
from loopworks.workspace.call_records import CallRecords
from loopworks.workspace.objects import (
    changed_paths,
    commit_index,
    commit_of,
    open_repository,
    ref_target,
    staged_only,
    update_refs,
)
from loopworks.workspace.refs import FULL_SHA, checked_commit, work_ref
from loopworks.workspace.runner import GitError
from loopworks.workspace.stores import writes_into

# A HEAD file holds a sha or a ref name: anything longer is not one.
_HEAD_CAP_BYTES = 4096


class CommitPublisher(CallRecords):
    """Commits in a run's clone and gets them onto its origin."""

    # Whether a clone of the service's own origin writes its commits into origin's store.
    # Only where `commit` is the one thing that writes objects (a run's clone): a merge
    # queue's merges write them too, so it pushes, which carries whatever is needed.
    writes_through: ClassVar[bool] = True

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
        super().__init__(
            root,
            author_name,
            author_email,
            max_clone_bytes,
            credentials,
            origin_check,
            user_helpers,
        )
        # The origin URL this instance last gave each clone (by clone or set-url), so a
        # step on a clone it already set up spawns no `remote set-url`. Only ever a cache:
        # a clone it does not know, or knows by another URL, is set again.
        self._origin_urls: dict[Path, str] = {}
        # The commit each clone's tree was last committed as, until a checkout hands the
        # clone to a step again: its tracked files are that commit, nothing has been
        # asked to change them since (GitWorkspaces.checkout). In memory: a new process
        # trusts no clone it finds.
        self._committed: dict[Path, str] = {}

    def commit(
        self, workdir: Path, message: str, when: datetime, only: Collection[str] | None = None
    ) -> str:
        """Commit the whole tree; same parent, content, message and `when` give the same sha.

        `git add -A` stages it: git's rules decide what a tree holds (ignores, nested
        repositories, attributes). The tree and the commit are then written in-process
        (workspace/objects.py), the same objects `git commit` writes.

        `only`: the paths the commit may change; every other path stays as HEAD has it,
        whatever the tree holds there (`staged_only`). The tree then differs from the
        commit, so no later checkout takes the clone as that commit without resetting it."""
        store = self._writes_into(workdir)
        env = None
        if store is not None:
            # New objects go to origin's store; the clone's own stays readable beside it.
            env = {
                "GIT_OBJECT_DIRECTORY": str(store),
                "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(workdir / ".git" / "objects"),
            }
        self._git(["add", "-A"], cwd=workdir, env=env)
        # A playbook's files the checkout wrote are not the run's work, unless it changed them.
        playbook_files.unstage_unchanged(workdir)
        if only is not None:
            staged_only(workdir, only)
        author = (self.author_name, self.author_email)
        sha = commit_index(workdir, store, message, author, when)
        if only is None:
            self._committed[workdir] = sha
        else:
            self._committed.pop(workdir, None)
        return sha

    def changed_paths(self, workdir: Path) -> list[str]:
        """Paths (relative, sorted) whose content differs from HEAD: what `commit` would record."""
        given = playbook_files.unchanged(workdir)
        return [path for path in changed_paths(workdir) if path not in given]

    def publish(self, workdir: Path, run_id: str, commit: str) -> None:
        """Force `commit` onto the run's work ref on origin so any worker can fetch it."""
        ref = work_ref(run_id)
        checked_commit(commit)
        origin = self._written_origin(workdir)
        if origin is not None:
            update_refs(open_repository(origin), {ref: commit})
            return
        push = self._to_origin(workdir, "push", "--quiet", "--force", "--no-verify")
        self._git([*push, "origin", f"{commit}:{ref}"], cwd=workdir)

    def push_branch(
        self, workdir: Path, branch: str, commit: str, run_id: str | None = None
    ) -> str:
        """Force `commit` onto `branch` on origin (and, given `run_id`, onto the run's work
        ref at once) and return the sha origin then reports for the branch."""
        ref = f"refs/heads/{branch}"
        self._check_ref(ref)
        checked_commit(commit)
        full = commit
        if not FULL_SHA.match(commit):
            found = commit_of(open_repository(workdir), f"{commit}^{{commit}}")
            if found is None:
                raise GitError(f"{workdir} has no commit {commit}")
            full = found
        refs = [ref, *([work_ref(run_id)] if run_id else [])]
        origin = self._written_origin(workdir)
        if origin is not None:
            remote = self._move_refs(origin, refs, full, run_id)
        else:
            # Not --atomic (some servers lack it): should one ref fail, the push fails
            # and close is retried, which pushes both again.
            refspecs = [f"{full}:{name}" for name in refs]
            url = self.origin_url(workdir)
            push = self._reaching(url, "push", "--quiet", "--force", "--no-verify")
            self._git([*push, "origin", *refspecs], cwd=workdir)
            # The close's check: the remote is asked what it has, not trusted from the push.
            remote = next(
                (r[0] for r in self._ls_remote(url, ref) if len(r) == 2 and r[1] == ref), None
            )
        if remote != full:
            raise GitError(f"origin has {ref} at {remote}, expected {full} after push")
        return remote

    def _move_refs(
        self, origin: Path, refs: list[str], commit: str, run_id: str | None
    ) -> str | None:
        """Set `refs` on the origin this service owns to `commit` in one transaction, and
        return what origin then has for the first of them. The call refs of run `run_id`
        whose records `commit` holds go in the same transaction: the branch carries them
        from then on (workspace/call_records.py)."""
        repo = open_repository(origin)
        linked = [] if run_id is None else self.linked_call_refs(repo, run_id, commit)
        update_refs(repo, dict.fromkeys(refs, commit), removed=linked)
        # What receive-pack would do after a push: pack loose objects and refs once
        # there are many (detached, and a no-op most times).
        self._git([f"--git-dir={origin}", "gc", "--auto", "--quiet"], check=False)
        # The close's check: origin is asked what it has, not trusted from the update.
        return ref_target(repo, refs[0])

    def origin_url(self, workdir: Path) -> str:
        """The URL the clone's `origin` names: as this instance set it, else as the clone's
        config says (read in-process)."""
        url = self._origin_urls.get(workdir)
        if url is not None:
            return url
        try:
            return str(open_repository(workdir).config["remote.origin.url"])
        except KeyError as exc:
            raise GitError(f"{workdir} has no origin to push to or fetch from") from exc

    def _to_origin(self, workdir: Path, subcommand: str, *options: str) -> list[str]:
        """`_reaching` for a push to or fetch from the clone's `origin`."""
        return self._reaching(self.origin_url(workdir), subcommand, *options)

    def _written_origin(self, workdir: Path) -> Path | None:
        """The origin (its git dir) a clone's commits were written into, when they were."""
        store = self._writes_into(workdir)
        return None if store is None else store.parent

    def _writes_into(self, workdir: Path) -> Path | None:
        """The object store of the clone's origin when the clone writes into it directly:
        its origin is the one this service created, and the clone borrows its store."""
        url = self._origin_urls.get(workdir)
        if url is None or not self.writes_through:
            return None
        return writes_into(workdir / ".git", url)


def detached_head(workdir: Path) -> str | None:
    """The sha a clone's detached HEAD holds (the file git wrote), or None."""
    try:
        text = files.read_text(workdir, ".git/HEAD", _HEAD_CAP_BYTES, follow=False).strip()
    except (OSError, files.UnsafePath):
        return None
    return text if FULL_SHA.match(text) else None
