"""What a person steering a run reads beside its progress (docs/loop.md#steering-a-run):
the iteration's plan, the latest evaluation rule by rule, each reviewer's latest verdict
and the gate the run waits at. Part of the run's state (`RunState`), so `GET /runs/{id}`,
`loops status` and `.loops/run.json` all show it.

Every field has a default: a run recorded before these existed replays and reads as
"nothing yet". Texts are capped (`DETAIL_CAP`): the state is queried often and carried
through continue-as-new, and the full results are in the run's events and branch.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field

from loopworks.schemas.evaluation import UNCHECKED, Evaluation
from loopworks.schemas.roles import (
    Audit,
    AuditVerdict,
    CriticReview,
    CriticVerdict,
    Critique,
    IterationPlan,
    QAReport,
    QAVerdict,
)
from loopworks.schemas.rules import Phase, Severity

# A rule's detail, an issue's text or a verdict's reason, shown up to this many characters.
DETAIL_CAP = 1_000


def _cap(text: str) -> str:
    return text if len(text) <= DETAIL_CAP else text[: DETAIL_CAP - 1] + "…"


class PlanView(BaseModel):
    """The latest iteration plan (the PLAN step)."""

    iteration: int
    focus: str
    steps: list[str] = Field(default_factory=list)

    @classmethod
    def of(cls, plan: IterationPlan, iteration: int) -> PlanView:
        return cls(iteration=iteration, focus=_cap(plan.focus), steps=[_cap(s) for s in plan.steps])


class RuleOutcome(BaseModel):
    """One rule's result in the latest evaluation."""

    id: str
    severity: Severity
    passed: bool
    detail: str = ""
    unchecked: bool = Field(default=False, description=UNCHECKED)


class EvaluationView(BaseModel):
    """The latest EVALUATE: its score against the phase's threshold, and every rule."""

    iteration: int
    phase: Phase
    score: float
    threshold: float
    passed: bool
    rules: list[RuleOutcome] = Field(default_factory=list)

    @classmethod
    def of(cls, evaluation: Evaluation, iteration: int) -> EvaluationView:
        rules = [
            RuleOutcome(
                id=r.rule_id,
                severity=r.severity,
                passed=r.passed,
                detail=_cap(r.detail),
                unchecked=r.unchecked,
            )
            for r in evaluation.results
        ]
        return cls(
            iteration=iteration,
            phase=evaluation.phase,
            score=evaluation.score,
            threshold=evaluation.threshold,
            passed=evaluation.passed,
            rules=rules,
        )


class IssueView(BaseModel):
    rule_id: str
    problem: str
    fix: str


class CriticView(BaseModel):
    """The critic's latest review of the hydrated plan (before any work)."""

    verdict: CriticVerdict
    issues: list[str] = Field(default_factory=list)
    feedback: str = ""

    @classmethod
    def of(cls, review: CriticReview) -> CriticView:
        return cls(
            verdict=review.verdict,
            issues=[_cap(i) for i in review.issues],
            feedback=_cap(review.feedback),
        )


class CritiqueView(BaseModel):
    """The artifact critic's latest critique: the issues the refiner was given."""

    iteration: int
    issues: list[IssueView] = Field(default_factory=list)

    @classmethod
    def of(cls, critique: Critique, iteration: int) -> CritiqueView:
        issues = [
            IssueView(rule_id=i.rule_id, problem=_cap(i.problem), fix=_cap(i.fix))
            for i in critique.issues
        ]
        return cls(iteration=iteration, issues=issues)


class AuditView(BaseModel):
    """The custodiet's latest audit."""

    iteration: int
    verdict: AuditVerdict
    reason: str = ""

    @classmethod
    def of(cls, audit: Audit, iteration: int) -> AuditView:
        return cls(iteration=iteration, verdict=audit.verdict, reason=_cap(audit.reason))


class QAView(BaseModel):
    """The QA verifier's latest report."""

    iteration: int
    verdict: QAVerdict
    summary: str = ""
    issues: list[IssueView] = Field(default_factory=list)

    @classmethod
    def of(cls, report: QAReport, iteration: int) -> QAView:
        issues = [
            IssueView(rule_id=i.rule_id, problem=_cap(i.problem), fix=_cap(i.fix))
            for i in report.issues
        ]
        return cls(
            iteration=iteration, verdict=report.verdict, summary=_cap(report.summary), issues=issues
        )


class Verdicts(BaseModel):
    """Each reviewer's latest word on the run; None until it has spoken."""

    critic: CriticView | None = None
    artifact_critic: CritiqueView | None = None
    custodiet: AuditView | None = None
    qa: QAView | None = None


class Gate(StrEnum):
    """What holds a run before its next step, and what releases it."""

    APPROVAL = "approval"  # interactive mode: POST /runs/{id}/approve
    BLOCK = "block"  # a custodiet BLOCK: POST /runs/{id}/clear-block
    PAUSE = "pause"  # paused: POST /runs/{id}/resume


# The route that releases each gate (relative to the run's URL) and the CLI command.
RELEASES: dict[Gate, tuple[str, str]] = {
    Gate.APPROVAL: ("approve", "loops approve"),
    Gate.BLOCK: ("clear-block", "loops clear-block"),
    Gate.PAUSE: ("resume", "loops resume"),
}


class GateView(BaseModel):
    """The gate the run waits at now, since when, and the route that releases it."""

    kind: Gate
    since: str = ""
    release: str = Field(default="", description="the run's route that releases it")
