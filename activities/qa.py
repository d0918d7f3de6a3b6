"""Step 9: the QA verifier, an independent agent that checks the finished work."""

from __future__ import annotations

from temporalio import activity

from loopworks.activities.deps import StepDeps
from loopworks.activities.model_calls import consult
from loopworks.schemas.contexts import QAVerifierContext
from loopworks.schemas.roles import QAReport, Role
from loopworks.schemas.steps import QAInput, QAOutput


class QAActivities:
    def __init__(self, deps: StepDeps) -> None:
        self.deps = deps

    @activity.defn(name="verify_result")
    async def verify_result(self, step: QAInput) -> QAOutput:
        artifact = await self.deps.read_artifact(step.workspace)
        context = QAVerifierContext(
            task=step.task,
            intent=step.intent,
            acceptance_criteria=step.acceptance_criteria,
            artifact=artifact,
            evaluation=step.evaluation,
        )
        answered = await consult(self.deps, Role.QA_VERIFIER, step, context, QAReport)
        return QAOutput(report=answered.answer, usage=answered.usage, repairs=answered.repairs)
