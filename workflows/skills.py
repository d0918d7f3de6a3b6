"""SkillLoopWorkflow: the skill sub-loop (docs/playbook.md#the-skill-sub-loop), a child of the
run whose task curator
asked for helpers or reference notes.

Generator, reflector (with each helper's check run by code), curator: each an activity
on the run's workspace. It answers the run's new commit (the kept files and the skill
trajectory) and the playbook deltas; the run adopts both, or, if this workflow fails,
goes on without them.
"""

from __future__ import annotations

from temporalio import workflow

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
    from loopworks.schemas.steps import STEP_OF_ROLE, call_name
    from loopworks.workflows.policies import AGENT_STEP, CHECK_GROUP, MODEL_CALL, execute


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
        payload, workspace = params.payload, params.workspace
        helpers = [helper_path(name) for name in helper_names(payload)]
        references = reference_paths(payload.reference_requests)
        step = {"run_id": params.run_id, "iteration": params.iteration, "origin": workspace.origin}
        generated = await execute(
            SkillActivities.generate_skills,
            GenerateSkillsInput(
                **step,
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
        if not generated.files:
            asked = [*helpers, *references]
            result.rejected = {path: "the generator did not write it" for path in asked}
            return result
        reviewed = await execute(
            SkillActivities.review_skills,
            ReviewSkillsInput(
                **step,
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
        )
        result.commit = reviewed.commit
        result.usage += reviewed.usage
        result.accepted = [accepted.review.path for accepted in reviewed.accepted]
        result.files = kept_files(reviewed.accepted)
        result.rejected = reviewed.rejected
        if reviewed.accepted:
            curated = await execute(
                SkillActivities.curate_skills,
                CurateSkillsInput(
                    **step, task=params.task, accepted=reviewed.accepted, playbook=params.playbook
                ),
                MODEL_CALL,
                f"skill curator · {len(reviewed.accepted)} accepted",
            )
            result.usage += curated.usage
            result.deltas = curated.curation.deltas
        return result
