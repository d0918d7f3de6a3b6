"""Step 6: EVALUATE, one activity per independent check group, run in parallel.

Evaluators are strict and non-creative: commands and patterns are run, not judged; only
`llm` checks ask a model, yes/no questions, all of a group's in one call. Two groups
(docs/loop.md#rules-and-checks): executable checks, in a working clone; content rules
(patterns and judgements), read from the commit's files.
"""

from __future__ import annotations

import asyncio

from temporalio import activity

from loopworks.activities.deps import StepDeps, now
from loopworks.activities.heartbeat import heartbeating
from loopworks.activities.model_calls import consult
from loopworks.checks.budget import CheckBudget, command_within, match_within
from loopworks.checks.redaction import cap, redact, worker_secrets
from loopworks.checks.runner import CheckOutcome
from loopworks.schemas.contexts import EvaluatorContext, Question
from loopworks.schemas.evaluation import CheckResult
from loopworks.schemas.roles import Role, judgements_model, judgements_of
from loopworks.schemas.rules import CheckGroup, CommandCheck, JudgeCheck, PatternCheck
from loopworks.schemas.steps import ARTIFACT_PATH, EvaluateGroupInput, EvaluateGroupOutput, Timing
from loopworks.workspace.changes import (
    FileChange,
    capped_patch,
    code_paths,
    diff_stat,
    without_records,
)
from loopworks.workspace.origin import Absent
from loopworks.workspace.runner import GitError

# A proof rule's result on work that changed only the artifact and the run's records.
NOTHING_TO_PROVE = "nothing to prove: the run changed only its artifact and records"
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
                outcomes = await self._run_commands(step, output)
            else:
                outcomes = await self._read_and_judge(step, output)
        secrets = worker_secrets()
        for prepared, outcome in zip(step.checks, outcomes, strict=True):
            # The detail enters history and events: redacted (a pattern check quotes a
            # file line, a judge's reason the artifact) and capped, like command output.
            detail = cap(redact(outcome.detail, secrets), CHECK_DETAIL_CAP_CHARS)
            output.results.append(
                CheckResult(
                    rule_id=prepared.rule_id,
                    passed=outcome.passed,
                    detail=detail,
                    unchecked=outcome.unchecked,
                    exit_code=outcome.exit_code,
                )
            )
        output.timing = Timing(started_at=started, finished_at=now())
        return output

    def _budget(self) -> CheckBudget:
        """The deadline this group's pattern and command checks share, from when its
        files are ready (docs/loop.md#bounded-checks)."""
        return CheckBudget(self.deps.settings.check_budget_seconds)

    async def _run_commands(
        self, step: EvaluateGroupInput, output: EvaluateGroupOutput
    ) -> list[CheckOutcome]:
        """Commands may write: they run in a clone of their own, beside the run's, so
        nothing they leave reaches the run's next commit. The run's proof runs only on work
        that changed code (docs/loop.md#the-runs-proof)."""
        workdir = await asyncio.to_thread(
            self.deps.workspaces.checkout_at,
            step.run_id,
            step.workspace,
            f"eval-{step.group.value}",
        )
        if step.proof_rules:
            output.code_changed = await self._code_changed(step)
        budget = self._budget()
        outcomes = []
        for prepared in step.checks:
            if not isinstance(prepared.check, CommandCheck):
                raise TypeError(f"a {prepared.check.kind} check in the exec group")
            if prepared.rule_id in step.proof_rules and output.code_changed == []:
                outcomes.append(CheckOutcome(passed=True, detail=NOTHING_TO_PROVE))
                continue
            outcomes.append(await command_within(prepared.check, workdir, budget))
        return outcomes

    async def _code_changed(self, step: EvaluateGroupInput) -> list[str] | None:
        """The paths besides the artifact and the run's records the run changed since its
        base commit; None when that cannot be read (the proof then runs: only a change
        known to hold no code is spared it)."""
        changes = await self._since_base(step, "the run's change could not be read for its proof")
        return None if changes is None else code_paths(changes)

    async def _since_base(self, step: EvaluateGroupInput, unread: str) -> list[FileChange] | None:
        """What the run changed from its base commit to the step's; None without a base,
        or when no repository here holds both (logged as `unread`)."""
        if not step.base_commit:
            return None
        if step.base_commit == step.workspace.commit:
            return []
        try:
            return await asyncio.to_thread(
                self.deps.workspaces.run_changes,
                step.run_id,
                step.workspace.origin,
                step.base_commit,
                step.workspace.commit,
            )
        except GitError as err:
            activity.logger.warning("%s: %s", unread, err)
            return None

    async def _read_and_judge(
        self, step: EvaluateGroupInput, output: EvaluateGroupOutput
    ) -> list[CheckOutcome]:
        """Patterns and judgements only read: the commit's files, no checkout, in one git
        process; every yes/no question in one model call. The patterns go first, under
        the check budget, which the model's answer then does not eat into."""
        patterns = [p.check for p in step.checks if isinstance(p.check, PatternCheck)]
        questions = {
            p.rule_id: p.check.question for p in step.checks if isinstance(p.check, JudgeCheck)
        }
        paths = [check.path for check in patterns] + ([ARTIFACT_PATH] if questions else [])
        files = await asyncio.to_thread(
            self.deps.workspaces.read_files,
            step.run_id,
            step.workspace.origin,
            step.workspace.commit,
            paths,
        )
        budget = self._budget()
        matched: dict[int, CheckOutcome] = {}
        for index, prepared in enumerate(step.checks):
            if isinstance(pattern := prepared.check, PatternCheck):
                matched[index] = await match_within(pattern, files[pattern.path], budget)
        judged = await self._judge(step, files, questions, output) if questions else {}
        outcomes = []
        for index, prepared in enumerate(step.checks):
            check = prepared.check
            if isinstance(check, PatternCheck):
                outcomes.append(matched[index])
            elif isinstance(check, JudgeCheck):
                outcomes.append(judged[prepared.rule_id])
            else:
                raise TypeError(f"a {check.kind} check in the {step.group.value} group")
        return outcomes

    async def _judge(
        self,
        step: EvaluateGroupInput,
        files: dict[str, str | Absent],
        questions: dict[str, str],
        output: EvaluateGroupOutput,
    ) -> dict[str, CheckOutcome]:
        """Every yes/no question of the group in one model call: the artifact is sent once,
        and each answer names the rule it belongs to."""
        artifact = files[ARTIFACT_PATH]
        changes = await self._code_changes(step)
        context = EvaluatorContext(
            task=step.task,
            questions=[
                Question(rule_id=rule_id, question=question)
                for rule_id, question in questions.items()
            ],
            artifact="" if isinstance(artifact, Absent) else artifact,
            diff_stat=diff_stat(changes),
            patch=capped_patch(changes),
        )
        answer_type = judgements_model(questions)
        answered = await consult(self.deps, Role.EVALUATOR, step, context, answer_type)
        output.usage, output.repairs = answered.usage, answered.repairs
        return {
            rule_id: CheckOutcome(passed=judgement.passed, detail=judgement.reason)
            for rule_id, judgement in judgements_of(answered.answer).items()
        }

    async def _code_changes(self, step: EvaluateGroupInput) -> list[FileChange]:
        """The run's change besides its artifact and records: empty for a document task,
        and when no repository here holds both commits (the judge then reads the artifact
        alone, as it always could)."""
        changes = await self._since_base(step, "no diff for the judge") or []
        return [c for c in without_records(changes) if c.path != ARTIFACT_PATH]
