"""Results of EVALUATE, and the distance-to-success block a run that ran out of iterations
carries (docs/loop.md#distance-to-success)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from loopworks.schemas.rules import Phase, Severity

# A check the evaluation's check budget left undecided: it counts as failed, and the
# evaluation names it (docs/loop.md#bounded-checks).
UNCHECKED = "not checked: the evaluation's check budget was spent"


class CheckResult(BaseModel):
    rule_id: str
    passed: bool
    detail: str = ""
    unchecked: bool = Field(default=False, description=UNCHECKED)
    # A command check's exit code (None: another kind, a timeout, or a result recorded
    # before results carried it).
    exit_code: int | None = None


class RuleResult(BaseModel):
    rule_id: str
    severity: Severity
    weight: float
    passed: bool
    detail: str = ""
    unchecked: bool = Field(default=False, description=UNCHECKED)


class Evaluation(BaseModel):
    phase: Phase
    threshold: float
    score: float = Field(ge=0, le=1)
    passed: bool
    results: list[RuleResult]

    @property
    def failed_blockers(self) -> list[str]:
        return [r.rule_id for r in self.results if not r.passed and r.severity == Severity.FAIL]

    @property
    def failed_warnings(self) -> list[str]:
        return [r.rule_id for r in self.results if not r.passed and r.severity != Severity.FAIL]

    @property
    def unchecked(self) -> list[str]:
        return [r.rule_id for r in self.results if r.unchecked]


class DistanceToSuccess(BaseModel):
    phase: Phase
    threshold: float
    score: float
    gap: float = Field(ge=0)
    failed_blocker_count: int
    blocking_rule_ids: list[str]
    passed_rules: int
    total_rules: int
