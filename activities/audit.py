"""Step 7: the custodiet's compliance audit, run by chance; BLOCK parks the run.

The custodiet is shown what the iteration did, read from git and the agents' trajectories
(the diff from the iteration's start, the commands and how they ended, the files written
and deleted, what lies outside the task's declared files), not what the agents say of it.
A BLOCK commits the state of the work, written up, as `.loops/blocked.md` on the run's work
ref, for the person who must clear it.

It audits after an iteration's evaluation (`audit_run`), and during PRODUCE and REFINE
(`WorkAuditor`, the agent's tool gate): before a tool call drawn by chance it is shown the
same, as far as the work has come, and the call about to run; a BLOCK refuses that call
and every later one, and the step commits the work so far with the write-up.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from temporalio import activity

from loopworks.activities.deps import StepDeps
from loopworks.activities.errors import refusing_unsafe_paths
from loopworks.activities.model_calls import consult
from loopworks.agent.actions import commands_run, files_written, outside_declared
from loopworks.agent.tools.guard import MAX_COMMAND_CHARS
from loopworks.agent.trajectory import AgentStep, TrajectoryRecord, capped, from_jsonl
from loopworks.llm.budget import Meter
from loopworks.schemas.actions import (
    BLOCKED_PATH,
    AuditEvidence,
    PendingCall,
    blocked_report,
)
from loopworks.schemas.contexts import CustodietContext
from loopworks.schemas.roles import Audit, AuditVerdict, Role
from loopworks.schemas.run import TokenUsage
from loopworks.schemas.steps import (
    PATHS_LISTED,
    TRAJECTORY_DIR,
    AuditInput,
    AuditOutput,
    ProduceInput,
    RefineInput,
    WorkAuditVerdict,
    WorkBlock,
    listed,
)
from loopworks.workspace import files
from loopworks.workspace.changes import (
    FileChange,
    changes_between,
    changes_to_worktree,
    diff_stat,
    without_records,
)
from loopworks.workspace.playbook_files import unchanged

# A trajectory past this is read no further: the records before the cut still count.
TRAJECTORY_READ_CAP = 16 << 20
SUBJECT_CHARS = 72


class AuditActivities:
    def __init__(self, deps: StepDeps) -> None:
        self.deps = deps

    @activity.defn(name="audit_run")
    async def audit_run(self, step: AuditInput) -> AuditOutput:
        workdir: Path | None = None
        evidence = AuditEvidence(declared_files=step.declared_files)
        location = step.workspace
        if location is not None and step.iteration_start:
            with refusing_unsafe_paths():
                workdir = await asyncio.to_thread(
                    self.deps.workspaces.checkout, step.run_id, location.origin, location.commit
                )
                evidence = await asyncio.to_thread(
                    iteration_evidence,
                    workdir,
                    step.iteration_start,
                    location.commit,
                    step.declared_files,
                )
        context = CustodietContext(
            task=step.task,
            intent=step.intent,
            plan_focus=step.plan_focus,
            evaluation=step.evaluation,
            **evidence.model_dump(),
        )
        answered = await consult(self.deps, Role.CUSTODIET, step, context, Audit)
        output = AuditOutput(audit=answered.answer, usage=answered.usage, repairs=answered.repairs)
        if output.audit.verdict != AuditVerdict.BLOCK:
            return output
        audit = output.audit
        output.report = blocked_report(step.iteration, audit.reason, audit.violations, evidence)
        if workdir is not None and step.committed_at is not None:
            output.commit = await self._commit_report(workdir, step, output.report, audit.reason)
        return output

    async def _commit_report(
        self, workdir: Path, step: AuditInput, report: str, reason: str
    ) -> str:
        workspaces = self.deps.workspaces
        with refusing_unsafe_paths():
            files.write_text(workdir, BLOCKED_PATH, report)
        reason = " ".join(reason.split()) or "blocked"
        if len(reason) > SUBJECT_CHARS:
            reason = reason[: SUBJECT_CHARS - 1] + "…"
        message = f"iteration {step.iteration} · custodiet BLOCK: {reason}"
        assert step.committed_at is not None
        commit = await asyncio.to_thread(workspaces.commit, workdir, message, step.committed_at)
        await asyncio.to_thread(workspaces.publish, workdir, step.run_id, commit)
        return commit


def iteration_evidence(workdir: Path, start: str, head: str, declared: list[str]) -> AuditEvidence:
    """What the work changed from `start` to `head` in the clone at `workdir`, and what the
    trajectories written in between record the agents doing."""
    changes = changes_between(workdir, start, head)
    return _evidence(_committed_records(workdir, changes), changes, declared)


def work_evidence(
    workdir: Path,
    start: str,
    head: str,
    declared: list[str],
    done: Sequence[TrajectoryRecord],
) -> AuditEvidence:
    """What the iteration has done so far while an agent is at work in the clone at
    `workdir` (checked out at `head`): the work tree's change from `start`, nothing of it
    committed yet, and the trajectories committed from `start` to `head` with `done`, what
    this step's tools have run."""
    records = _committed_records(workdir, changes_between(workdir, start, head)) + list(done)
    # The playbook's files the checkout wrote are not the work, unless the agent changed them.
    given = unchanged(workdir)
    work = [c for c in changes_to_worktree(workdir, start) if c.path not in given]
    return _evidence(records, work, declared)


def _committed_records(workdir: Path, changes: list[FileChange]) -> list[TrajectoryRecord]:
    records: list[TrajectoryRecord] = []
    for change in changes:
        if change.path.startswith(f"{TRAJECTORY_DIR}/") and change.status != "D":
            records += _trajectory(workdir, change.path)
    return records


def _evidence(
    records: list[TrajectoryRecord], changes: list[FileChange], declared: list[str]
) -> AuditEvidence:
    work = without_records(changes)
    written = files_written(records)
    deleted = [c.path for c in work if c.status == "D"]
    touched = [c.path for c in work] + written
    return AuditEvidence(
        diff_stat=diff_stat(work, PATHS_LISTED),
        commands_run=commands_run(records),
        files_written=listed(written),
        files_deleted=listed(deleted),
        declared_files=declared,
        outside_declared_files=listed(outside_declared(touched, declared)),
    )


def _trajectory(workdir: Path, path: str) -> list[TrajectoryRecord]:
    text = files.read_text(
        workdir, path, TRAJECTORY_READ_CAP, follow=False, truncate=True, missing=""
    )
    try:
        return from_jsonl(text)
    except ValidationError:
        # A line cut by the cap, or a file not the worker's: the lines that parse count.
        kept = []
        for line in text.splitlines():
            try:
                kept.append(TrajectoryRecord.model_validate_json(line))
            except ValidationError:
                continue
        return kept


def audit_drawn(key: str, call: int, probability: float) -> bool:
    """Whether the custodiet audits before the `call`th tool call (from 1) of the step
    `key` names: a uniform draw in [0, 1) made from the two, below `probability`. The same
    step and call draw the same, on any worker and in a retry: a retried step audits where
    its first attempt did, with the same call numbers."""
    digest = hashlib.sha256(f"{key}:{call}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < probability


def refusal(reason: str) -> str:
    """What the agent reads for each call a block refuses."""
    return (
        "refused: the custodiet, the run's auditor, blocked the work: "
        f"{reason or 'no reason given'}. This call and every later one are refused until a "
        "person clears the block."
    )


class WorkAuditor:
    """The custodiet's audit during PRODUCE or REFINE (docs/loop.md#steps), the agent's
    tool gate (`agent.loop.ToolGate`).

    Before each tool call drawn by chance (`audit_drawn`, the step's chance a call), the
    custodiet is shown what the iteration has done so far, as the audit after an
    evaluation is, and the call about to run. A BLOCK refuses that call and every later
    one; the agent then stops and the step commits the work so far with the write-up.
    """

    def __init__(
        self,
        deps: StepDeps,
        step: ProduceInput | RefineInput,
        verb: AgentStep,
        workdir: Path,
        meter: Meter | None = None,
    ) -> None:
        assert step.work_audit is not None
        self.deps, self.step, self.verb, self.workdir = deps, step, verb, workdir
        # The step's: the audits spend from what the agent may (docs/loop.md#budgets).
        self.meter = meter
        self.plan = step.work_audit
        chance = self.plan.probability
        self.probability = deps.settings.tool_audit_probability if chance is None else chance
        # The step's call (the producer's or refiner's call number) seeds its draws.
        self.key = f"{step.run_id}:{step.iteration}:{verb}:{step.call_index}"
        self.calls = 0
        self.verdicts: list[WorkAuditVerdict] = []
        self.usage = TokenUsage()
        self.repairs: list[str] = []
        self.block: WorkBlock | None = None

    @property
    def closed(self) -> bool:
        return self.block is not None

    async def before(
        self, tool: str, arguments: dict[str, Any], done: Sequence[TrajectoryRecord]
    ) -> str | None:
        if self.block is not None:
            return refusal(self.block.audit.reason)
        self.calls += 1
        if not audit_drawn(self.key, self.calls, self.probability):
            return None
        pending = PendingCall(step=self.verb, tool=tool, input=shown_to_audit(arguments))
        audit, evidence = await self._audit(pending, done)
        self.verdicts.append(WorkAuditVerdict(before_call=pending.brief(), audit=audit))
        if audit.verdict != AuditVerdict.BLOCK:
            return None
        report = blocked_report(
            self.step.iteration, audit.reason, audit.violations, evidence, refused=pending
        )
        self.block = WorkBlock(audit=audit, refused=pending.brief(), report=report)
        activity.logger.info("custodiet BLOCK before %s: %s", pending.brief(), audit.reason)
        return refusal(audit.reason)

    async def _audit(
        self, pending: PendingCall, done: Sequence[TrajectoryRecord]
    ) -> tuple[Audit, AuditEvidence]:
        plan, step = self.plan, self.step
        evidence = AuditEvidence(declared_files=plan.declared_files)
        if plan.iteration_start:
            with refusing_unsafe_paths():
                evidence = await asyncio.to_thread(
                    work_evidence,
                    self.workdir,
                    plan.iteration_start,
                    step.workspace.commit,
                    plan.declared_files,
                    done,
                )
        context = CustodietContext(
            task=step.task,
            intent=plan.intent,
            plan_focus=plan.plan_focus,
            evaluation=plan.evaluation,
            pending_call=pending,
            **evidence.model_dump(),
        )
        call = AuditInput(
            run_id=step.run_id,
            iteration=step.iteration,
            phase=step.phase,
            call_index=plan.first_call_index + len(self.verdicts),
            operator_note=self._note(),
            origin=step.origin,
            carry_calls=step.carry_calls,
            task=step.task,
            intent=plan.intent,
            plan_focus=plan.plan_focus,
        )
        answered = await consult(self.deps, Role.CUSTODIET, call, context, Audit, meter=self.meter)
        self.usage = self.usage + answered.usage
        self.repairs += answered.repairs
        return answered.answer, evidence

    def _note(self) -> str | None:
        """What the audits are told a person said: the notes that cleared this iteration's
        blocks (the step a block released was given its note too), each once."""
        notes = [*self.plan.cleared_notes, self.step.operator_note or ""]
        return "\n\n".join(dict.fromkeys(n for n in notes if n)) or None


def shown_to_audit(arguments: dict[str, Any]) -> dict[str, Any]:
    """A pending call's arguments as the custodiet is shown them: a command whole, since
    what a cut hides is its tail, where harm can wait behind thousands of harmless
    characters (the guard refuses one past MAX_COMMAND_CHARS, so this bounds it); any
    other long text cut, as the trajectory cuts it (a file's content can be megabytes)."""
    shown = capped(arguments)
    command = arguments.get("command")
    if isinstance(command, str):
        shown["command"] = command[:MAX_COMMAND_CHARS]
    return shown
