"""After reflection: the task curator (docs/playbook.md#what-a-run-sends-back) decides what
the run teaches the repository's playbook, and whether to start the skill sub-loop."""

from __future__ import annotations

import asyncio

from temporalio import activity

from loopworks.activities.deps import StepDeps
from loopworks.activities.model_calls import consult
from loopworks.playbook.store import PlaybookStore
from loopworks.schemas.contexts import TaskCuratorContext
from loopworks.schemas.curation import CuratorPayload
from loopworks.schemas.learning import CurateInput, CurateOutput
from loopworks.schemas.playbook import PlaybookItem, PlaybookRead
from loopworks.schemas.roles import Role


class CurationActivities:
    def __init__(self, deps: StepDeps) -> None:
        self.deps = deps

    @activity.defn(name="curate_run")
    async def curate_run(self, step: CurateInput) -> CurateOutput:
        items = await current_items(self.deps, step.playbook)
        context = TaskCuratorContext(
            task=step.task,
            outcome=step.outcome,
            summary=step.summary,
            friction_points=step.friction_points,
            proposed_changes=step.proposed_changes,
            acceptance_criteria=step.acceptance_criteria,
            playbook_items=items,
        )
        answered = await consult(self.deps, Role.TASK_CURATOR, step, context, CuratorPayload)
        return CurateOutput(payload=answered.answer, usage=answered.usage, repairs=answered.repairs)


async def current_items(deps: StepDeps, read: PlaybookRead | None) -> list[PlaybookItem]:
    """The playbook's items now (none without a playbook): a curator updates and removes
    them by id."""
    if read is None:
        return []
    store = PlaybookStore.of(deps.workspaces)
    playbook = await asyncio.to_thread(store.current, read.origin, read.name)
    return playbook.items if playbook else []
