"""Step 6: EVALUATE, one activity per independent check group, run in parallel.

Evaluators are strict and non-creative (seed 001): commands and patterns are run, not
judged; only `llm` checks ask a model, yes/no questions, all of a group's in one call.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio import activity

from loopworks.checks.redaction import cap, redact, worker_secrets
from loopworks.checks.runner import CheckOutcome, run_command_check, run_pattern_check
from loopworks.schemas.contexts import EvaluatorContext, Question
from loopworks.schemas.evaluation import CheckResult
from loopworks.schemas.roles import Role, judgements_model, judgements_of
from loopworks.schemas.rules import CommandCheck, JudgeCheck, PatternCheck
from loopworks.schemas.steps import ARTIFACT_PATH, EvaluateGroupInput, EvaluateGroupOutput, Timing
from loopworks.worker.deps import StepDeps, heartbeating, now

# A check's detail in history: the runner keeps 8 KiB of a command's output; a little more
# leaves room for its status line, and bounds a judge's reason too.
CHECK_DETAIL_CAP_CHARS = 10_000


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
        output = EvaluateGroupOutput(group=step.group, results=[])
        questions = {
            prepared.rule_id: prepared.check.question
            for prepared in step.checks
            if isinstance(prepared.check, JudgeCheck)
        }
        judged: dict[str, CheckOutcome] = {}
        if questions:
            judged = await self._judge(step, workdir, questions, output)
        secrets = worker_secrets()
        async with heartbeating():
            for prepared in step.checks:
                check = prepared.check
                if isinstance(check, JudgeCheck):
                    outcome = judged[prepared.rule_id]
                elif isinstance(check, CommandCheck):
                    outcome = await asyncio.to_thread(run_command_check, check, workdir)
                elif isinstance(check, PatternCheck):
                    outcome = await asyncio.to_thread(run_pattern_check, check, workdir)
                # The detail enters history and events: redacted (a pattern check quotes a
                # file line, a judge's reason the artifact) and capped, like command output.
                detail = cap(redact(outcome.detail, secrets), CHECK_DETAIL_CAP_CHARS)
                output.results.append(
                    CheckResult(rule_id=prepared.rule_id, passed=outcome.passed, detail=detail)
                )
        output.timing = Timing(started_at=started, finished_at=now())
        return output

    async def _judge(
        self,
        step: EvaluateGroupInput,
        workdir: Path,
        questions: dict[str, str],
        output: EvaluateGroupOutput,
    ) -> dict[str, CheckOutcome]:
        """Every yes/no question of the group in one model call: the artifact is sent once,
        and each answer names the rule it belongs to."""
        artifact = workdir / ARTIFACT_PATH
        context = EvaluatorContext(
            task=step.task,
            questions=[
                Question(rule_id=rule_id, question=question)
                for rule_id, question in questions.items()
            ],
            artifact=artifact.read_text() if artifact.exists() else "",
        )
        answer_type = judgements_model(questions)
        answered = await self.deps.consult(Role.EVALUATOR, step, context, answer_type)
        output.usage, output.repairs = answered.usage, answered.repairs
        return {
            rule_id: CheckOutcome(passed=judgement.passed, detail=judgement.reason)
            for rule_id, judgement in judgements_of(answered.answer).items()
        }
