"""Planning a task graph (docs/graphs.md#from-a-goal-to-tasks): the task planner splits a
goal into atomic tasks."""

from __future__ import annotations

from temporalio import activity

from loopworks.activities.deps import StepDeps
from loopworks.activities.model_calls import consult
from loopworks.schemas.contexts import TaskPlannerContext
from loopworks.schemas.roles import Role, TaskPlan
from loopworks.schemas.steps import PlanGraphInput, PlanGraphOutput
from loopworks.schemas.tasks import graph_errors


class PlanningActivities:
    def __init__(self, deps: StepDeps) -> None:
        self.deps = deps

    @activity.defn(name="plan_graph")
    async def plan_graph(self, step: PlanGraphInput) -> PlanGraphOutput:
        """The goal as a graph that can run: a plan `graph_errors` refuses goes back to the
        model once with every problem, then the step fails as InvalidOutput (naming them)."""
        # The model sees a capped list; the atomic rule counts against every path.
        existing = frozenset(step.files)
        context = TaskPlannerContext.listing(step.goal, step.files, step.base_branch)

        def check(plan: TaskPlan) -> None:
            if errors := graph_errors(plan.tasks, existing_files=existing):
                raise ValueError(
                    "the task graph cannot run; fix every problem:\n"
                    + "\n".join(f"- {error}" for error in errors)
                )

        answered = await consult(self.deps, Role.TASK_PLANNER, step, context, TaskPlan, check)
        return PlanGraphOutput(
            tasks=answered.answer.tasks, usage=answered.usage, repairs=answered.repairs
        )
