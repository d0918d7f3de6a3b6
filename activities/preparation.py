"""Step 5's other half: PREPARE turns the active rules into concrete checks."""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.deps import INVALID_OUTPUT, StepDeps, now
from schemas.roles import Preparation, Role
from schemas.rules import PreparedCheck
from schemas.steps import PrepareInput, PrepareOutput, Timing


class PreparationActivities:
    def __init__(self, deps: StepDeps) -> None:
        self.deps = deps

    @activity.defn(name="prepare_checks")
    async def prepare_checks(self, step: PrepareInput) -> PrepareOutput:
        started = now()
        # Rules that already carry a concrete check need no model: only sentences do.
        concrete = [
            PreparedCheck(rule_id=r.id, check=r.check)
            for r in step.rules
            if not isinstance(r.check, str)
        ]
        described = [r for r in step.rules if isinstance(r.check, str)]
        usage = None
        prepared: list[PreparedCheck] = []
        if described:
            context = {
                "task": step.task,
                "rules": [r.model_dump(mode="json") for r in described],
            }
            answer, usage = await self.deps.consult(Role.PREPARER, step, context, Preparation)
            prepared = [PreparedCheck(rule_id=c.rule_id, check=c.check) for c in answer.checks]
            missing = {r.id for r in described} - {c.rule_id for c in prepared}
            unknown = {c.rule_id for c in prepared} - {r.id for r in described}
            if missing or unknown:
                raise ApplicationError(
                    f"preparer: checks missing for {sorted(missing)}, "
                    f"unknown rules {sorted(unknown)}",
                    type=INVALID_OUTPUT,
                    non_retryable=True,
                )
        output = PrepareOutput(
            checks=concrete + prepared, timing=Timing(started_at=started, finished_at=now())
        )
        if usage is not None:
            output.usage = usage
        return output
