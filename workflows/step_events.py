"""What each model step announces: its typed event, built from the step's answer.

Plain functions of an activity's output (no Temporal), so the payloads can be tested on
their own; the step adapter (`workflows.steps`) emits what they return.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from loopworks.schemas import events as ev
from loopworks.schemas.evaluation import Evaluation
from loopworks.schemas.events import EventName, Payload
from loopworks.schemas.payloads import GroupTiming
from loopworks.schemas.rules import PreparedCheck, Rule
from loopworks.schemas.steps import (
    AuditOutput,
    CritiqueOutput,
    EvaluateGroupOutput,
    HydrateOutput,
    PlanOutput,
    PrepareOutput,
    QAOutput,
    ReflectOutput,
    ReviewOutput,
)
from loopworks.workflows.evidence import ACCEPTED, Judgement

Announcement = tuple[EventName, Payload]


def hydrated(round_: int, model_source: str = "") -> Callable[[HydrateOutput], Announcement]:
    """The run's first model step's event also names the model answering the run."""

    def announce(output: HydrateOutput) -> Announcement:
        hydration = output.hydration
        return EventName.HYDRATION_DONE, ev.HydrationPayload(
            template=hydration.template,
            plan=hydration.plan,
            acceptance_criteria=hydration.acceptance_criteria,
            rules=[rule.id for rule in hydration.rules],
            round=round_,
            model_source=model_source,
        )

    return announce


def reviewed(round_: int) -> Callable[[ReviewOutput], Announcement]:
    def announce(output: ReviewOutput) -> Announcement:
        review = output.review
        return EventName.CRITIC_VERDICT, ev.CriticVerdictPayload(
            verdict=review.verdict.value, issues=review.issues, round=round_
        )

    return announce


def planned(output: PlanOutput) -> Announcement:
    return EventName.PLAN_CREATED, ev.PlanPayload(**output.plan.model_dump())


def prepared(rules: Sequence[Rule]) -> Callable[[PrepareOutput], Announcement]:
    def announce(output: PrepareOutput) -> Announcement:
        return EventName.CHECKS_PREPARED, ev.ChecksPreparedPayload(
            checks=len(output.checks),
            rules=[rule.id for rule in rules],
            started_at=output.timing.started_at,
            finished_at=output.timing.finished_at,
        )

    return announce


def prepared_without_activity(
    rules: Sequence[Rule], checks: Sequence[PreparedCheck], *, reused: bool
) -> Announcement:
    """PREPARE without a model: the checks an earlier iteration made from the same rules
    (`reused`), or the rules' own concrete checks."""
    payload = ev.ChecksPreparedPayload(
        checks=len(checks), rules=[rule.id for rule in rules], reused=reused
    )
    return EventName.CHECKS_PREPARED, payload


def evaluated(
    evaluation: Evaluation, outputs: Sequence[EvaluateGroupOutput], reused: int = 0
) -> Payload:
    return ev.EvaluationPayload(
        reused=reused,
        score=evaluation.score,
        passed=evaluation.passed,
        threshold=evaluation.threshold,
        failed=evaluation.failed_blockers,
        warnings=evaluation.failed_warnings,
        unchecked=evaluation.unchecked,
        groups={
            output.group.value: GroupTiming(
                checks=len(output.results),
                started_at=output.timing.started_at,
                finished_at=output.timing.finished_at,
            )
            for output in outputs
        },
    )


def audited(output: AuditOutput) -> Announcement:
    audit = output.audit
    return EventName.AUDIT_VERDICT, ev.AuditPayload(
        verdict=audit.verdict.value,
        reason=audit.reason,
        violations=audit.violations,
        report=output.report,
        report_commit=output.commit,
    )


def verified(output: QAOutput, judged: Judgement = ACCEPTED) -> Announcement:
    """QA's verdict as it gave it, the evidence it cited, and whether the verdict stood
    on it (docs/loop.md#qas-evidence)."""
    report = output.report
    return EventName.QA_VERDICT, ev.QAPayload(
        verdict=report.verdict.value,
        issues=report.issues,
        summary=report.summary,
        turns=output.turns,
        commands=output.commands,
        evidence=report.evidence,
        accepted=judged.accepted,
        rejected=judged.reason,
    )


def critiqued(output: CritiqueOutput) -> Announcement:
    return EventName.CRITIQUE_DONE, ev.CritiquePayload(issues=output.critique.issues)


def reflected(output: ReflectOutput) -> Announcement:
    return EventName.REFLECTION_DONE, ev.ReflectionPayload(
        reflection=output.reflection.model_dump(mode="json"),
        outcome=output.insights.outcome,
        commit=output.commit,
    )
