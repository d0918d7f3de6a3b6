"""Step 6: EVALUATE, one activity per independent check group, run in parallel.

Evaluators are strict and non-creative (seed 001): commands and patterns are run, not
judged; only `llm` checks ask a model, and only a yes/no question.
"""

from __future__ import annotations

import asyncio

from temporalio import activity

from activities.checks import CheckOutcome, run_command_check, run_pattern_check
from activities.deps import StepDeps, heartbeating, now
from schemas.evaluation import CheckResult
from schemas.roles import Judgement, Role
from schemas.rules import CommandCheck, JudgeCheck, PatternCheck
from schemas.run import TokenUsage
from schemas.steps import ARTIFACT_PATH, EvaluateGroupInput, EvaluateGroupOutput, Timing


class EvaluationActivities:
    def __init__(self, deps: StepDeps) -> None:
        self.deps = deps

    @activity.defn(name="evaluate_group")
    async def evaluate_group(self, step: EvaluateGroupInput) -> EvaluateGroupOutput:
        started = now()
        workdir = await asyncio.to_thread(
            self.deps.workspaces.checkout,
            step.run_id,
            step.workspace.origin,
            step.workspace.commit,
            # Groups run in parallel: each reads its own clone.
            f"eval-{step.group.value}",
        )
        usage = TokenUsage()
        results: list[CheckResult] = []
        async with heartbeating():
            for prepared in step.checks:
                check = prepared.check
                if isinstance(check, JudgeCheck):
                    artifact = workdir / ARTIFACT_PATH
                    context = {
                        "task": step.task,
                        "question": check.question,
                        "artifact": artifact.read_text() if artifact.exists() else "",
                    }
                    judgement, used = await self.deps.consult(
                        Role.EVALUATOR, step, context, Judgement
                    )
                    usage = usage + used
                    outcome = CheckOutcome(passed=judgement.passed, detail=judgement.reason)
                elif isinstance(check, CommandCheck):
                    outcome = await asyncio.to_thread(run_command_check, check, workdir)
                elif isinstance(check, PatternCheck):
                    outcome = await asyncio.to_thread(run_pattern_check, check, workdir)
                results.append(
                    CheckResult(
                        rule_id=prepared.rule_id, passed=outcome.passed, detail=outcome.detail
                    )
                )
        return EvaluateGroupOutput(
            group=step.group,
            results=results,
            usage=usage,
            timing=Timing(started_at=started, finished_at=now()),
        )
