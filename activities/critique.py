"""Step 8's first half: CRITIQUE names precise issues with fixes, only after a failed evaluation."""

from __future__ import annotations

import asyncio

from temporalio import activity

from activities.deps import StepDeps
from schemas.roles import Critique, Role
from schemas.steps import ARTIFACT_PATH, CritiqueInput, CritiqueOutput


class CritiqueActivities:
    def __init__(self, deps: StepDeps) -> None:
        self.deps = deps

    @activity.defn(name="critique_artifact")
    async def critique_artifact(self, step: CritiqueInput) -> CritiqueOutput:
        artifact = await asyncio.to_thread(
            self.deps.workspaces.read_file,
            step.workspace.origin,
            step.workspace.commit,
            ARTIFACT_PATH,
        )
        context = {
            "task": step.task,
            "artifact": artifact or "",
            "evaluation": step.evaluation.model_dump(mode="json"),
            "rules": [r.model_dump(mode="json") for r in step.rules],
        }
        critique, usage = await self.deps.consult(Role.ARTIFACT_CRITIC, step, context, Critique)
        return CritiqueOutput(critique=critique, usage=usage)
