"""Steps 4, 5 and 8: plan the iteration, produce the artifact, refine it from a critique.

Producing and refining are an agent working in the run's workspace with tools
(`loopworks.agent.loop`). Each starts from the commit the workflow hands it and ends with
exactly one commit holding the agent's changes and its trajectory: a retry on any worker
starts again from the same tree and rewrites the same trajectory file, and the workflow
keeps the commit of the attempt that completed.

The custodiet may audit before the agent's tool calls (`activities.audit.WorkAuditor`).
A BLOCK stops the agent: the step then commits the work so far, its trajectory under the
attempt's own name and the write-up as `.loops/blocked.md`, and answers with the block;
the workflow holds the run and, once the block is cleared, runs the step again from there.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio import activity
from temporalio.exceptions import ApplicationError

from loopworks.activities.audit import WorkAuditor
from loopworks.activities.deps import StepDeps, now
from loopworks.activities.errors import refusing_unsafe_paths
from loopworks.activities.model_calls import consult, run_agent, step_meter
from loopworks.activities.repository import redacted_log
from loopworks.agent.trajectory import AgentStep, to_jsonl
from loopworks.llm.budget import Meter
from loopworks.schemas.actions import BLOCKED_PATH
from loopworks.schemas.contexts import PlannerContext, ProducerContext, RefinerContext
from loopworks.schemas.roles import IterationPlan, Role
from loopworks.schemas.run import TokenUsage
from loopworks.schemas.steps import (
    ARTIFACT_PATH,
    INVALID_OUTPUT,
    TRAJECTORY_DIR,
    ArtifactOutput,
    PlanInput,
    PlanOutput,
    ProduceInput,
    RefineInput,
    SavedLog,
    Timing,
    listed,
    trajectory_path,
)
from loopworks.workspace import files
from loopworks.workspace.graph_records import keep_run_records, record_changes, restore_record
from loopworks.workspace.origin import Absent
from loopworks.workspace.run_log import write_run_log
from loopworks.workspace.runner import GitError

# The commit subject quotes the agent's last words up to here; the output keeps more.
SUBJECT_CHARS = 72
SUMMARY_CHARS = 2000
# The artifact a step starts from goes into its model's prompt whole: past this, the step
# fails saying so rather than send a cut artifact to be rewritten.
ARTIFACT_CAP_CHARS = 4 << 20


class ProductionActivities:
    def __init__(self, deps: StepDeps) -> None:
        self.deps = deps

    @activity.defn(name="plan_iteration")
    async def plan_iteration(self, step: PlanInput) -> PlanOutput:
        context = PlannerContext(
            task=step.task,
            intent=step.intent,
            acceptance_criteria=step.acceptance_criteria,
            iteration=step.iteration,
            last_evaluation=step.last_evaluation,
        )
        answered = await consult(self.deps, Role.PLANNER, step, context, IterationPlan)
        return PlanOutput(plan=answered.answer, usage=answered.usage, repairs=answered.repairs)

    @activity.defn(name="produce_artifact")
    async def produce_artifact(self, step: ProduceInput) -> ArtifactOutput:
        context = ProducerContext(
            task=step.task,
            intent=step.intent,
            acceptance_criteria=step.acceptance_criteria,
            rules=step.rules,
            plan=step.plan,
            blocked_attempt=step.blocked_attempt or None,
        )
        return await self._write(Role.PRODUCER, step, context, "produce")

    @activity.defn(name="refine_artifact")
    async def refine_artifact(self, step: RefineInput) -> ArtifactOutput:
        context = RefinerContext(
            task=step.task, critique=step.critique, blocked_attempt=step.blocked_attempt or None
        )
        return await self._write(Role.REFINER, step, context, "refine")

    async def _write(
        self,
        role: Role,
        step: ProduceInput | RefineInput,
        context: ProducerContext | RefinerContext,
        verb: AgentStep,
    ) -> ArtifactOutput:
        started, workspace = now(), step.workspace
        workspaces = self.deps.workspaces
        with refusing_unsafe_paths():
            workdir = await asyncio.to_thread(workspaces.checkout_at, step.run_id, workspace)
            current = await self._committed_artifact(step)
            previous_hash = files.sha256(workdir, ARTIFACT_PATH)
            context = context.model_copy(update={"current_artifact": current})
            # A task graph's record is kept as the task's base has it (a step scheduled
            # before steps carried the base: as its own commit has it).
            base = (step.base_commit or workspace.commit) if step.graph_task else None
            # The agent's turns and the custodiet's audits between them spend from one meter.
            meter = step_meter(self.deps, step)
            auditor = (
                WorkAuditor(self.deps, step, verb, workdir, meter) if step.work_audit else None
            )
            outcome = await run_agent(
                self.deps,
                role,
                step,
                context,
                workdir,
                verb,
                graph_task=step.graph_task,
                graph_base=base,
                gate=auditor,
                meter=meter,
            )
            block = auditor.block if auditor else None
            # What the agent left, as the worker will read it: a link out of the workspace
            # (`ln -sf /proc/self/environ artifact.md`) is refused here, not committed. A
            # blocked agent was stopped, as was one out of budget: what it had done so far
            # is committed as it is.
            stopped = block is not None or outcome.budget_exhausted is not None
            if not stopped and not files.is_file(workdir, ARTIFACT_PATH):
                raise ApplicationError(
                    f"{role.value} answered with invalid output: it ended without writing "
                    f"{ARTIFACT_PATH} ({outcome.turns} turns"
                    + (", turn limit reached)" if outcome.limit_reached else ")"),
                    type=INVALID_OUTPUT,
                    non_retryable=True,
                )
            # The run's records are the worker's: what a command did to them is undone
            # before the worker writes its own, so none of it is committed, nor read back
            # as the run's (a forged event, a changed proof declaration).
            undone = await asyncio.to_thread(keep_run_records, workdir, workspace.commit)
            if undone:
                activity.logger.warning("put back the run's records a command changed: %s", undone)
            if base is not None:
                await asyncio.to_thread(_keep_graph_record, workdir, base)
            # What the agent changed, before the trajectory joins the tree: the record of
            # the work is not part of the work.
            changed = listed(
                [
                    path
                    for path in await asyncio.to_thread(workspaces.changed_paths, workdir)
                    if not path.startswith(f"{TRAJECTORY_DIR}/")
                ]
            )
            trajectory = trajectory_path(
                step.iteration, verb, step.attempt if block is not None else None
            )
            files.write_text(workdir, trajectory, to_jsonl(outcome.records))
            if block is not None:
                files.write_text(workdir, BLOCKED_PATH, block.report)
            saved = write_run_log(workdir, redacted_log(step.log)) if step.log else SavedLog()
            artifact_hash = files.sha256(workdir, ARTIFACT_PATH) or ""
        summary = _first_line(outcome.final_text)
        if block is not None:
            summary = _first_line(f"custodiet BLOCK: {block.audit.reason or 'blocked'}")
        elif outcome.budget_exhausted is not None:
            summary = "stopped: the run's budget is spent"
        message = f"iteration {step.iteration} · {verb}: {summary or 'artifact'}"
        commit = await asyncio.to_thread(workspaces.commit, workdir, message, step.committed_at)
        await asyncio.to_thread(workspaces.publish, workdir, step.run_id, commit)
        return ArtifactOutput(
            commit=commit,
            saved_seq=saved.saved_seq,
            saved_calls=saved.saved_calls,
            artifact_hash=artifact_hash,
            previous_artifact_hash=previous_hash,
            changed=changed,
            summary=outcome.final_text[:SUMMARY_CHARS],
            usage=_usage(outcome.usage, auditor, meter),
            timing=Timing(started_at=started, finished_at=now()),
            turns=outcome.turns,
            turn_limit_reached=outcome.limit_reached,
            trajectory_path=trajectory,
            repairs=outcome.repairs + (auditor.repairs if auditor else []),
            work_audits=auditor.verdicts if auditor else [],
            block=block,
            budget_exhausted=outcome.budget_exhausted,
        )

    async def _committed_artifact(self, step: ProduceInput | RefineInput) -> str | None:
        """The artifact the step starts from, read from its commit's objects (not the
        checkout): None when the commit has none; a symlink out of the tree, or one past
        the cap, fails the step saying so."""
        location = step.workspace
        read = await asyncio.to_thread(
            self.deps.workspaces.read_files,
            step.run_id,
            location.origin,
            location.commit,
            [ARTIFACT_PATH],
        )
        text = read[ARTIFACT_PATH]
        if text is Absent.MISSING:
            return None
        if text is Absent.OUTSIDE:
            raise files.Refused(ARTIFACT_PATH, "at the commit it is a link out of the workspace")
        if len(text) > ARTIFACT_CAP_CHARS:
            why = f"it is {len(text)} characters; at most {ARTIFACT_CAP_CHARS} are read"
            raise files.TooLarge(ARTIFACT_PATH, why)
        return text


def _usage(agent: TokenUsage, auditor: WorkAuditor | None, meter: Meter | None) -> TokenUsage:
    """What the step spent: every request its meter charged (an audit the budget cut short
    included), else the agent's and the audits' together."""
    if meter is not None:
        return meter.used
    return agent + auditor.usage if auditor else agent


def _keep_graph_record(workdir: Path, base: str) -> None:
    """A task graph's ledger and task files as the task's base has them, before the work
    is committed: the tools already put back what a command changed of them, so this
    holds only for what they did not see (docs/graphs.md#the-ledger-is-the-orchestrators-alone).
    Should it fail, the merge queue still refuses the branch."""
    try:
        undone = restore_record(workdir, base, record_changes(workdir, base))
    except (GitError, files.UnsafePath, OSError) as exc:
        activity.logger.warning("could not put back the graph's record: %s", exc)
        return
    if undone:
        activity.logger.warning("put back the graph's record as %s has it: %s", base, undone)


def _first_line(text: str) -> str:
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line if len(line) <= SUBJECT_CHARS else line[: SUBJECT_CHARS - 1] + "…"
