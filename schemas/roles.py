"""What each model role answers: every answer is validated against one of these models."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field

from schemas.rules import CommandCheck, JudgeCheck, PatternCheck, Rule


class Role(StrEnum):
    HYDRATOR = "hydrator"
    CRITIC = "critic"
    PLANNER = "planner"
    PRODUCER = "producer"
    PREPARER = "preparer"
    EVALUATOR = "evaluator"
    ARTIFACT_CRITIC = "artifact-critic"
    REFINER = "refiner"
    CUSTODIET = "custodiet"
    QA_VERIFIER = "qa-verifier"
    REFLECTOR = "reflector"


class CriticVerdict(StrEnum):
    PROCEED = "PROCEED"
    REVISE = "REVISE"
    HALT = "HALT"


class AuditVerdict(StrEnum):
    OK = "OK"
    BLOCK = "BLOCK"


class QAVerdict(StrEnum):
    VERIFIED = "VERIFIED"
    ISSUES = "ISSUES"


class Hydration(BaseModel):
    """Prompt hydrator (seed 000): template, plan, acceptance criteria, draft rules."""

    template: str = Field(min_length=1)
    intent: str = Field(min_length=1)
    plan: list[str] = Field(min_length=1)
    acceptance_criteria: list[str] = Field(min_length=1)
    rules: list[Rule] = Field(default_factory=list)


class CriticReview(BaseModel):
    verdict: CriticVerdict
    issues: list[str] = Field(default_factory=list)
    feedback: str = ""


class IterationPlan(BaseModel):
    focus: str = Field(min_length=1)
    steps: list[str] = Field(min_length=1)


class FileWrite(BaseModel):
    path: str = Field(min_length=1)
    content: str


class Draft(BaseModel):
    """A producer's or refiner's answer: files to write and a note on what changed."""

    files: list[FileWrite] = Field(min_length=1)
    changed: list[str] = Field(default_factory=list)
    summary: str = ""


class PreparedCheckAnswer(BaseModel):
    rule_id: str
    check: CommandCheck | PatternCheck | JudgeCheck = Field(discriminator="kind")


class Preparation(BaseModel):
    checks: list[PreparedCheckAnswer]


class Judgement(BaseModel):
    passed: bool
    reason: str = ""


class Issue(BaseModel):
    rule_id: str
    problem: str = Field(min_length=1)
    fix: str = Field(min_length=1)
    # Text that, added to the artifact, fixes the issue: optional, concrete.
    suggested_text: str | None = None


class Critique(BaseModel):
    issues: list[Issue] = Field(min_length=1)


class Audit(BaseModel):
    verdict: AuditVerdict
    reason: str = ""
    violations: list[str] = Field(default_factory=list)


class QAReport(BaseModel):
    verdict: QAVerdict
    issues: list[Issue] = Field(default_factory=list)
    summary: str = ""


class ReflectionAnswer(BaseModel):
    """The reflector's answer: the Framework Reflection's judgement fields."""

    outcome: str = Field(pattern="^(success|partial|failure)$")
    followed: str = Field(min_length=1)
    accomplishment: str = ""
    root_cause: str | None = None
    proposed_change: str = "none needed"
    summary: str = Field(min_length=1)
    accomplishments: list[str] = Field(default_factory=list)
    friction_points: list[str] = Field(default_factory=list)
    proposed_changes: list[str] = Field(default_factory=list)
