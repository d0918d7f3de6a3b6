"""Steps 4, 5 and 8: plan the iteration, produce the artifact, refine it from a critique.

Producing and refining change the workspace, so each starts from the commit the workflow
hands it and ends with exactly one commit: a retry on any worker starts from the same
tree, and the same answer at the same time gives the same commit.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.deps import INVALID_OUTPUT, StepDeps, now
from schemas.roles import Draft, IterationPlan, Role
from schemas.steps import (
    ARTIFACT_PATH,
    ArtifactOutput,
    GitLocation,
    ModelStep,
    PlanInput,
    PlanOutput,
    ProduceInput,
    RefineInput,
    Timing,
)


class ProductionActivities:
    def __init__(self, deps: StepDeps) -> None:
        self.deps = deps

    @activity.defn(name="plan_iteration")
    async def plan_iteration(self, step: PlanInput) -> PlanOutput:
        context = {
            "task": step.task,
            "intent": step.intent,
            "acceptance_criteria": step.acceptance_criteria,
            "iteration": step.iteration,
            "last_evaluation": (
                step.last_evaluation.model_dump(mode="json") if step.last_evaluation else None
            ),
        }
        plan, usage = await self.deps.consult(Role.PLANNER, step, context, IterationPlan)
        return PlanOutput(plan=plan, usage=usage)

    @activity.defn(name="produce_artifact")
    async def produce_artifact(self, step: ProduceInput) -> ArtifactOutput:
        context = {
            "task": step.task,
            "intent": step.intent,
            "acceptance_criteria": step.acceptance_criteria,
            "rules": [r.model_dump(mode="json") for r in step.rules],
            "plan": step.plan.model_dump(mode="json"),
        }
        return await self._write(
            Role.PRODUCER, step, step.workspace, context, "produce", step.committed_at
        )

    @activity.defn(name="refine_artifact")
    async def refine_artifact(self, step: RefineInput) -> ArtifactOutput:
        context = {"task": step.task, "critique": step.critique.model_dump(mode="json")}
        return await self._write(
            Role.REFINER, step, step.workspace, context, "refine", step.committed_at
        )

    async def _write(
        self,
        role: Role,
        step: ModelStep,
        workspace: GitLocation,
        context: dict[str, Any],
        verb: str,
        committed_at: datetime,
    ) -> ArtifactOutput:
        started = now()
        workspaces = self.deps.workspaces
        workdir = await asyncio.to_thread(
            workspaces.checkout, step.run_id, workspace.origin, workspace.commit
        )
        previous_hash = workspaces.file_sha256(workdir, ARTIFACT_PATH)
        current = workdir / ARTIFACT_PATH
        context = {**context, "current_artifact": current.read_text() if current.exists() else None}
        draft, usage = await self.deps.consult(role, step, context, Draft)
        for file in draft.files:
            target = _inside(workdir, file.path)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(file.content)
        message = f"iteration {step.iteration} · {verb}: {draft.summary or 'artifact'}"
        commit = await asyncio.to_thread(workspaces.commit, workdir, message, committed_at)
        await asyncio.to_thread(workspaces.publish, workdir, step.run_id, commit)
        return ArtifactOutput(
            commit=commit,
            artifact_hash=workspaces.file_sha256(workdir, ARTIFACT_PATH) or "",
            previous_artifact_hash=previous_hash,
            changed=draft.changed,
            summary=draft.summary,
            usage=usage,
            timing=Timing(started_at=started, finished_at=now()),
        )


def _inside(workdir: Path, relative: str) -> Path:
    """A model may only write inside the workspace, and never into git's own files."""
    root = workdir.resolve()
    target = (root / relative).resolve()
    if (
        not target.is_relative_to(root)
        or target == root
        or ".git" in target.relative_to(root).parts
    ):
        raise ApplicationError(
            f"refusing to write {relative!r}: outside the workspace",
            type=INVALID_OUTPUT,
            non_retryable=True,
        )
    return target
