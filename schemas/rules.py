"""Evaluation rules (docs/loop.md#rules-and-checks) and the concrete checks PREPARE makes of
them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

from loopworks.schemas.patterns import PATTERN_MAX_CHARS, UnsupportedPattern, check_pattern


class Severity(StrEnum):
    FAIL = "fail"
    WARN = "warn"
    INFO = "info"


class Phase(StrEnum):
    A = "A"
    B = "B"


class RuleOwner(StrEnum):
    """Who a rule belongs to: the run's (given, drafted, edited), or the orchestrator's own,
    the run's proof (schemas/proof.py), which no model and no edit of the rules may change."""

    RUN = "run"
    ORCHESTRATOR = "orchestrator"


# A rule that sets no weight weighs by its severity (docs/loop.md#scoring).
DEFAULT_WEIGHT: dict[Severity, float] = {Severity.FAIL: 2.0, Severity.WARN: 1.0, Severity.INFO: 0.0}
# The most a rule may weigh: a score is a ratio of sums of weights, which a weight near the
# largest float would make infinite over infinite, no score at all.
MAX_WEIGHT = 100.0


# What a rule id may hold; any other id is slugified by `normalise_rule_id`.
RULE_ID_PATTERN = r"^[A-Za-z0-9_.\-]+$"
_RULE_ID = re.compile(RULE_ID_PATTERN)
_NOT_ID = re.compile(r"[^a-z0-9_.\-]+")
RULE_ID_MAX = 64


def normalise_rule_id(value: str) -> str:
    """A rule id as the code keeps it: an id of letters, digits, `_`, `.` and `-` unchanged,
    anything else slugified ("Rule 1" -> "rule-1"): lowercased, each run of other characters
    turned into one `-`, leading and trailing `-` stripped.

    Models invent ids; a near miss is normalised rather than failing the step. A slug
    longer than `RULE_ID_MAX` is cut there (a model that wrote a sentence for an id meant
    a label; a clash after the cut is still caught as a duplicate). Raises ValueError when
    nothing usable is left.
    """
    if _RULE_ID.match(value):
        return value
    slug = _NOT_ID.sub("-", value.lower()).strip("-")[:RULE_ID_MAX].strip("-")
    if not slug:
        raise ValueError(f"{value!r} is not a rule id: it has no letter, digit, '_' or '.'")
    return slug


def _kind_required(schema: dict[str, Any]) -> None:
    """`kind` is what tells the checks apart: a model must always give it, so the schema a
    model reads lists it as required, though Python callers may leave it to its default."""
    required = schema.setdefault("required", [])
    if "kind" not in required:
        required.insert(0, "kind")


# Every concrete check's model config: see `_kind_required`.
CHECK_CONFIG = ConfigDict(json_schema_extra=_kind_required)


def rule_id_before(value: object) -> object:
    """The "before" validator of every rule id field: strings normalised, anything else
    left to the field's own type error."""
    return normalise_rule_id(value) if isinstance(value, str) else value


class CommandCheck(BaseModel):
    """A shell command run in the workspace; passes when it exits with `expect_exit`."""

    model_config = CHECK_CONFIG

    kind: Literal["command"] = Field(
        default="command",
        description="`command`: a shell command run in the workspace decides the check.",
    )
    command: str = Field(
        min_length=1,
        description=(
            "A bash command run from the workspace root with no input and a scrubbed "
            "environment (no credentials); the check passes when it exits with "
            "`expect_exit`. It must be non-interactive, deterministic, quick and need no "
            "network."
        ),
    )
    timeout_seconds: float = Field(
        default=60.0,
        gt=0,
        le=3600,
        description="Seconds after which the command and everything it started are killed "
        "and the check fails.",
    )
    expect_exit: int = Field(
        default=0, description="The exit code that makes the check pass (usually 0)."
    )


class PatternCheck(BaseModel):
    """A regular expression that must (or must not) match a file of the workspace."""

    model_config = CHECK_CONFIG

    kind: Literal["pattern"] = Field(
        default="pattern",
        description="`pattern`: a regular expression searched in a file of the workspace "
        "decides the check.",
    )
    pattern: str = Field(
        min_length=1,
        max_length=PATTERN_MAX_CHARS,
        description="A regular expression in RE2 syntax (Python's, without backreferences "
        "or lookaround), searched anywhere in the file's whole text with `^` and `$` "
        "matching at every line.",
    )
    must_match: bool = Field(
        default=True,
        description="true: the check passes when the pattern is found; false: it passes "
        "when the pattern is not found.",
    )
    path: str = Field(
        default="artifact.md",
        description="The file searched, relative to the workspace root; a missing file "
        "fails the check.",
    )
    # A line that satisfies the pattern: lets a critic suggest a concrete fix.
    example: str | None = Field(
        default=None,
        description="A line that would match the pattern; when the check fails, its result "
        "quotes it so the critic and the refiner can make a concrete fix.",
    )

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        # RE2, as the check will run it: a pattern it cannot run is refused here (a 422
        # for a client's rules, a repair for a model's) rather than at evaluation.
        try:
            return check_pattern(value, multiline=True)
        except UnsupportedPattern as exc:
            raise ValueError(f"not a valid regular expression for the checks: {exc}") from exc


class JudgeCheck(BaseModel):
    """A yes/no question an evaluator model answers about the artifact."""

    model_config = CHECK_CONFIG

    kind: Literal["llm"] = Field(
        default="llm",
        description="`llm`: the evaluator model answers a yes/no question about the artifact.",
    )
    question: str = Field(
        min_length=1,
        description="One yes/no question about the artifact, where yes means the rule passes.",
    )


Check = Annotated[CommandCheck | PatternCheck | JudgeCheck, Field(discriminator="kind")]


class Rule(BaseModel):
    """One evaluation rule, always in full form once normalised.

    `check` is either a concrete check or a sentence describing one; PREPARE
    turns sentences into concrete checks.
    """

    id: str = Field(
        min_length=1,
        max_length=64,
        pattern=RULE_ID_PATTERN,
        description="The rule's unique id: letters, digits, `_`, `.` and `-` (any other "
        "character becomes `-`). Checks, evaluation results and issues name the rule by it.",
    )
    description: str = Field(min_length=1, description="What the rule requires, in one sentence.")
    severity: Severity = Field(
        default=Severity.FAIL,
        description="`fail`: a must-have; an evaluation in which a `fail` rule failed does "
        "not pass, whatever its score. `warn`: a should-have. `info`: a nice-to-have, "
        "weighing nothing by default.",
    )
    weight: float | None = Field(
        default=None,
        ge=0,
        le=MAX_WEIGHT,
        description="The rule's share of the score (score = weight of the passed active "
        "rules / weight of all active rules), at most 100. Null derives it from severity: "
        "`fail` 2, `warn` 1, `info` 0.",
    )
    phase: Phase = Field(
        default=Phase.A,
        description="`A`: an essential, evaluated from the first iteration. `B`: polish, "
        "evaluated only once the artifact passes phase `A`.",
    )
    check: Check | str = Field(
        description="How the rule is checked: a concrete check (its `kind` is `command`, "
        "`pattern` or `llm`), or one sentence describing a check, which PREPARE turns into "
        "a concrete one."
    )

    # Not in the schemas models answer with: a model never sets it, and a rule that claims
    # the orchestrator is made the run's (`workflows/proof.py`, `with_proof`).
    owner: SkipJsonSchema[RuleOwner] = RuleOwner.RUN

    _normalise_id = field_validator("id", mode="before")(rule_id_before)

    @model_validator(mode="after")
    def _derive_weight(self) -> Rule:
        if self.weight is None:
            self.weight = DEFAULT_WEIGHT[self.severity]
        return self

    @property
    def effective_weight(self) -> float:
        return self.weight if self.weight is not None else DEFAULT_WEIGHT[self.severity]


def normalise_rules(rules: list[Rule]) -> list[Rule]:
    """Rules in full form (every weight set, from severity when a rule gave none), ids unique:
    the rules a run keeps after hydration or an approval."""
    seen: set[str] = set()
    for rule in rules:
        if rule.id in seen:
            raise ValueError(f"duplicate rule id {rule.id!r}")
        seen.add(rule.id)
    return [rule.model_copy(update={"weight": rule.effective_weight}) for rule in rules]


class PreparedCheck(BaseModel):
    """A rule made concrete by PREPARE."""

    rule_id: str = Field(description="The id of the rule this check decides.")
    check: Check = Field(description="The concrete check.")

    _normalise_rule_id = field_validator("rule_id", mode="before")(rule_id_before)


def concrete_checks(rules: Sequence[Rule]) -> list[PreparedCheck]:
    """The checks of the rules that carry a concrete one: PREPARE asks a model only for
    the rules that describe theirs in a sentence (`described_rules`)."""
    return [
        PreparedCheck(rule_id=rule.id, check=rule.check)
        for rule in rules
        if not isinstance(rule.check, str)
    ]


def described_rules(rules: Sequence[Rule]) -> list[Rule]:
    """The rules whose check is a sentence, for PREPARE's model to make concrete."""
    return [rule for rule in rules if isinstance(rule.check, str)]


class CheckGroup(StrEnum):
    """Independent groups EVALUATE runs in parallel: executable checks in a clone of their
    own, and content rules read from the commit's files (docs/loop.md#rules-and-checks)."""

    EXEC = "exec"
    CONTENT = "content"


def group_of(check: CommandCheck | PatternCheck | JudgeCheck) -> CheckGroup:
    """Commands need a working clone of their own; patterns and judgements only read the
    commit's files, so they are one group."""
    if isinstance(check, CommandCheck):
        return CheckGroup.EXEC
    return CheckGroup.CONTENT
