"""Step 7: the custodiet's compliance audit, run by chance; BLOCK parks the run."""

from __future__ import annotations

from temporalio import activity

from loopworks.activities.deps import StepDeps
from loopworks.activities.model_calls import consult
from loopworks.schemas.contexts import CustodietContext
from loopworks.schemas.roles import Audit, Role
from loopworks.schemas.steps import AuditInput, AuditOutput


class AuditActivities:
    def __init__(self, deps: StepDeps) -> None:
        self.deps = deps

    @activity.defn(name="audit_run")
    async def audit_run(self, step: AuditInput) -> AuditOutput:
        context = CustodietContext(
            task=step.task,
            intent=step.intent,
            plan_focus=step.plan_focus,
            evaluation=step.evaluation,
        )
        answered = await consult(self.deps, Role.CUSTODIET, step, context, Audit)
        return AuditOutput(audit=answered.answer, usage=answered.usage, repairs=answered.repairs)
