"""Results of EVALUATE, and the distance-to-success block a run that ran out of iterations
carries (docs/loop.md#distance-to-success)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from loopworks.schemas.rules import Phase, Severity


class CheckResult(BaseModel):
    rule_id: str
    passed: bool
    detail: str = ""
    # A command check's exit code (None: another kind, a timeout, or a result recorded
    # before results carried it).
    exit_code: int | None = None


class RuleResult(BaseModel):
    rule_id: str
    severity: Severity
    weight: float
    passed: bool
    detail: str = ""


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


class DistanceToSuccess(BaseModel):
    phase: Phase
    threshold: float
    score: float
    gap: float = Field(ge=0)
    failed_blocker_count: int
    blocking_rule_ids: list[str]
    passed_rules: int
    total_rules: int
