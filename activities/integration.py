"""A task graph's integration branch (docs/graphs.md#the-merge-queue): prepared once, merged
into one task branch at a time by the merge queue, and carrying the status ledger.

A task is completed only when its verification command exits 0 on the merged tree, so a
merge is pushed only after that. Every push is a compare-and-swap on the branch head: a
concurrent writer makes the push fail (BranchMovedError, retried by Temporal from the new
head) instead of being overwritten. Each activity runs its git work in one thread, under
a lock on its clone, and heartbeats meanwhile.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from loopworks.activities.deps import StepDeps
from loopworks.activities.errors import failing_at_once_when_origin_lacks, refusing_unsafe_paths
from loopworks.activities.heartbeat import heartbeating
from loopworks.checks.runner import run_command_check
from loopworks.schemas.integration import (
    OUTPUT_TAIL_CHARS,
    IntegrationInfo,
    IntegrationRequest,
    LedgerOutput,
    LedgerRequest,
    MergeOutcome,
    MergeRequest,
)
from loopworks.schemas.prep import PREP_PACKAGE_PATH, PREP_TASKS_PATH
from loopworks.schemas.tasks import (
    LEDGER_PATH,
    orchestrator_owned,
    orchestrator_refusal,
    task_file,
    task_json,
    verification_check,
)
from loopworks.workspace import files as workspace_files
from loopworks.workspace.default_origin import ensure_default_origin
from loopworks.workspace.integration import (
    BranchMovedError,
    Changes,
    IntegrationWorkspaces,
    append_lines,
    archive_completed,
    archived,
    integration_branch,
    read_ledger,
    task_dir,
    write_task_file,
)

T = TypeVar("T")

# Output kept for the hash: the hash covers this much of the end of it.
VERIFY_OUTPUT_CAP = 1 << 20
# ApplicationError types the workflow can tell apart; neither is retried.
INTEGRATION_BRANCH_MISSING = "IntegrationBranchMissing"
TASK_BRANCH_MISSING = "TaskBranchMissing"
INVALID_REQUEST = "InvalidIntegrationRequest"
# One clone for prepare and merges (they never overlap), one for the ledger, which the
# workflow may record while a merge verifies.
MERGE_SLOT = "merge"
LEDGER_SLOT = "ledger"
_NOT_KEY = re.compile(r"[^A-Za-z0-9._-]+")


def clone_key(origin: str, branch: str) -> str:
    """The integration clones' directory name: readable, and distinct per origin."""
    digest = hashlib.sha256(f"{origin}\n{branch}".encode()).hexdigest()[:10]
    return f"{_NOT_KEY.sub('-', branch).strip('-.')[:60]}-{digest}"


class IntegrationActivities:
    def __init__(self, deps: StepDeps) -> None:
        self.deps = deps
        self.git = IntegrationWorkspaces.of(deps.workspaces)

    @activity.defn(name="prepare_integration")
    async def prepare_integration(self, request: IntegrationRequest) -> IntegrationInfo:
        """Create `graphs/<graph id>` at the base branch's head unless origin has it (a
        retried activity or a continued graph keeps it), and list its files."""
        origin = request.repo
        if not origin:
            origin = await asyncio.to_thread(
                ensure_default_origin, self.deps.settings, self.deps.workspaces
            )
        return await _in_thread(self._prepare, origin, request)

    @activity.defn(name="merge_task")
    async def merge_task(self, request: MergeRequest) -> MergeOutcome:
        """Merge a task branch into the integration branch's current head (`--no-ff`),
        verify the merged tree with the task's command, and push only when it exits 0. A
        branch that changed the graph's ledger or task files is refused unmerged."""
        return await _in_thread(self._merge, request)

    @activity.defn(name="record_ledger")
    async def record_ledger(self, request: LedgerRequest) -> LedgerOutput:
        """Append the ledger lines it lacks, write missing task files, archive completed
        tasks past the archiving threshold (ARCHIVE_AFTER), and push it all as one change."""
        return await _in_thread(self._record, request)

    # -- prepare -----------------------------------------------------------------------

    def _prepare(self, origin: str, request: IntegrationRequest) -> IntegrationInfo:
        git, branch = self.git, integration_branch(request.graph_id)
        with git.locked(clone_key(origin, branch), MERGE_SLOT):
            head = git.branch_head(origin, branch)
            if head is None:
                _, base = git.resolve_base(origin, request.base_branch)
                workdir = git.checkout(clone_key(origin, branch), origin, base, MERGE_SLOT)
                try:
                    git.push_leased(workdir, branch, base, expected=None)
                    head = base
                except BranchMovedError:
                    # Created meanwhile by a concurrent attempt: keep what it made.
                    head = git.branch_head(origin, branch)
            if head is None:
                raise ApplicationError(
                    f"could not create {branch}", type=INTEGRATION_BRANCH_MISSING
                )
            files = git.list_files(origin, head)
            # A prep package in the repository may stand in for planning
            # (docs/graphs.md#prep-packages).
            package = git.read_file(origin, head, PREP_PACKAGE_PATH)
            tasks = git.read_file(origin, head, PREP_TASKS_PATH) if package else None
        return IntegrationInfo(
            origin=origin,
            branch=branch,
            commit=head,
            files=files,
            prep_package=package,
            prep_tasks=tasks,
        )

    @contextmanager
    def _at_head(self, origin: str, branch: str, slot: str) -> Iterator[tuple[str, Path]]:
        """The integration branch's head and a clone at it, held under the clone's lock
        (a retry never collides with a timed-out attempt still running)."""
        key = clone_key(origin, branch)
        with self.git.locked(key, slot):
            head = self._head(origin, branch)
            yield head, self.git.checkout(key, origin, head, slot)

    # -- merge -------------------------------------------------------------------------

    def _merge(self, request: MergeRequest) -> MergeOutcome:
        git, task = self.git, request.task
        origin, branch = request.origin, request.integration_branch
        with self._at_head(origin, branch, MERGE_SLOT) as (head, workdir):
            task_commit = git.fetched_branch(workdir, request.task_branch)
            if task_commit is None:
                raise ApplicationError(
                    f"task branch {request.task_branch} is not on origin",
                    type=TASK_BRANCH_MISSING,
                    non_retryable=True,
                )
            if git.is_ancestor(workdir, task_commit, head):
                return self._already_in(workdir, request, head, task_commit)
            owned = [
                path
                for path in git.changed_since_fork(workdir, head, task_commit)
                if orchestrator_owned(path)
            ]
            if owned:
                return MergeOutcome(
                    merged=False,
                    reason="orchestrator_files",
                    commit=head,
                    output_tail=f"{request.task_branch} changes {orchestrator_refusal(owned)}",
                )
            theirs = git.relocate_records(workdir, task_commit, head, task.id, request.committed_at)
            attempt = git.merge(workdir, head, theirs)
            if attempt.conflicts:
                return MergeOutcome(
                    merged=False,
                    reason="conflict",
                    commit=head,
                    output_tail=attempt.output[-OUTPUT_TAIL_CHARS:],
                    conflicts=attempt.conflicts,
                )
            assert attempt.tree is not None
            verified = verify(task.verification_command, workdir, head)
            if not verified.merged:
                return verified
            message = merge_message(request, task_commit, verified)
            merge = git.commit_merge(
                workdir, attempt.tree, [head, theirs], message, request.committed_at
            )
            git.push_leased(workdir, branch, merge, expected=head)
            changes = git.changes(workdir, head, merge, task_dir(task.id))
        return _merged(verified, merge, changes)

    def _already_in(
        self, workdir: Path, request: MergeRequest, head: str, task_commit: str
    ) -> MergeOutcome:
        """The integration head already holds the task's commit. Merged by an earlier
        attempt whose answer was lost: the same answer again, from its merge commit's
        trailers, without a second merge. Otherwise the branch added nothing the head
        lacks: the head is verified as it is, and nothing is pushed."""
        git = self.git
        merge = git.merge_commit_of(workdir, head, task_commit)
        if merge is None:
            verified = verify(request.task.verification_command, workdir, head)
            if not verified.merged:
                return verified
            return _merged(verified, head, Changes())
        trailers = git.trailers(workdir, merge)
        code = trailers.get("Verification-Exit-Code", "0")
        changes = git.changes(
            workdir, git.first_parent(workdir, merge), merge, task_dir(request.task.id)
        )
        done = MergeOutcome(
            merged=True,
            reason="merged",
            commit=head,
            exit_code=int(code) if code.lstrip("-").isdigit() else 0,
            output_sha256=trailers.get("Verification-Output-SHA256"),
            output_tail=f"already merged by {merge}; its verification passed then",
        )
        return _merged(done, head, changes)

    def _head(self, origin: str, branch: str) -> str:
        head = self.git.branch_head(origin, branch)
        if head is None:
            raise ApplicationError(
                f"integration branch {branch} is not on origin: prepare_integration first",
                type=INTEGRATION_BRANCH_MISSING,
                non_retryable=True,
            )
        return head

    # -- ledger ------------------------------------------------------------------------

    def _record(self, request: LedgerRequest) -> LedgerOutput:
        git, when = self.git, request.committed_at
        origin, branch = request.origin, request.integration_branch
        with self._at_head(origin, branch, LEDGER_SLOT) as (head, workdir):
            commit = head
            if read_ledger(workdir) is None:
                # The ledger exists, empty, before its first line: a reader of the branch finds
                # the file from the start.
                workspace_files.write_text(workdir, LEDGER_PATH, "")
                commit = git.commit(workdir, "Task ledger: bootstrap, empty", when)
            appended = append_lines(workdir, request.lines, request.start, request.start_sha256)
            archived_ids = archived(workdir)
            written = [
                task.id
                for task in request.tasks
                if task.id not in archived_ids
                and write_task_file(workdir, task_file(task), task_json(task))
            ]
            moved = archive_completed(workdir, read_ledger(workdir) or "")
            if git.changed_paths(workdir):
                message = ledger_message(appended, written, moved)
                commit = git.commit(workdir, message, when)
            if commit != head:
                git.push_leased(workdir, branch, commit, expected=head)
        return LedgerOutput(commit=commit, appended=len(appended), archived=moved)


async def _in_thread(fn: Callable[..., T], *args: object) -> T:
    """Run blocking git work in a thread, heartbeating meanwhile; a malformed request
    (a ValueError: bad id, ref or command), an origin lacking the base branch or a clone
    with a path the worker refuses (a symlinked ledger) is not worth retrying."""
    try:
        async with heartbeating():
            with failing_at_once_when_origin_lacks(), refusing_unsafe_paths():
                return await asyncio.to_thread(fn, *args)
    except ValueError as exc:
        raise ApplicationError(str(exc), type=INVALID_REQUEST, non_retryable=True) from exc


# -- verification ----------------------------------------------------------------------


def verify(command: str, workdir: Path, head: str) -> MergeOutcome:
    """Run a task's verification command in the merged tree: `verification_failed` at the
    unchanged `head`, with the exit code (None: timed out), the output's hash and its tail;
    exit 0 is `merged`, the caller then sets the commit and the files."""
    check = verification_check(command)
    outcome = run_command_check(check, workdir, output_cap=VERIFY_OUTPUT_CAP)
    # The detail is a status line ("exit code 1", "timed out after ...") then the output.
    output = outcome.detail.partition("\n")[2]
    passed = outcome.exit_code == 0 and not outcome.timed_out
    return MergeOutcome(
        merged=passed,
        reason="merged" if passed else "verification_failed",
        commit=head,
        exit_code=outcome.exit_code,
        output_sha256=hashlib.sha256(output.encode("utf-8")).hexdigest(),
        output_tail=outcome.detail[-OUTPUT_TAIL_CHARS:],
    )


def _merged(verified: MergeOutcome, commit: str, changes: Changes) -> MergeOutcome:
    return verified.model_copy(
        update={
            "merged": True,
            "reason": "merged",
            "commit": commit,
            "files_added": changes.added,
            "files_modified": changes.modified,
            "files_deleted": changes.deleted,
        }
    )


def merge_message(request: MergeRequest, task_commit: str, verified: MergeOutcome) -> str:
    """The merge commit's message; its trailers let a retried merge answer as the first."""
    task = request.task
    title = task.title.splitlines()[0]
    return (
        f"Merge {task.id} (attempt {request.attempt}): {title}\n\n"
        f"{request.task_branch} into {request.integration_branch}; the task's verification "
        "command exited 0 on the merged tree.\n\n"
        f"Task: {task.id}\n"
        f"Task-Attempt: {request.attempt}\n"
        f"Task-Branch: {request.task_branch}\n"
        f"Task-Commit: {task_commit}\n"
        f"Verification-Exit-Code: {verified.exit_code}\n"
        f"Verification-Output-SHA256: {verified.output_sha256}\n"
    )


# -- ledger commits ------------------------------------------------------------------


def ledger_message(appended: list[str], written: list[str], moved: list[str]) -> str:
    subject = f"Task ledger: {len(appended)} line(s), {len(written)} task file(s)"
    if moved:
        subject += f", {len(moved)} archived"
    body = [f"{d.get('id')} {d.get('status')}" for d in map(json.loads, appended)]
    body += [f"task file {task_id}" for task_id in written]
    body += [f"archived {task_id}" for task_id in moved]
    return subject + ("\n\n" + "\n".join(body) if body else "")
