"""Git at the edges of a run: the workspace it starts from and the branch it pushes."""

from __future__ import annotations

import asyncio

from temporalio import activity

from loopworks.activities.deps import StepDeps
from loopworks.activities.errors import failing_at_once_when_origin_lacks, refusing_unsafe_paths
from loopworks.activities.heartbeat import heartbeating
from loopworks.activities.model_calls import CallRecord, put_on_refs_after_failure
from loopworks.checks import proof
from loopworks.checks.redaction import redacted
from loopworks.checks.runner import sandboxed
from loopworks.llm.provenance import model_source
from loopworks.schemas.playbook import playbook_name
from loopworks.schemas.prep import PREP_PACKAGE_PATH, PREP_TASKS_PATH
from loopworks.schemas.proof import PROOF_FILE, ProofFound
from loopworks.schemas.steps import (
    CloseOutput,
    RecordAndCloseInput,
    RunLog,
    SavedLog,
    WorkspaceInfo,
    WorkspaceRequest,
)
from loopworks.workspace.default_origin import ensure_default_origin
from loopworks.workspace.run_log import write_reflection, write_run_log


def redacted_log(log: RunLog) -> RunLog:
    """`log` for the run's branch: its state and events hold what clients wrote (a run's
    task), and a worker secret pasted there must not reach the branch
    (docs/workspace.md#redaction). Its call records were redacted as they were made
    (`agent.trajectory.to_jsonl`): not scanned again."""
    clean = redacted({"state": log.state, "events": log.events})
    return log.model_copy(update=clean)


def run_branch(run_id: str) -> str:
    return f"loops/{run_id}"


class RepositoryActivities:
    def __init__(self, deps: StepDeps) -> None:
        self.deps = deps

    @activity.defn(name="prepare_workspace")
    async def prepare_workspace(self, request: WorkspaceRequest) -> WorkspaceInfo:
        """Resolve the origin and the commit the run starts from."""
        async with heartbeating():
            with failing_at_once_when_origin_lacks():
                return await self._prepare(request)

    async def _prepare(self, request: WorkspaceRequest) -> WorkspaceInfo:
        workspaces = self.deps.workspaces
        if request.repo:
            origin = request.repo
        else:
            origin = await asyncio.to_thread(ensure_default_origin, self.deps.settings, workspaces)
        branch, commit = await asyncio.to_thread(
            workspaces.resolve_base, origin, request.base_branch
        )
        package = tasks = None
        if request.read_prep:
            # A prep package in the repository may give the run its plan
            # (docs/graphs.md#prep-packages).
            package = await asyncio.to_thread(
                workspaces.read_file, origin, commit, PREP_PACKAGE_PATH
            )
            if package is not None:
                tasks = await asyncio.to_thread(
                    workspaces.read_file, origin, commit, PREP_TASKS_PATH
                )
        found = await asyncio.to_thread(self._proof, origin, commit) if request.find_proof else None
        return WorkspaceInfo(
            origin=origin,
            base_branch=branch,
            base_commit=commit,
            branch=run_branch(request.run_id),
            sandboxed=sandboxed(),
            playbook=playbook_name(origin),
            model_source=model_source(self.deps.models, self.deps.settings.anthropic_base_url),
            prep_package=package,
            prep_tasks=tasks,
            proof=found,
        )

    def _proof(self, origin: str, commit: str) -> ProofFound:
        """What the base commit says of the run's proof (docs/loop.md#the-runs-proof): its
        declaration, and what its files plainly use."""
        workspaces = self.deps.workspaces
        paths = workspaces.list_files(origin, commit)
        listed = set(paths)
        texts: dict[str, str] = {}
        for name in proof.PROOF_FILES:
            if name in listed:
                text = workspaces.read_file(origin, commit, name)
                if text is not None:
                    texts[name] = text
        declared = texts.get(PROOF_FILE)
        detected = proof.detect(paths, texts)
        return ProofFound(
            declared=None if declared is None else proof.declared_commands(declared),
            detected=detected.commands,
            basis="; ".join(detected.basis),
        )

    @activity.defn(name="record_and_close_run")
    async def record_and_close_run(self, request: RecordAndCloseInput) -> CloseOutput:
        """The run's close (step 12, docs/loop.md#steps): commit the run's reflection,
        insights, last events and final state in one commit, push the run branch and verify
        the remote has it."""
        async with heartbeating():
            try:
                return await self._close(request)
            except BaseException:
                await self._calls_on_refs(request)
                raise

    async def _calls_on_refs(self, request: RecordAndCloseInput) -> None:
        """A close that failed: the call records the run held for it on their refs, as a
        failed step's are, so none goes with a run whose close never succeeds."""
        when = request.committed_at
        if request.log is None or when is None:
            return
        origin, run_id = request.origin, request.run_id
        held = (CallRecord(origin, run_id, n, text, when) for n, text in request.log.calls.items())
        await put_on_refs_after_failure(self.deps.workspaces, held, "close")

    async def _close(self, request: RecordAndCloseInput) -> CloseOutput:
        workspaces = self.deps.workspaces
        workdir = await asyncio.to_thread(
            workspaces.checkout, request.run_id, request.origin, request.commit
        )
        commit, saved = request.commit, SavedLog()
        if request.log is not None and request.committed_at is not None:
            with refusing_unsafe_paths():
                if request.reflection and request.insights:
                    write_reflection(workdir, request.reflection, request.insights)
                saved = write_run_log(workdir, redacted_log(request.log))
                # The single-shot calls' records join it; push_branch drops their refs.
                await asyncio.to_thread(
                    workspaces.link_calls, workdir, request.origin, request.run_id, request.calls
                )
            commit = await asyncio.to_thread(
                workspaces.commit, workdir, "close: the run's record", request.committed_at
            )
        # The work ref moves with the branch: a reader of either finds the run's record.
        remote = await asyncio.to_thread(
            workspaces.push_branch, workdir, request.branch, commit, request.run_id
        )
        return CloseOutput(
            branch=request.branch,
            commit=commit,
            remote_commit=remote,
            verified=remote == commit,
            saved_seq=saved.saved_seq,
            saved_calls=saved.saved_calls,
        )
