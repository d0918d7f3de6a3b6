"""Step 9: the QA verifier, an independent agent that checks the finished work.

It checks the change itself, not the producer's account of it: it is sent the run's diff
against the commit the run started from, and works in a checkout of the run's commit of
its own (a slot beside the run's clone) with tools that read and a sandboxed command tool
to run the tests. Nothing it does there reaches the run: its one write is its trajectory,
committed on top of the commit it verified.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio import activity

from loopworks.activities.deps import StepDeps
from loopworks.activities.errors import refusing_unsafe_paths
from loopworks.activities.model_calls import run_answering_agent
from loopworks.agent.trajectory import TrajectoryRecord, to_jsonl
from loopworks.checks.redaction import redacted
from loopworks.schemas.actions import last_cited_runs
from loopworks.schemas.contexts import QAVerifierContext
from loopworks.schemas.roles import QAReport, Role
from loopworks.schemas.steps import QAInput, QAOutput, trajectory_path
from loopworks.workspace import files
from loopworks.workspace.changes import (
    FileChange,
    capped_patch,
    changes_between,
    code_paths,
    diff_stat,
    without_records,
)
from loopworks.workspace.objects import changed_paths
from loopworks.workspace.runner import GitError

# QA's own checkout: its commands may write (caches, build output), never into the run's.
QA_SLOT = "qa"
RUN_COMMAND = "run_command"
# The stat lists this many files; the rest are counted (the totals are of all).
STAT_MAX_FILES = 500
# QA's output keeps the checkout's changed files up to this many: enough to say why a
# verdict does not stand, bounded in the run's history.
MAX_CHANGED_KEPT = 100


class QAActivities:
    def __init__(self, deps: StepDeps) -> None:
        self.deps = deps

    @activity.defn(name="verify_result")
    async def verify_result(self, step: QAInput) -> QAOutput:
        workspaces, location = self.deps.workspaces, step.workspace
        artifact = await self.deps.read_artifact(location)
        with refusing_unsafe_paths():
            workdir = await asyncio.to_thread(
                workspaces.checkout_at, step.run_id, location, QA_SLOT
            )
        code_changed: list[str] | None
        try:
            diffs = await self._change(step, workdir)
            stat = diff_stat(diffs, STAT_MAX_FILES)
            code_changed = code_paths(diffs) if step.base_commit else None
        except GitError as exc:
            # The diff is an aid: QA can still read the tree and run `git diff` itself.
            activity.logger.warning("QA gets no diff: %s", exc)
            diffs, stat = [], f"(the diff could not be read: {exc}; run `git diff` yourself)"
            code_changed = None
        context = QAVerifierContext(
            task=step.task,
            intent=step.intent,
            acceptance_criteria=step.acceptance_criteria,
            artifact=artifact,
            evaluation=step.evaluation,
            diff_stat=stat,
            patch=capped_patch(diffs, self.deps.settings.qa_patch_cap_chars),
            changed_files=step.changed,
            producer_summary=step.producer_summary,
            proof=step.proof,
            rejected_verdict=step.rejected,
        )
        # What QA's commands leave in its checkout is never the run's (the checkout is
        # thrown away); a file they change or add means what they show is not the tree
        # the run pushes (docs/loop.md#qas-evidence). Measured against the checkout as QA
        # was given it (the playbook's files written beside the tree).
        given = set(await asyncio.to_thread(changed_paths, workdir))
        outcome = await run_answering_agent(
            self.deps, Role.QA_VERIFIER, step, context, workdir, "qa", QAReport
        )
        after = await asyncio.to_thread(changed_paths, workdir)
        checkout_changed = [path for path in after if path not in given]
        commit = await self._record(step, outcome.records)
        # The evidence is compared with the commands as the tool kept them, whole and
        # redacted (agent/loop.py): the report is redacted alike here, so a cited command
        # holding a secret still matches its run, whatever the result's own redaction.
        report = redacted(outcome.answer)
        return QAOutput(
            report=report,
            usage=outcome.usage,
            repairs=outcome.repairs,
            commit=commit,
            turns=outcome.turns,
            commands=commands_run(outcome.records),
            # Only what a verdict is checked against: the cited commands' last runs, as
            # many as the evidence may name, however many commands ran before them.
            ran=last_cited_runs(report.evidence, outcome.commands),
            code_changed=code_changed,
            checkout_changed=checkout_changed[:MAX_CHANGED_KEPT],
        )

    async def _change(self, step: QAInput, workdir: Path) -> list[FileChange]:
        """The run's work since its start; the run's own records (`.loops/`) are not work."""
        if not step.base_commit or step.base_commit == step.workspace.commit:
            return []
        changes = await asyncio.to_thread(
            changes_between, workdir, step.base_commit, step.workspace.commit
        )
        return without_records(changes)

    async def _record(self, step: QAInput, records: list[TrajectoryRecord]) -> str:
        """QA's trajectory, committed on top of the commit it verified, in the run's own
        clone (not QA's checkout, whose commands may have left anything)."""
        when = step.committed_at
        if when is None:
            return ""
        workspaces, location = self.deps.workspaces, step.workspace
        # Asked again after a verdict that was not accepted: its own file beside the first.
        name = "qa-2" if step.rejected else "qa"

        def commit() -> str:
            with refusing_unsafe_paths():
                workdir = workspaces.checkout(step.run_id, location.origin, location.commit)
                files.write_text(workdir, trajectory_path(step.iteration, name), to_jsonl(records))
            message = f"iteration {step.iteration} · qa: trajectory"
            sha = workspaces.commit(workdir, message, when)
            workspaces.publish(workdir, step.run_id, sha)
            return sha

        return await asyncio.to_thread(commit)


def commands_run(records: list[TrajectoryRecord]) -> int:
    """How many commands the agent ran: its cost in the benchmark beside its model calls."""
    return sum(r.kind == "tool_call" and r.tool == RUN_COMMAND for r in records)
