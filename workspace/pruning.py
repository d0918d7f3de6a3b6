"""A run's records on its origin and its clones on this worker's disk, as the gc sees them:
what an origin holds for each run, pins, and removing what workspace/expiry.py decides
(docs/operations.md#retention).

Every git command here goes through the runner's hardening (workspace/runner.py): an
origin this service did not create runs none of its programs, whether it is listed,
fetched into a cache or pushed ref deletions. Clones are found and removed through
workspace/files.py, which follows no link out of the workspaces directory.

Plain synchronous code (no Temporal imports): activities call it from a thread.
"""

from __future__ import annotations

import json
import logging
import stat
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import Self

import pygit2

from loopworks.schemas.git_names import is_url
from loopworks.schemas.playbook import PLAYBOOK_BRANCH
from loopworks.schemas.steps import HISTORY_PATH
from loopworks.workspace import files
from loopworks.workspace.call_records import CallRecords
from loopworks.workspace.expiry import GRAPH_BRANCH_PREFIX, RUN_BRANCH_PREFIX, Records, Removal
from loopworks.workspace.objects import delete_refs, open_repository
from loopworks.workspace.refs import (
    CALLS_REF_PREFIX,
    PINS_REF_PREFIX,
    WORK_REF_PREFIX,
    checked_run_id,
    pin_ref,
    redact,
)
from loopworks.workspace.runner import GitError, GitRunner
from loopworks.workspace.stores import own_origin_store

logger = logging.getLogger(__name__)

# Refs deleted per transaction on our own origin (each holds a lock file while it runs) and
# per push elsewhere (each is a word on git's command line).
DELETE_BATCH = 200
PUSH_BATCH = 500
# What a pin's commit holds: who pinned the run, and when.
PIN_FILE = ".loops/pin.json"
_SURVEYED = (WORK_REF_PREFIX, RUN_BRANCH_PREFIX, GRAPH_BRANCH_PREFIX)
_PLAYBOOK_REF = f"refs/heads/{PLAYBOOK_BRANCH}"


@dataclass(frozen=True)
class Clone:
    name: str  # relative to the workspaces root
    bytes: int


@dataclass
class Survey:
    """What one origin holds for runs, by run id (and this worker's clones of them)."""

    work_refs: dict[str, str] = field(default_factory=dict)
    call_refs: dict[str, list[str]] = field(default_factory=dict)
    # A run's `loops/<run>` or a graph's `graphs/<graph>`.
    branches: dict[str, str] = field(default_factory=dict)
    pins: set[str] = field(default_factory=set)
    clones: dict[str, list[Clone]] = field(default_factory=dict)

    @property
    def run_ids(self) -> set[str]:
        """Every run (or graph) id holding a ref; a pin alone holds nothing."""
        return {*self.work_refs, *self.call_refs, *self.branches}

    def records(self, branch_times: Mapping[str, datetime]) -> dict[str, Records]:
        """Each run id's records, its branch's tip time where `branch_times` has it."""
        found: dict[str, Records] = {}
        for run_id in sorted(self.run_ids | set(self.clones)):
            branch = self.branches.get(run_id)
            clones = self.clones.get(run_id, [])
            found[run_id] = Records(
                work_ref=run_id in self.work_refs,
                call_refs=len(self.call_refs.get(run_id, [])),
                branch=branch,
                branch_time=None if branch is None else branch_times.get(branch),
                clones=tuple(clone.name for clone in clones),
                clone_bytes=sum(clone.bytes for clone in clones),
            )
        return found

    def refs_of(self, removal: Removal) -> list[str]:
        """The refs a removal deletes."""
        refs = list(self.call_refs.get(removal.run_id, [])) if removal.call_refs else []
        if removal.work_ref:
            refs.append(self.work_refs[removal.run_id])
        if removal.branch:
            refs.append(self.branches[removal.run_id])
        return refs


class RunRecords(CallRecords):
    """The gc's and the pins' git: on origins, through the same hardened runner, and in
    the workspaces directory (`root`)."""

    @classmethod
    def of(cls, runner: GitRunner) -> Self:
        """The same root, identity and git access as `runner` (the worker's workspaces)."""
        return cls(
            runner.root,
            runner.author_name,
            runner.author_email,
            runner.max_clone_bytes,
            credentials=runner.credentials,
            origin_check=runner.origin_check,
            user_helpers=runner.user_helpers,
        )

    # -- what an origin holds --------------------------------------------------------

    def survey(self, origin: str) -> Survey:
        """The runs' refs on `origin`, and this worker's clones of those runs."""
        survey = Survey()
        for ref in self._refs(origin, _SURVEYED):
            _sort_ref(survey, ref)
        for run_id in sorted(survey.run_ids):
            if clones := self.clones_of(run_id):
                survey.clones[run_id] = clones
        return survey

    def branch_times(self, origin: str, refs: Sequence[str]) -> dict[str, datetime]:
        """When the tip of each of `refs` (branches) was committed; a remote origin's read
        from its cache (workspace/origin.py), brought up to date first. A `loops/` branch
        whose tip holds no run's history has none: the repository's own, no run's result."""
        if not refs:
            return {}
        with self._origin_git_dir(origin, commit=None) as git_dir:
            repo = open_repository(git_dir)
            found: dict[str, datetime] = {}
            for ref in refs:
                reference = repo.references.get(ref)
                if reference is None:
                    continue
                try:
                    commit = reference.peel(pygit2.Commit)
                except (pygit2.GitError, ValueError, KeyError):
                    continue
                if ref.startswith(RUN_BRANCH_PREFIX) and HISTORY_PATH not in commit.tree:
                    continue
                found[ref] = datetime.fromtimestamp(commit.commit_time, UTC)
        return found

    def _refs(self, origin: str, prefixes: Iterable[str]) -> list[str]:
        """The names of origin's refs under `prefixes`: a repository on this machine read
        in place, any other listed with ls-remote."""
        prefixes = tuple(prefixes)
        if is_url(origin):
            rows = self._ls_remote(origin, *(f"{prefix}*" for prefix in prefixes))
            # ls-remote matches a pattern against any tail of a ref's name: keep the heads.
            names = [row[1] for row in rows if len(row) == 2]
        else:
            with self._origin_git_dir(origin, commit=None) as git_dir:
                names = list(open_repository(git_dir).references)
        return sorted(name for name in set(names) if name.startswith(prefixes))

    # -- removing --------------------------------------------------------------------

    def delete_refs(self, origin: str, refs: Sequence[str]) -> None:
        """Delete `refs` on origin; a ref already gone is fine (another gc got there)."""
        for ref in refs:
            self._check_ref(ref)
        if not refs:
            return
        url = self._local_origin(origin, reached_next=True)
        store = None if is_url(url) else own_origin_store(url)
        if store is not None:
            # The service's own origin: its refs moved in place, as a run's are.
            repo = open_repository(store.parent)
            for batch in _batches(refs, DELETE_BATCH):
                delete_refs(repo, batch)
            return
        self.root.mkdir(parents=True, exist_ok=True)
        # Any other origin is pushed deletions, from a repository holding nothing.
        with tempfile.TemporaryDirectory(dir=self.root, prefix=".prune-") as scratch:
            self._git(["init", "--quiet", "--bare", scratch])
            for batch in _batches(refs, PUSH_BATCH):
                push = self._reaching(url, "push", "--quiet", "--no-verify")
                args = [f"--git-dir={scratch}", *push, url, *(f":{ref}" for ref in batch)]
                pushed = self._git(args, check=False)
                if pushed.returncode == 0:
                    continue
                # A ref deleted meanwhile fails its deletion: only what is left counts.
                left = set(self._refs(origin, batch)) & set(batch)
                if left:
                    raise GitError(
                        f"origin {redact(origin)} kept {len(left)} of the refs deleted: "
                        f"{redact(pushed.stderr.strip())}"
                    )

    def clones_of(self, run_id: str) -> list[Clone]:
        """This worker's clones of `run_id`: its clone and its slots' (`<run>.<slot>`), each
        a directory holding `.git`; a graph's directory of its tasks' clones is none."""
        path = PurePosixPath(checked_run_id(run_id))
        parent = "" if path.parent == PurePosixPath(".") else path.parent.as_posix()
        try:
            names = files.listdir(self.root, parent)
        except (FileNotFoundError, files.UnsafePath):
            return []
        found: list[Clone] = []
        for name in names:
            if name != path.name and not name.startswith(f"{path.name}."):
                continue
            relpath = (PurePosixPath(parent) / name).as_posix() if parent else name
            if self._clone_at(relpath):
                found.append(Clone(relpath, files.tree_bytes(self.root, relpath)))
        return found

    def _clone_at(self, relpath: str) -> bool:
        """Whether a clone is at `relpath`: a directory (not a link) with a `.git` one."""
        try:
            here, git = files.lstat(self.root, relpath), files.lstat(self.root, f"{relpath}/.git")
        except files.UnsafePath:
            return False
        return all(st is not None and stat.S_ISDIR(st.st_mode) for st in (here, git))

    def remove_clones(self, names: Sequence[str]) -> None:
        """Remove clones `clones_of` named, then their graph's and task's directories
        once empty; nothing followed out of the workspaces directory."""
        parents: set[str] = set()
        for name in names:
            files.remove(self.root, name)
            logger.info("removed %s: its run's records expired", name)
            parents.update(p.as_posix() for p in PurePosixPath(name).parents if p.name)
        for parent in sorted(parents, key=len, reverse=True):
            try:
                if not files.listdir(self.root, parent):
                    files.remove(self.root, parent)
            except (FileNotFoundError, files.UnsafePath):
                continue

    # -- pins ------------------------------------------------------------------------

    def pin(self, origin: str, run_id: str, by: str, when: datetime) -> str:
        """Pin `run_id` on origin (idempotent: a pinned run is pinned again by `by`); the
        pin's ref."""
        ref = pin_ref(run_id)
        record = {"run_id": run_id, "pinned_by": by, "pinned_at": when.isoformat()}
        text = json.dumps(record, indent=1) + "\n"
        self._put_alone(origin, ref, PIN_FILE, text.encode(), f"pin · {run_id}", when)
        return ref

    def unpin(self, origin: str, run_id: str) -> bool:
        """Remove `run_id`'s pin on origin; whether there was one."""
        ref = pin_ref(run_id)
        if not self.is_pinned(origin, run_id):
            return False
        self.delete_refs(origin, [ref])
        return True

    def is_pinned(self, origin: str, run_id: str) -> bool:
        ref = pin_ref(run_id)
        return ref in self._refs(origin, [ref])

    def holds_run(self, origin: str, run_id: str) -> bool:
        """Whether origin holds anything of `run_id` (or, for a graph, of its task loops):
        a work ref, a call's ref, a result branch or a pin."""
        checked_run_id(run_id)
        heads = (WORK_REF_PREFIX, CALLS_REF_PREFIX, RUN_BRANCH_PREFIX, GRAPH_BRANCH_PREFIX)
        survey = Survey()
        for ref in self._refs(origin, [*(f"{head}{run_id}" for head in heads), pin_ref(run_id)]):
            _sort_ref(survey, ref)
        held = survey.run_ids | survey.pins
        return any(found == run_id or found.startswith(f"{run_id}/") for found in held)


def _sort_ref(survey: Survey, ref: str) -> None:
    """File `ref` under its run in `survey`; a ref that names no run is left out."""
    if ref.startswith(CALLS_REF_PREFIX):
        run_id, sep, _ = ref.removeprefix(CALLS_REF_PREFIX).partition("/_/")
        if sep and _run_id(run_id):
            survey.call_refs.setdefault(run_id, []).append(ref)
    elif ref.startswith(PINS_REF_PREFIX):
        run_id = ref.removeprefix(PINS_REF_PREFIX).removesuffix("/_")
        if ref.endswith("/_") and _run_id(run_id):
            survey.pins.add(run_id)
    elif ref.startswith(WORK_REF_PREFIX):
        run_id = ref.removeprefix(WORK_REF_PREFIX)
        if _run_id(run_id):
            survey.work_refs[run_id] = ref
    elif ref.startswith(RUN_BRANCH_PREFIX) and ref != _PLAYBOOK_REF:
        run_id = ref.removeprefix(RUN_BRANCH_PREFIX)
        if _run_id(run_id):
            survey.branches[run_id] = ref
    elif ref.startswith(GRAPH_BRANCH_PREFIX):
        graph_id = ref.removeprefix(GRAPH_BRANCH_PREFIX)
        if _run_id(graph_id) and "/" not in graph_id:
            survey.branches[graph_id] = ref


def _run_id(text: str) -> bool:
    try:
        checked_run_id(text)
    except ValueError:
        return False
    return True


def _batches(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
