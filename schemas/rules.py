"""Evaluation rules (seed 001's RULE-SCHEMA) and the concrete checks PREPARE makes of them."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, Field, field_validator, model_validator


class Severity(StrEnum):
    FAIL = "fail"
    WARN = "warn"
    INFO = "info"


class Phase(StrEnum):
    A = "A"
    B = "B"


# Seed 001: "if template shorthand omitted weight, derive from severity".
DEFAULT_WEIGHT: dict[Severity, float] = {Severity.FAIL: 2.0, Severity.WARN: 1.0, Severity.INFO: 0.0}


class CommandCheck(BaseModel):
    """A shell command run in the workspace; passes when it exits with `expect_exit`."""

    kind: Literal["command"] = "command"
    command: str = Field(min_length=1)
    timeout_seconds: float = Field(default=60.0, gt=0, le=3600)
    expect_exit: int = 0


class PatternCheck(BaseModel):
    """A regular expression that must (or must not) match a file of the workspace."""

    kind: Literal["pattern"] = "pattern"
    pattern: str = Field(min_length=1)
    must_match: bool = True
    path: str = "artifact.md"
    # A line that satisfies the pattern: lets a critic suggest a concrete fix.
    example: str | None = None

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from exc
        return value


class JudgeCheck(BaseModel):
    """A yes/no question an evaluator model answers about the artifact."""

    kind: Literal["llm"] = "llm"
    question: str = Field(min_length=1)


Check = Annotated[CommandCheck | PatternCheck | JudgeCheck, Field(discriminator="kind")]


class Rule(BaseModel):
    """One evaluation rule, always in full form once normalised.

    `check` is either a concrete check or a sentence describing one; PREPARE
    turns sentences into concrete checks.
    """

    id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    description: str = Field(min_length=1)
    severity: Severity = Severity.FAIL
    weight: float | None = Field(default=None, ge=0)
    phase: Phase = Phase.A
    check: Check | str

    @model_validator(mode="after")
    def _derive_weight(self) -> Rule:
        if self.weight is None:
            self.weight = DEFAULT_WEIGHT[self.severity]
        return self

    @property
    def effective_weight(self) -> float:
        return self.weight if self.weight is not None else DEFAULT_WEIGHT[self.severity]


def normalise_rules(rules: list[Rule]) -> list[Rule]:
    """Rules in full RULE-SCHEMA form, ids unique (seed 001 Step 2 normalisation)."""
    seen: set[str] = set()
    for rule in rules:
        if rule.id in seen:
            raise ValueError(f"duplicate rule id {rule.id!r}")
        seen.add(rule.id)
    return [rule.model_copy(update={"weight": rule.effective_weight}) for rule in rules]


class PreparedCheck(BaseModel):
    """A rule made concrete by PREPARE."""

    rule_id: str
    check: Check


class CheckGroup(StrEnum):
    """Independent groups EVALUATE runs in parallel (seed 001: exec, content, judgement)."""

    EXEC = "exec"
    CONTENT = "content"
    JUDGE = "judge"


def group_of(check: CommandCheck | PatternCheck | JudgeCheck) -> CheckGroup:
    if isinstance(check, CommandCheck):
        return CheckGroup.EXEC
    if isinstance(check, PatternCheck):
        return CheckGroup.CONTENT
    return CheckGroup.JUDGE
