"""Step 10: the framework reflection and the session-insights record (docs/loop.md#steps).

Both are written into the run's branch (`.loops/`: by close, in the run's last commit) and,
for trend analysis across runs, under the data directory's `insights/`.
"""

from __future__ import annotations

import asyncio

from temporalio import activity

from loopworks.activities.deps import StepDeps
from loopworks.activities.errors import refusing_unsafe_paths
from loopworks.activities.model_calls import consult
from loopworks.schemas.contexts import ReflectorContext
from loopworks.schemas.insights import FrameworkReflection, SessionInsights
from loopworks.schemas.roles import ReflectionAnswer, Role
from loopworks.schemas.steps import ReflectInput, ReflectOutput
from loopworks.workspace.run_log import insights_json


class ReflectionActivities:
    def __init__(self, deps: StepDeps) -> None:
        self.deps = deps

    @activity.defn(name="reflect_on_run")
    async def reflect_on_run(self, step: ReflectInput) -> ReflectOutput:
        state = step.state
        stop_reason = state.stop_reason.value if state.stop_reason else None
        context = ReflectorContext(
            task=state.task,
            stop_reason=state.stop_reason,
            status=state.status,
            iteration=state.iteration,
            last_score=state.last_score,
            guidance=step.guidance,
            acceptance_criteria=state.acceptance_criteria,
            playbook_items=step.playbook_items,
        )
        answered = await consult(self.deps, Role.REFLECTOR, step, context, ReflectionAnswer)
        answer, usage = answered.answer, answered.usage
        reflection = FrameworkReflection(
            request=state.task[:300],
            guidance_received="; ".join(step.guidance) or "N/A - direct execution",
            followed=answer.followed,
            outcome=answer.outcome.capitalize(),
            accomplishment=answer.accomplishment,
            root_cause=answer.root_cause,
            proposed_change=answer.proposed_change,
        )
        total_usage = state.usage + usage
        insights = SessionInsights(
            session_id=state.run_id,
            date=step.committed_at.date().isoformat(),
            project=state.origin,
            summary=answer.summary,
            outcome=answer.outcome,
            accomplishments=answer.accomplishments,
            friction_points=answer.friction_points,
            proposed_changes=answer.proposed_changes,
            workflows_used=[state.template] if state.template else [],
            subagents_invoked=step.subagents_invoked,
            subagent_count=len(step.subagents_invoked),
            custodiet_blocks=state.block.count,
            stop_reason=stop_reason or "",
            critic_verdict=step.critic_verdict,
            acceptance_criteria_count=len(state.acceptance_criteria),
            user_prompts=[state.task],
            token_usage=total_usage.model_dump(),
        )
        with refusing_unsafe_paths():
            commit, saved_seq = await asyncio.to_thread(self._record, step, reflection, insights)
        return ReflectOutput(
            reflection=reflection,
            insights=insights,
            commit=commit,
            saved_seq=saved_seq,
            usage=usage,
            repairs=answered.repairs,
            playbook_tags=answer.playbook_tags,
        )

    def _record(
        self, step: ReflectInput, reflection: FrameworkReflection, insights: SessionInsights
    ) -> tuple[str, int]:
        """The insights archived under the data directory. Close commits the reflection and
        insights with the run's last events (`record_and_close_run`), so the commit is the
        one reflected on and no event is saved here."""
        archive = self.deps.settings.insights_dir
        archive.mkdir(parents=True, exist_ok=True)
        # A task graph's loops have ids `<graph>/<task>/<attempt>`: one flat file each.
        name = insights.session_id.replace("/", "--")
        (archive / f"{insights.date}-{name}.json").write_text(insights_json(insights))
        return step.workspace.commit, 0
