"""Steps 1 and 2: the prompt hydrator and the critic that reviews its plan."""

from __future__ import annotations

import asyncio

from temporalio import activity
from temporalio.exceptions import ApplicationError

from loopworks.activities.deps import StepDeps
from loopworks.activities.model_calls import consult
from loopworks.playbook.selection import select_items
from loopworks.playbook.store import PlaybookStore
from loopworks.prompts.catalog import choose_template
from loopworks.schemas.contexts import CriticContext, HydratorContext
from loopworks.schemas.playbook import Playbook, PlaybookFiles, PlaybookItem, PlaybookUse
from loopworks.schemas.roles import CriticReview, Hydration, Role
from loopworks.schemas.rules import normalise_rules
from loopworks.schemas.steps import HydrateInput, HydrateOutput, ReviewInput, ReviewOutput


class HydrationActivities:
    def __init__(self, deps: StepDeps) -> None:
        self.deps = deps

    @activity.defn(name="hydrate")
    async def hydrate(self, step: HydrateInput) -> HydrateOutput:
        templates = self.deps.templates
        if step.template and step.template not in templates:
            raise ApplicationError(
                f"unknown workflow template {step.template!r}", non_retryable=True
            )
        suggested = step.template or choose_template(step.task, templates)
        use, items = await self._playbook_items(step)
        context = HydratorContext(
            task=step.task,
            template=step.template,
            suggested_template=suggested,
            template_steps=[s.name for s in templates[suggested].steps],
            templates={t.id: t.title for t in templates.values()},
            user_rules=step.user_rules,
            user_criteria=step.user_criteria,
            user_plan=step.user_plan,
            feedback=step.feedback,
            playbook_items=items,
        )

        def check(hydration: Hydration) -> None:
            if step.user_rules:
                return  # the user's rules replace the drafted ones
            if not hydration.rules:
                # With no rule every artifact scores 1.0: a plan without criteria is no plan.
                raise ValueError("`rules` is empty: draft at least one rule")
            normalise_rules(hydration.rules)  # duplicate ids

        answered = await consult(self.deps, Role.HYDRATOR, step, context, Hydration, check)
        hydration = answered.answer
        if hydration.template not in templates:
            hydration.template = suggested
        if step.template:
            # The user's choice of template is not the model's to change.
            hydration.template = step.template
        if step.user_rules:
            # User rules are the criteria; the hydrator only drafts rules when none are given.
            hydration.rules = step.user_rules
        hydration.rules = normalise_rules(hydration.rules)
        if step.user_plan:
            # A prep package's tasks are the plan (docs/graphs.md#a-single-run-from-a-prep-package).
            hydration.plan = step.user_plan
        # The user's criteria come first, word for word; the hydrator's add to them.
        given = step.user_criteria
        hydration.acceptance_criteria = [
            *given,
            *(c for c in hydration.acceptance_criteria if c not in given),
        ]
        return HydrateOutput(
            hydration=hydration,
            usage=answered.usage,
            repairs=answered.repairs,
            playbook=use,
            playbook_items=items,
        )

    async def _playbook_items(
        self, step: HydrateInput
    ) -> tuple[PlaybookUse | None, list[PlaybookItem]]:
        """The playbook version to draw on (the current one, or the pinned one) and its
        items most relevant to the task, within the settings' token budget."""
        read = step.playbook
        if read is None:
            return None, []
        store = PlaybookStore.of(self.deps.workspaces)
        found, commit = await asyncio.to_thread(store.located, read.origin, read.name, read.version)
        if found is None and read.version is not None:
            raise ApplicationError(
                f"playbook {read.name} has no version {read.version}", non_retryable=True
            )
        playbook = found or Playbook(name=read.name)
        budget = self.deps.settings.playbook_context_tokens
        items = select_items(playbook.items, step.task, budget)
        given = playbook.files_of(items)
        use = PlaybookUse(
            name=read.name,
            version=playbook.version,
            item_ids=[item.id for item in items],
            pinned=read.version is not None,
            files=PlaybookFiles(commit=commit, files=given) if given and commit else None,
        )
        return use, items

    @activity.defn(name="review_plan")
    async def review_plan(self, step: ReviewInput) -> ReviewOutput:
        context = CriticContext(task=step.task, hydration=step.hydration)
        answered = await consult(self.deps, Role.CRITIC, step, context, CriticReview)
        return ReviewOutput(review=answered.answer, usage=answered.usage, repairs=answered.repairs)
