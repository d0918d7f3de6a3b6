"""Steps 1 and 2: the prompt hydrator and the critic that reviews its plan."""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.catalog import choose_template
from activities.deps import INVALID_OUTPUT, StepDeps
from schemas.roles import CriticReview, Hydration, Role
from schemas.rules import normalise_rules
from schemas.steps import HydrateInput, HydrateOutput, ReviewInput, ReviewOutput


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
        context = {
            "task": step.task,
            "template": step.template,
            "suggested_template": suggested,
            "template_steps": [s.name for s in templates[suggested].steps],
            "templates": {t.id: t.title for t in templates.values()},
            "user_rules": [r.model_dump(mode="json") for r in step.user_rules],
            "feedback": step.feedback,
        }
        hydration, usage = await self.deps.consult(Role.HYDRATOR, step, context, Hydration)
        if hydration.template not in templates:
            hydration.template = suggested
        if step.template:
            # The user's choice of template is not the model's to change.
            hydration.template = step.template
        if step.user_rules:
            # User rules are the criteria; the hydrator only drafts rules when none are given.
            hydration.rules = step.user_rules
        try:
            hydration.rules = normalise_rules(hydration.rules)
        except ValueError as exc:
            raise ApplicationError(
                f"hydrator: {exc}", type=INVALID_OUTPUT, non_retryable=True
            ) from exc
        if not hydration.rules:
            # With no rule every artifact scores 1.0: a plan without criteria is no plan.
            raise ApplicationError(
                "hydrator drafted no rules", type=INVALID_OUTPUT, non_retryable=True
            )
        return HydrateOutput(hydration=hydration, usage=usage)

    @activity.defn(name="review_plan")
    async def review_plan(self, step: ReviewInput) -> ReviewOutput:
        context = {"task": step.task, "hydration": step.hydration.model_dump(mode="json")}
        review, usage = await self.deps.consult(Role.CRITIC, step, context, CriticReview)
        return ReviewOutput(review=review, usage=usage)
