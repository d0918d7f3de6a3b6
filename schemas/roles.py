"""What each model role answers: every answer is validated against one of these models."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator

from loopworks.schemas.curation import CuratorPayload, ItemTag, SkillCuration, SkillReview
from loopworks.schemas.rules import CommandCheck, JudgeCheck, PatternCheck, Rule, rule_id_before
from loopworks.schemas.tasks import Task


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
    # Splits a goal into a graph of atomic tasks (docs/graphs.md); each task runs as a child
    # loop.
    TASK_PLANNER = "task-planner"
    # The delta playbook (docs/playbook.md): the task curator, and the skill sub-loop's three.
    TASK_CURATOR = "task-curator"
    SKILL_GENERATOR = "skill-generator"
    SKILL_REFLECTOR = "skill-reflector"
    SKILL_CURATOR = "skill-curator"


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
    """The hydrator's answer: the task as a template, a plan, acceptance criteria and draft
    rules."""

    template: str = Field(
        min_length=1,
        description="The id of the workflow template the work follows, one of the available "
        "templates. An unknown id is replaced by the suggested template, and a template the "
        "user chose is kept whatever this says.",
    )
    intent: str = Field(
        min_length=1,
        description="One or two sentences: what must exist or be true when the work is done. "
        "The planner, producer, custodiet and QA verifier work from it.",
    )
    plan: list[str] = Field(
        min_length=1,
        description="The template's steps made specific to this task: short imperative "
        "steps, in order. The critic reviews them.",
    )
    acceptance_criteria: list[str] = Field(
        min_length=1,
        description="Observable criteria someone who did not do the work can check. The "
        "planner and producer aim at them and the QA verifier checks every one.",
    )
    rules: list[Rule] = Field(
        min_length=1,
        description="The evaluation rules the work is scored by, at least one, ids unique. "
        "When the user supplied rules they replace these.",
    )


class CriticReview(BaseModel):
    """The critic's review of a hydration, before any work starts."""

    verdict: CriticVerdict = Field(
        description="`PROCEED`: the work starts on this plan. `REVISE`: the hydrator redoes "
        "the hydration with `issues` and `feedback` (a bounded number of times; past that, "
        "`REVISE` halts the run). `HALT`: the run ends as halted and nothing is done."
    )
    issues: list[str] = Field(
        default_factory=list,
        description="Each problem found, in one precise sentence. On `REVISE` the hydrator "
        "gets them; every verdict records them in the run's events.",
    )
    feedback: str = Field(
        default="",
        description="On `REVISE`: what the hydrator must change. On `HALT`: why, which "
        "becomes the run's stop message. On `PROCEED`: minor notes, if any, kept in the "
        "run's guidance.",
    )


class IterationPlan(BaseModel):
    """The plan of one iteration (the PLAN step)."""

    focus: str = Field(
        min_length=1,
        description="One sentence naming what this iteration must achieve; the run shows it "
        "as the iteration's plan and the custodiet audits against it.",
    )
    steps: list[str] = Field(
        min_length=1,
        description="Short, concrete, imperative steps, in order; the producer carries them out.",
    )


class FileWrite(BaseModel):
    path: str = Field(min_length=1)
    content: str


class Draft(BaseModel):
    """The offline agent's draft for PRODUCE and REFINE: the files it writes with its tools
    and a note on what changed (a real model writes through the tools itself)."""

    files: list[FileWrite] = Field(min_length=1)
    changed: list[str] = Field(default_factory=list)
    summary: str = ""


class PreparedCheckAnswer(BaseModel):
    rule_id: str = Field(
        description="The id of the rule this check decides, exactly as given in the rules."
    )
    check: CommandCheck | PatternCheck | JudgeCheck = Field(
        discriminator="kind",
        description="The concrete check; its `kind` (`command`, `pattern` or `llm`) says "
        "which fields it has. EVALUATE runs it against the artifact.",
    )

    _normalise_rule_id = field_validator("rule_id", mode="before")(rule_id_before)


class Preparation(BaseModel):
    """PREPARE's answer: one concrete check per rule it was given."""

    checks: list[PreparedCheckAnswer] = Field(
        description="Exactly one check per rule given: a rule left without a check, or a "
        "check for a rule that was not given, fails the step."
    )


class RuleJudgement(BaseModel):
    """The evaluator's answer to one question of its group."""

    passed: bool = Field(
        description="true only when the artifact clearly and fully satisfies the question; "
        "the rule passes or fails with it."
    )
    reason: str = Field(
        description="The evidence in one or two sentences: the exact part of the artifact, "
        "or what is missing. It becomes the rule's result detail, which the critic reads."
    )


def judgements_model(questions: Mapping[str, str]) -> type[BaseModel]:
    """The evaluator's answer for one evaluation group: one required property per
    question, named by the question's rule id, each a `RuleJudgement`.

    The rule ids are a closed set known only per call, so they become the schema's
    property names: a model cannot leave a question out, answer it twice or misname its
    rule without the answer failing validation (and being repaired).

    The same questions give the same class: a later iteration asks them again (PREPARE's
    checks are reused), and the model layer keeps one agent, and its schema, per class.
    """
    return _judgements_model(tuple(questions.items()))


@functools.lru_cache(maxsize=256)
def _judgements_model(questions: tuple[tuple[str, str], ...]) -> type[BaseModel]:
    fields: dict[str, Any] = {
        f"q{number}": (
            RuleJudgement,
            Field(alias=rule_id, description=f"Rule `{rule_id}`: {question}"),
        )
        for number, (rule_id, question) in enumerate(questions)
    }
    return create_model(
        "Judgements",
        __doc__="The evaluator's answer: every question of the group, by its rule id.",
        __config__=ConfigDict(extra="forbid"),
        **fields,
    )


def judgements_of(answer: BaseModel) -> dict[str, RuleJudgement]:
    """A `judgements_model` answer as {rule id: judgement}."""
    return {
        field.alias or name: getattr(answer, name)
        for name, field in type(answer).model_fields.items()
    }


# What the evaluator's schema looks like, for contract tests (see `judgements_model`).
SAMPLE_JUDGEMENTS = judgements_model({"has-title": "Does the artifact start with a title?"})


class Issue(BaseModel):
    """A precise problem with a concrete fix: what the refiner applies."""

    rule_id: str = Field(
        description="The id of the rule the issue concerns, exactly as given; the QA "
        "verifier writes `qa` for a problem that no rule covers."
    )
    problem: str = Field(
        min_length=1,
        description="What is wrong, located precisely: file, section, line or quoted text.",
    )
    fix: str = Field(
        min_length=1,
        description="One concrete instruction that removes the problem: an edit, not "
        "advice. The refiner applies it.",
    )
    # Text that, added to the artifact, fixes the issue: optional, concrete.
    suggested_text: str | None = Field(
        default=None,
        description="When adding text fixes the issue, the exact text to add; otherwise "
        "null. The refiner uses it unless it is wrong.",
    )

    _normalise_rule_id = field_validator("rule_id", mode="before")(rule_id_before)


class Critique(BaseModel):
    """CRITIQUE's answer, after a failed evaluation."""

    issues: list[Issue] = Field(
        min_length=1,
        description="The issues behind the failed rules, `fail` rules first, then `warn`; "
        "at least one. The refiner gets them all.",
    )


class Audit(BaseModel):
    """The custodiet's audit of the run so far, which may block it."""

    verdict: AuditVerdict = Field(
        description="`OK`: the run goes on. `BLOCK`: the run stops, status blocked, until a "
        "person clears the block."
    )
    reason: str = Field(
        default="",
        description="One or two sentences: on `BLOCK` the block's reason, shown to the "
        "person who must clear it; on `OK` why the work is in order.",
    )
    violations: list[str] = Field(
        default_factory=list,
        description="On `BLOCK`, each violation in one sentence naming its evidence; empty "
        "on `OK`.",
    )


class QAReport(BaseModel):
    """The QA verifier's report, before the run may complete."""

    verdict: QAVerdict = Field(
        description="`VERIFIED`: the run completes. `ISSUES`: the refiner gets `issues` for "
        "another round while iterations remain; otherwise the run ends rejected by QA."
    )
    issues: list[Issue] = Field(
        default_factory=list,
        description="On `ISSUES`, each problem with its fix; empty on `VERIFIED`.",
    )
    summary: str = Field(
        default="",
        description="One or two sentences on the state of the work; the run's stop message "
        "when QA rejects it.",
    )
    evidence: list[str] = Field(
        default_factory=list,
        max_length=20,
        description="The commands that support the verdict, each exactly as you ran it with "
        "`run_command` in this step and each of which exited 0. The run checks them against "
        "the commands you really ran: a `VERIFIED` on work that changed code is not accepted "
        "without one, nor with a command you did not run or that failed.",
    )


class ReflectionAnswer(BaseModel):
    """The reflector's answer: the Framework Reflection's judgement fields."""

    outcome: Literal["success", "partial", "failure"] = Field(
        description="`success`: the task was done and verified. `partial`: some of it was "
        "done. `failure`: nothing usable came of it. Judged on the evidence, not on what "
        "the run hoped; it is the reflection's and the insights' outcome."
    )
    followed: str = Field(
        min_length=1,
        description="Yes, No or Partial, then what of the hydrated plan and the guidance "
        "was followed or skipped.",
    )
    accomplishment: str = Field(default="", description="What was accomplished, if anything.")
    root_cause: str | None = Field(
        default=None,
        description="When the outcome is not `success`: which component failed (a role, "
        "or the run's settings such as thresholds or the iteration limit) and how. Null on "
        "`success`.",
    )
    proposed_change: str = Field(
        default="none needed",
        description='One specific improvement to the framework, or "none needed".',
    )
    summary: str = Field(
        min_length=1, description="One sentence describing the run, for the session insights."
    )
    accomplishments: list[str] = Field(
        default_factory=list, description="What was accomplished: short items, one fact each."
    )
    friction_points: list[str] = Field(
        default_factory=list,
        description="What slowed or derailed the run: short items, one fact each.",
    )
    proposed_changes: list[str] = Field(
        default_factory=list,
        description="Improvements to the framework: short items, one each.",
    )
    playbook_tags: list[ItemTag] = Field(
        default_factory=list,
        description="One tag per item of **Playbook Items**, by its id; empty when the "
        "run was given none.",
    )


class TaskPlan(BaseModel):
    """The task planner's answer: the goal as a graph of atomic tasks."""

    tasks: list[Task] = Field(
        min_length=1,
        description="Every task of the graph, each one atomic and with its own verification "
        "command; `requires` names only ids of these tasks, without cycles. Tasks whose "
        "requirements are completed run at the same time, each as its own loop, unless they "
        "share a file of `context.files`. An invalid graph is sent back once with every "
        "problem found, then the planning step fails.",
    )


# What each role answers with: the input schema of its forced answer tool. PRODUCER,
# REFINER and SKILL_GENERATOR have none: they work in the workspace with tools and end
# with a plain-text reply.
ANSWER_MODELS: dict[Role, type[BaseModel] | None] = {
    Role.HYDRATOR: Hydration,
    Role.CRITIC: CriticReview,
    Role.PLANNER: IterationPlan,
    Role.PRODUCER: None,
    Role.PREPARER: Preparation,
    Role.EVALUATOR: SAMPLE_JUDGEMENTS,
    Role.ARTIFACT_CRITIC: Critique,
    Role.REFINER: None,
    Role.CUSTODIET: Audit,
    Role.QA_VERIFIER: QAReport,
    Role.REFLECTOR: ReflectionAnswer,
    Role.TASK_PLANNER: TaskPlan,
    Role.TASK_CURATOR: CuratorPayload,
    Role.SKILL_GENERATOR: None,
    Role.SKILL_REFLECTOR: SkillReview,
    Role.SKILL_CURATOR: SkillCuration,
}
