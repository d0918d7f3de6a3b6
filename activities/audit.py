"""Step 7: the custodiet's compliance audit, run by chance; BLOCK parks the run.

The custodiet is shown what the iteration did, read from git and the agents' trajectories
(the diff from the iteration's start, the commands and their exit codes, the files written
and deleted, what lies outside the task's declared files), not what the agents say of it.
A BLOCK commits the state of the work, written up, as `.loops/blocked.md` on the run's work
ref, for the person who must clear it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from pydantic import ValidationError
from temporalio import activity

from loopworks.activities.deps import StepDeps
from loopworks.activities.errors import refusing_unsafe_paths
from loopworks.activities.model_calls import consult
from loopworks.agent.actions import commands_run, files_written, outside_declared
from loopworks.agent.trajectory import TrajectoryRecord, from_jsonl
from loopworks.schemas.actions import BLOCKED_PATH, AuditEvidence, blocked_report
from loopworks.schemas.contexts import CustodietContext
from loopworks.schemas.roles import Audit, AuditVerdict, Role
from loopworks.schemas.steps import TRAJECTORY_DIR, AuditInput, AuditOutput
from loopworks.workspace import files
from loopworks.workspace.changes import changes_between, diff_stat, without_records

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
    records: list[TrajectoryRecord] = []
    for change in changes:
        if change.path.startswith(f"{TRAJECTORY_DIR}/") and change.status != "D":
            records += _trajectory(workdir, change.path)
    work = without_records(changes)
    written = files_written(records)
    deleted = [c.path for c in work if c.status == "D"]
    touched = [c.path for c in work] + written
    return AuditEvidence(
        diff_stat=diff_stat(work),
        commands_run=commands_run(records),
        files_written=written,
        files_deleted=deleted,
        declared_files=declared,
        outside_declared_files=outside_declared(touched, declared),
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
