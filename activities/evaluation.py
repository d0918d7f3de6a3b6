"""Step 6: EVALUATE, one activity per independent check group, run in parallel.

Evaluators are strict and non-creative (seed 001): commands and patterns are run, not
judged; only `llm` checks ask a model, yes/no questions, all of a group's in one call.
Only commands need a working clone; patterns and the judge read the commit's files.
"""

from __future__ import annotations

import asyncio
from typing import TypeVar

from temporalio import activity

from loopworks.checks.redaction import cap, redact, worker_secrets
from loopworks.checks.runner import CheckOutcome, match_pattern, run_command_check
from loopworks.schemas.contexts import EvaluatorContext, Question
from loopworks.schemas.evaluation import CheckResult
from loopworks.schemas.roles import Role, judgements_model, judgements_of
from loopworks.schemas.rules import (
    CheckGroup,
    CommandCheck,
    JudgeCheck,
    PatternCheck,
    PreparedCheck,
)
from loopworks.schemas.steps import ARTIFACT_PATH, EvaluateGroupInput, EvaluateGroupOutput, Timing
from loopworks.worker.deps import StepDeps, heartbeating, now
from loopworks.workspace.origin import Absent

C = TypeVar("C", CommandCheck, PatternCheck, JudgeCheck)

# A check's detail in history: the runner keeps 8 KiB of a command's output; a little more
# leaves room for its status line, and bounds a judge's reason too.
CHECK_DETAIL_CAP_CHARS = 10_000


class EvaluationActivities:
    def __init__(self, deps: StepDeps) -> None:
        self.deps = deps

    @activity.defn(name="evaluate_group")
    async def evaluate_group(self, step: EvaluateGroupInput) -> EvaluateGroupOutput:
        started = now()
        output = EvaluateGroupOutput(group=step.group, results=[])
        async with heartbeating():
            if step.group is CheckGroup.EXEC:
                outcomes = await self._run_commands(step)
            elif step.group is CheckGroup.CONTENT:
                outcomes = await self._match_patterns(step)
            else:
                outcomes = await self._judge(step, output)
        secrets = worker_secrets()
        for prepared, outcome in zip(step.checks, outcomes, strict=True):
            # The detail enters history and events: redacted (a pattern check quotes a
            # file line, a judge's reason the artifact) and capped, like command output.
            detail = cap(redact(outcome.detail, secrets), CHECK_DETAIL_CAP_CHARS)
            output.results.append(
                CheckResult(rule_id=prepared.rule_id, passed=outcome.passed, detail=detail)
            )
        output.timing = Timing(started_at=started, finished_at=now())
        return output

    async def _run_commands(self, step: EvaluateGroupInput) -> list[CheckOutcome]:
        """Commands may write: they run in a clone of their own, beside the run's, so the
        groups running in parallel never see each other's changes."""
        workdir = await asyncio.to_thread(
            self.deps.workspaces.checkout,
            step.run_id,
            step.workspace.origin,
            step.workspace.commit,
            f"eval-{step.group.value}",
        )
        return [
            await asyncio.to_thread(run_command_check, _check(prepared, CommandCheck), workdir)
            for prepared in step.checks
        ]

    async def _match_patterns(self, step: EvaluateGroupInput) -> list[CheckOutcome]:
        """Patterns only read: the files at the commit, no checkout."""
        checks = [_check(prepared, PatternCheck) for prepared in step.checks]
        files = await self._read(step, [check.path for check in checks])
        return [match_pattern(check, files[check.path]) for check in checks]

    async def _read(self, step: EvaluateGroupInput, paths: list[str]) -> dict[str, str | Absent]:
        return await asyncio.to_thread(
            self.deps.workspaces.read_files,
            step.run_id,
            step.workspace.origin,
            step.workspace.commit,
            paths,
        )

    async def _judge(
        self, step: EvaluateGroupInput, output: EvaluateGroupOutput
    ) -> list[CheckOutcome]:
        """Every yes/no question of the group in one model call: the artifact is sent once,
        and each answer names the rule it belongs to."""
        questions = {
            prepared.rule_id: _check(prepared, JudgeCheck).question for prepared in step.checks
        }
        artifact = (await self._read(step, [ARTIFACT_PATH]))[ARTIFACT_PATH]
        context = EvaluatorContext(
            task=step.task,
            questions=[
                Question(rule_id=rule_id, question=question)
                for rule_id, question in questions.items()
            ],
            artifact="" if isinstance(artifact, Absent) else artifact,
        )
        answer_type = judgements_model(questions)
        answered = await self.deps.consult(Role.EVALUATOR, step, context, answer_type)
        output.usage, output.repairs = answered.usage, answered.repairs
        judged = judgements_of(answered.answer)
        return [
            CheckOutcome(passed=judged[p.rule_id].passed, detail=judged[p.rule_id].reason)
            for p in step.checks
        ]


def _check(prepared: PreparedCheck, kind: type[C]) -> C:
    """A group's check, of the one kind its group holds (decisions.group_checks)."""
    if not isinstance(prepared.check, kind):
        raise TypeError(f"a {type(prepared.check).__name__} in a group of {kind.__name__}")
    return prepared.check
