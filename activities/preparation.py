"""Step 5's other half: PREPARE turns the active rules into concrete checks."""

from __future__ import annotations

from temporalio import activity

from loopworks.activities.deps import StepDeps, now
from loopworks.activities.model_calls import consult
from loopworks.schemas.contexts import PreparerContext
from loopworks.schemas.roles import Preparation, Role
from loopworks.schemas.rules import PreparedCheck, concrete_checks, described_rules
from loopworks.schemas.steps import PrepareInput, PrepareOutput, Timing


class PreparationActivities:
    def __init__(self, deps: StepDeps) -> None:
        self.deps = deps

    @activity.defn(name="prepare_checks")
    async def prepare_checks(self, step: PrepareInput) -> PrepareOutput:
        started = now()
        # Rules that already carry a concrete check need no model: only sentences do.
        concrete = concrete_checks(step.rules)
        described = described_rules(step.rules)
        output = PrepareOutput(checks=concrete)
        if described:
            context = PreparerContext(task=step.task, rules=described)
            expected = {r.id for r in described}

            def check(answer: Preparation) -> None:
                given = {c.rule_id for c in answer.checks}
                if given != expected:
                    raise ValueError(
                        f"`checks` must have one entry per rule: missing "
                        f"{sorted(expected - given)}, unknown rule ids {sorted(given - expected)}"
                    )

            answered = await consult(self.deps, Role.PREPARER, step, context, Preparation, check)
            output.checks += [
                PreparedCheck(rule_id=c.rule_id, check=c.check) for c in answered.answer.checks
            ]
            output.usage, output.repairs = answered.usage, answered.repairs
        output.timing = Timing(started_at=started, finished_at=now())
        return output
