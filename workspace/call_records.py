"""The trajectories of single-shot model calls that no commit of the run's carries.

A structured call (the hydrator, the evaluator, the critics, ...) changes no file of the
run. Its step hands its record back to the workflow, which commits it with the run's next
commit (RunLog.calls, activities/model_calls.py). What cannot go that way comes here: a
record too large to carry in workflow history, one of a step that failed (its result
never reaches a commit), and a task graph's or a skill session's own. Each waits on a ref
of its own, `refs/loopworks/_trajectory/<run id>/_/<name>`, named by the call (iteration,
step, the role's call count), so a retried call moves its own ref and no two calls touch
the same one: concurrent calls need no lock. `_trajectory` and `_` cannot be run ids or
their segments (those start with a letter or digit), so these refs never collide with a
run's work ref.

On the origin this service created (the embedded default, workspace/stores.py) a record
is one blob written in place and its ref points at it: no tree, no commit, no push. The
ref keeps it reachable however long the run then waits (an approval, a pause, a block),
where an object no ref reaches is git's to prune two weeks on (`gc --auto`, which the
close runs there). The workflow names every call it makes (RunMemory.recorded_calls) and
hands the names to the run's close, which writes those still on refs into the commit it
closes with, beside the carried ones, and drops their refs in the same ref transaction
that moves the run's branch (workspace/commits.py): a finished run leaves no call ref
there, and nothing lists origin's refs, which grow with every run. A retried close finds
what the earlier attempt moved onto the work ref in that commit's tree. A call both on a
ref and committed (a failed attempt's, then its retry's) is the later of the two
(`finished_later`). A call the workflow did not name (a task graph's own, a run's made
before runs named them) stays on its ref, and is read from there.

Any other origin is pushed to: a record is a parentless commit holding the one file,
pushed to the call's ref from a scratch repository, and left there (a busy origin holds
thousands of them: the caches of a remote origin that steps and the API read from fetch
its branches and work refs without them, workspace/origin.py; reading a run's trajectory
fetches that run's call refs alone). Call refs are kept on origin as the run's work refs
are (docs/operations.md#retention). A push is several git processes, so the records a
worker has for one origin while a push to it runs go together in the next one
(workspace/group_commit.py).
"""

from __future__ import annotations

import functools
import json
import re
import tempfile
from collections.abc import Hashable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

import pygit2
from pygit2.enums import FileMode

from loopworks.schemas.steps import TRAJECTORY_DIR
from loopworks.workspace import files
from loopworks.workspace.group_commit import GroupCommit, GroupFailed
from loopworks.workspace.objects import (
    init_bare,
    open_repository,
    tree_of,
    update_refs,
    write_blob,
    write_commit,
    write_file_tree,
)
from loopworks.workspace.origin import OriginReader
from loopworks.workspace.refs import calls_prefix, work_ref
from loopworks.workspace.runner import GIT_IN_PROCESS, GitError
from loopworks.workspace.stores import own_origin_store

# Where a call's record is a file: in a call's own commit, and on the run's branch once
# its close has linked it, beside the agents' `<iteration>-<step>.jsonl`.
CALL_FILE_DIR = TRAJECTORY_DIR
# A call's name, `<iteration>-<step>-<call>` (activities/model_calls.py): what tells a
# call's file from an agent step's in that folder.
CALL_NAME = re.compile(r"^[0-9]+-[a-z_]+-[0-9]+$")
# A call's file is read back only to weigh it against another record of the call; a
# record on a ref has no bound but the origin's.
CALL_FILE_CAP = 64 << 20


class _Lone(NamedTuple):
    """A commit of its own for `ref`: no parent, one file."""

    ref: str
    path: str
    content: bytes
    message: str
    when: datetime


def call_path(name: str) -> str:
    """Where call `name`'s record is a file; a name no call has (a path, `..`) is refused."""
    if not CALL_NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not a call's name")
    return f"{CALL_FILE_DIR}/{name}.jsonl"


class CallRecords(OriginReader):
    def record_call(self, origin: str, run_id: str, name: str, text: str, when: datetime) -> str:
        """Put `text` on origin as the trajectory of call `name` of the run; the object
        the call's ref then holds (a blob on the service's own origin, else a commit)."""
        ref = f"{calls_prefix(run_id)}{name}"
        self._check_ref(ref)
        url = self._local_origin(origin)
        store = own_origin_store(url)
        if store is not None:
            # The service's own origin: the blob in place, on the call's ref until close.
            repo = open_repository(store.parent)
            blob = write_blob(repo, text.encode())
            update_refs(repo, {ref: blob})
            return blob
        lone = _Lone(ref, call_path(name), text.encode(), f"trajectory · {name}", when)
        return self._push_alone(url, lone)

    def _put_alone(
        self, origin: str, ref: str, path: str, content: bytes, message: str, when: datetime
    ) -> str:
        """Set `ref` on origin to a commit of its own, with no parent and one file (`path`
        holding `content`); the commit (a pin, workspace/pruning.py)."""
        self._check_ref(ref)
        url = self._local_origin(origin)
        author = (self.author_name, self.author_email)
        store = own_origin_store(url)
        if store is not None:
            # The service's own origin: written in place, as a run's commits are.
            repo = open_repository(store.parent)
            tree = write_file_tree(repo, path, content)
            commit = write_commit(repo, tree, [], message, author, when)
            update_refs(repo, {ref: commit})
            return commit
        return self._push_alone(url, _Lone(ref, path, content, message, when))

    def _push_alone(self, url: str, lone: _Lone) -> str:
        """`lone` made a commit on its ref on origin `url` (checked), and pushed there; the
        commit. A push is several git processes (about 20 ms of CPU) and a run makes one for
        each of its calls: those bound for one origin while a push to it runs go together
        in the next (workspace/group_commit.py)."""
        try:
            return self._lone_pushes.put(url, lone)
        except GroupFailed as failed:
            raise GitError(str(failed)) from None

    @functools.cached_property
    def _lone_pushes(self) -> GroupCommit[_Lone, str]:
        return GroupCommit(self._push_together)

    def _push_together(self, url: Hashable, lone: list[_Lone]) -> list[str]:
        """Each of `lone` made a commit on its ref, all pushed to origin `url` in one push
        from a repository holding nothing else; their commits, in order. A ref twice (a
        retried call whose first attempt still waited) is pushed with the later content."""
        author = (self.author_name, self.author_email)
        self.root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.root, prefix=".put-") as scratch:
            repo = init_bare(Path(scratch))
            commits = {
                one.ref: write_commit(
                    repo,
                    write_file_tree(repo, one.path, one.content),
                    [],
                    one.message,
                    author,
                    one.when,
                )
                for one in lone
            }
            push = self._reaching(str(url), "push", "--quiet", "--force", "--no-verify")
            refspecs = [f"{commit}:{ref}" for ref, commit in commits.items()]
            self._git([f"--git-dir={scratch}", *push, str(url), *refspecs])
        return [commits[one.ref] for one in lone]

    def call_records(self, origin: str, run_id: str) -> dict[str, str]:
        """Every call of the run (or task graph) still on its ref on origin: its name and
        its JSON lines. Those a close has linked are on the run's branch instead."""
        prefix = calls_prefix(run_id)
        # A cache fetches this run's call refs only (pruning those gone), no other's.
        only_these = (f"+{prefix}*:{prefix}*",)
        with self._origin_git_dir(origin, commit=None, refspecs=only_these) as git_dir:
            repo = open_repository(git_dir)
            blobs = _call_refs(repo, prefix)
            GIT_IN_PROCESS.add(["cat-file"])
            return {
                name: repo[blobs[name]].read_raw().decode("utf-8", errors="replace")
                for name in sorted(blobs)
            }

    def link_calls(
        self, workdir: Path, origin: str, run_id: str, names: Iterable[str]
    ) -> list[str]:
        """Write the run's call records still on their refs into its clone at `workdir`,
        for the commit that closes the run, as `.loops/trajectory/<name>.jsonl`: those of
        the calls `names` (the workflow names every call it made: no listing of origin's
        refs, which grow with every run), and those an earlier attempt of the close put on
        the work ref (it also dropped their refs). Where the clone already holds a call's
        record (a commit of the run's carried it), the later of the two is kept
        (`finished_later`). Only on the service's own origin: anywhere else a call's ref
        stays where it is and is read from there. The names whose record the clone then
        holds from here, sorted."""
        store = own_origin_store(self._local_origin(origin))
        if store is None:
            return []
        repo = open_repository(store.parent)
        linked = tree_of(repo, work_ref(run_id))
        clone = open_repository(workdir)
        in_clone = tree_of(clone, "HEAD")
        committed = {} if in_clone is None else _call_files(clone, in_clone)
        GIT_IN_PROCESS.add(["cat-file"])
        found = {
            name: repo[blob].read_raw()
            for name, blob in ({} if linked is None else _call_files(repo, linked)).items()
            if committed.get(name) != blob  # the clone's commit has it already
        }
        prefix = calls_prefix(run_id)
        GIT_IN_PROCESS.add(["for-each-ref"])
        for name in names:
            ref = repo.references.get(f"{prefix}{name}") if CALL_NAME.match(name) else None
            blob = None if ref is None else _record_blob(repo, ref, name)
            if blob is not None:
                text = repo[blob].read_raw()
                if name not in found or finished_later(text, found[name]):
                    found[name] = text
        held_here = []
        for name, text in sorted(found.items()):
            path = call_path(name)
            held = files.read_bytes(workdir, path, CALL_FILE_CAP, follow=False, missing=b"")
            if held != text and (not held or finished_later(text, held)):
                files.write_bytes(workdir, path, text)
                held = text
            if held == text:
                held_here.append(name)
        return held_here

    def linked_call_refs(self, repo: pygit2.Repository, run_id: str, commit: str) -> list[str]:
        """The run's call refs that `commit` makes redundant as the run's close links them:
        those whose record it holds, or a later one of (a failed attempt's record, left on
        its ref, and its retry's, committed). The refs its branch's move may drop."""
        tree = tree_of(repo, commit)
        if tree is None:
            return []
        prefix = calls_prefix(run_id)
        GIT_IN_PROCESS.add(["for-each-ref"])
        dropped = []
        for name, blob in _call_files(repo, tree).items():
            found = repo.references.get(f"{prefix}{name}")
            on_ref = None if found is None else _record_blob(repo, found, name)
            if found is None or on_ref is None:
                continue
            if on_ref != blob and finished_later(repo[on_ref].read_raw(), repo[blob].read_raw()):
                continue  # the ref's is the later record: it stays to be read
            dropped.append(found.name)
        return dropped


def finished_later(one: str | bytes, other: str | bytes) -> bool:
    """Whether record `one` of a call finished no earlier than `other` of the same call: a
    failed attempt's record is left on its ref and its retry's committed, so both may be
    found, and the later is the call's."""
    return record_finished(one) >= record_finished(other)


def record_finished(text: str | bytes) -> datetime:
    """When a call's record was written: its first line's time (every line of a call is
    written as it ends); the earliest time for a record that has none."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    first = text.split("\n", 1)[0]
    try:
        when = datetime.fromisoformat(json.loads(first)["ts"])
    except (ValueError, KeyError, TypeError):
        return datetime.min.replace(tzinfo=UTC)
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _call_refs(repo: pygit2.Repository, prefix: str) -> dict[str, pygit2.Oid]:
    """The records of the calls on refs under `prefix` (one run's): name to blob."""
    GIT_IN_PROCESS.add(["for-each-ref"])
    raw = prefix.encode()
    found = {}
    for listed in repo.raw_listall_references():
        if listed.startswith(raw):
            ref = repo.references.get(listed.decode())
            name = listed[len(raw) :].decode()
            blob = None if ref is None else _record_blob(repo, ref, name)
            if blob is not None:
                found[name] = blob
    return found


def _call_files(repo: pygit2.Repository, tree: pygit2.Tree) -> dict[str, pygit2.Oid]:
    """The calls' files in `tree`'s trajectory folder: name to blob."""
    GIT_IN_PROCESS.add(["ls-tree"])
    try:
        folder = repo[tree[CALL_FILE_DIR].id]
    except KeyError:
        return {}
    if not isinstance(folder, pygit2.Tree):
        return {}
    found = {}
    for entry in folder:
        name = (entry.name or "").removesuffix(".jsonl")
        if entry.filemode == FileMode.BLOB and entry.name != name and CALL_NAME.match(name):
            found[name] = entry.id
    return found


def _record_blob(repo: pygit2.Repository, ref: pygit2.Reference, name: str) -> pygit2.Oid | None:
    """The blob of call `name`'s record that `ref` holds: the blob it points at, or the
    file in the commit it points at (how every origin held calls until records on the
    service's own origin became blobs, and how any other origin still does)."""
    try:
        target = ref.peel()
    except pygit2.GitError as exc:
        raise GitError(f"reading {ref.name} failed: {exc}") from exc
    if isinstance(target, pygit2.Blob):
        return target.id
    if not isinstance(target, pygit2.Commit):
        return None
    try:
        entry = target.tree[call_path(name)]
    except KeyError:
        return None
    return entry.id if entry.type_str == "blob" else None
