"""SkillLoopWorkflow: the skill sub-loop (docs/playbook.md#the-skill-sub-loop), a child of the
run whose task curator
asked for helpers or reference notes.

Generator, reflector (with each helper's check run by code), curator: each an activity
on the run's workspace. It answers the run's new commit (the kept files and the skill
trajectory, and nothing else) and the playbook deltas; the run adopts both, or, if this
workflow fails, goes on without them. A generator that wrote none of its files adds no
commit. Its steps spend from what was left of the run's budget when it started
(docs/loop.md#budgets); a step the budget ends ends the sub-loop, with what it spent
counted and nothing unreviewed kept.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from loopworks.activities.skills import SkillActivities
    from loopworks.schemas.curation import helper_names, helper_path, reference_paths
    from loopworks.schemas.learning import (
        CurateSkillsInput,
        GenerateSkillsInput,
        ReviewSkillsInput,
        SkillLoopInput,
        SkillLoopResult,
        kept_files,
    )
    from loopworks.schemas.roles import Role
    from loopworks.schemas.run import TokenUsage
    from loopworks.schemas.steps import BUDGET_EXHAUSTED, STEP_OF_ROLE, call_name
    from loopworks.workflows.allowances import allowance
    from loopworks.workflows.policies import AGENT_STEP, CHECK_GROUP, MODEL_CALL, execute
    from loopworks.workflows.steps import spent_by

T = TypeVar("T")


def recorded_calls(iteration: int) -> list[str]:
    """The names the sub-loop's single-shot calls are recorded under, for the run's close
    to commit (workspace/call_records.py): each of its two roles calls once a session, as
    its first call (`call_index` 1), at the run's iteration."""
    roles = (Role.SKILL_REFLECTOR, Role.SKILL_CURATOR)
    return [call_name(iteration, STEP_OF_ROLE[role], 1) for role in roles]


@workflow.defn(name="SkillLoopWorkflow")
class SkillLoopWorkflow:
    @workflow.run
    async def run(self, params: SkillLoopInput) -> SkillLoopResult:
        self._spent = TokenUsage()
        try:
            return await self._run(params)
        except ActivityError as err:
            # A failed child reports nothing of its own: what its calls were billed goes
            # in its failure's details, for the run to count (`spent_by`).
            spent = self._spent + spent_by(err)
            raise ApplicationError(
                str(err.cause or err), spent.model_dump(mode="json"), non_retryable=True
            ) from err

    async def _run(self, params: SkillLoopInput) -> SkillLoopResult:
        payload, workspace = params.payload, params.workspace
        helpers = [helper_path(name) for name in helper_names(payload)]
        references = reference_paths(payload.reference_requests)
        step = {"run_id": params.run_id, "iteration": params.iteration, "origin": workspace.origin}
        generated = await execute(
            SkillActivities.generate_skills,
            GenerateSkillsInput(
                **step,
                allowance=allowance(params.allowance, TokenUsage()),
                task=params.task,
                curator_summary=payload.summary,
                helper_paths=helpers,
                reference_requests=payload.reference_requests,
                reference_paths=references,
                playbook=params.playbook,
                workspace=workspace,
                committed_at=workflow.now(),
            ),
            AGENT_STEP,
            f"skill generator · {len(helpers)} helpers, {len(references)} notes",
        )
        result = SkillLoopResult(commit=generated.commit, usage=generated.usage)
        self._spent = result.usage
        if not generated.files:
            # With nothing to review there is nothing to keep: the run keeps its own commit.
            # Unpatched: this changes what the sub-loop answers, not which commands it gives,
            # so a sub-loop recorded when it answered the generator's commit replays all the
            # same, and one still open when this is deployed keeps nothing unreviewed either.
            result.commit = None
            asked = [*helpers, *references]
            result.rejected = {path: "the generator did not write it" for path in asked}
            return result
        reviewed = await _unless_spent(
            execute(
                SkillActivities.review_skills,
                ReviewSkillsInput(
                    **step,
                    allowance=allowance(params.allowance, result.usage),
                    task=params.task,
                    helper_paths=helpers,
                    reference_paths=references,
                    files=generated.files,
                    generator_summary=generated.summary,
                    workspace=workspace.model_copy(update={"commit": generated.commit}),
                    committed_at=workflow.now(),
                ),
                CHECK_GROUP,
                f"skill reflector · {len(generated.files)} files",
            ),
            result,
        )
        if reviewed is None:
            # Nothing unreviewed joins the run's branch: the run keeps its own commit.
            result.commit = None
            unreviewed = "not reviewed: the run's budget is spent"
            result.rejected = {path: unreviewed for path in [*helpers, *references]}
            return result
        result.commit = reviewed.commit
        result.usage += reviewed.usage
        self._spent = result.usage
        result.accepted = [accepted.review.path for accepted in reviewed.accepted]
        result.files = kept_files(reviewed.accepted)
        result.rejected = reviewed.rejected
        if reviewed.accepted:
            curated = await _unless_spent(
                execute(
                    SkillActivities.curate_skills,
                    CurateSkillsInput(
                        **step,
                        allowance=allowance(params.allowance, result.usage),
                        task=params.task,
                        accepted=reviewed.accepted,
                        playbook=params.playbook,
                    ),
                    MODEL_CALL,
                    f"skill curator · {len(reviewed.accepted)} accepted",
                ),
                result,
            )
            if curated is not None:  # else the files are kept, with no deltas for them
                result.usage += curated.usage
                result.deltas = curated.curation.deltas
        return result


async def _unless_spent(activity: Awaitable[T], result: SkillLoopResult) -> T | None:
    """The activity's output; None when the run's budget ended it, what it spent first
    then counted in `result`."""
    try:
        return await activity
    except ActivityError as err:
        cause = err.cause
        if not (isinstance(cause, ApplicationError) and cause.type == BUDGET_EXHAUSTED):
            raise
        details = cause.details
        if details and isinstance(details[0], dict):
            result.usage += TokenUsage.model_validate(details[0])
        return None
