"""Step 8's first half: CRITIQUE names precise issues with fixes, only after a failed evaluation."""

from __future__ import annotations

from temporalio import activity

from loopworks.activities.deps import StepDeps
from loopworks.activities.model_calls import consult
from loopworks.schemas.contexts import ArtifactCriticContext
from loopworks.schemas.roles import Critique, Role
from loopworks.schemas.steps import CritiqueInput, CritiqueOutput


class CritiqueActivities:
    def __init__(self, deps: StepDeps) -> None:
        self.deps = deps

    @activity.defn(name="critique_artifact")
    async def critique_artifact(self, step: CritiqueInput) -> CritiqueOutput:
        artifact = await self.deps.read_artifact(step.workspace)
        context = ArtifactCriticContext(
            task=step.task, artifact=artifact, evaluation=step.evaluation, rules=step.rules
        )
        answered = await consult(self.deps, Role.ARTIFACT_CRITIC, step, context, Critique)
        return CritiqueOutput(
            critique=answered.answer, usage=answered.usage, repairs=answered.repairs
        )
