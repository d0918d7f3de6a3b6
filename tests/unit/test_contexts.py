"""Role contexts (`schemas/contexts.py`): what an activity sends is what the model reads.

An activity builds its role's context model; the model layer gets its JSON and renders it
as labelled sections, each input once; the offline model validates that JSON with the
same model. A key renamed, dropped or added on one side fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from loopworks.activities.deps import StepDeps
from loopworks.activities.model_calls import for_role
from loopworks.llm.base import NO_INPUTS, section_title, user_prompt
from loopworks.llm.offline.answers import default_answer
from loopworks.llm.offline.model import OfflineModels
from loopworks.prompts.catalog import load_agents, load_templates
from loopworks.schemas.contexts import (
    CONTEXTS,
    OPERATOR_NOTE,
    TASK_PLANNER_FILES_CAP,
    AcceptedFile,
    ArtifactCriticContext,
    CriticContext,
    CustodietContext,
    EvaluatorContext,
    HydratorContext,
    PlannerContext,
    PreparerContext,
    ProducerContext,
    QAVerifierContext,
    Question,
    RefinerContext,
    ReflectorContext,
    RoleContext,
    SkillCuratorContext,
    SkillGeneratorContext,
    SkillReflectorContext,
    TaskCuratorContext,
    TaskPlannerContext,
)
from loopworks.schemas.curation import HelperReview, HelperVerdict, helper_path
from loopworks.schemas.evaluation import Evaluation, RuleResult
from loopworks.schemas.playbook import ItemKind, PlaybookItem
from loopworks.schemas.roles import Critique, Hydration, Issue, IterationPlan, Role
from loopworks.schemas.rules import Phase, Rule, Severity, normalise_rules
from loopworks.schemas.run import RunStatus, StopReason
from loopworks.schemas.settings import Settings
from loopworks.schemas.steps import ModelStep
from loopworks.workspace.git import GitWorkspaces
from tests.fakes.sections import context_from_sections

pytestmark = pytest.mark.unit

TASK = "Write a rollback guide"
RULES = normalise_rules(
    [
        Rule(id="has-title", description="Starts with a title", check="Has it a title?"),
        Rule(id="short", description="Is short", severity=Severity.WARN, check="Is it short?"),
    ]
)
EVALUATION = Evaluation(
    phase=Phase.A,
    threshold=0.8,
    score=0.5,
    passed=False,
    results=[
        RuleResult(rule_id="has-title", severity=Severity.FAIL, weight=2.0, passed=False),
        RuleResult(rule_id="short", severity=Severity.WARN, weight=1.0, passed=True),
    ],
)
HYDRATION = Hydration(
    template="minor-edit",
    intent="A rollback guide",
    plan=["Draft", "Verify"],
    acceptance_criteria=["Has a title"],
    rules=RULES,
)
PLAN = IterationPlan(focus="first draft", steps=["Draft it"])
CRITIQUE = Critique(issues=[Issue(rule_id="has-title", problem="no title", fix="add one")])
ITEMS = [
    PlaybookItem(
        id="pb-1-1",
        kind=ItemKind.CONSTRAINT,
        section="testing",
        content="Run the tests with make test.",
        helpful=2,
        sources=["run-1"],
        created_in=1,
        updated_in=2,
    ),
    PlaybookItem(
        id="pb-2-1",
        kind=ItemKind.SKILL,
        section="skills",
        content="Helper `.loops/skills/count_words.py` counts words.",
        created_in=2,
        updated_in=2,
    ),
]
HELPER = helper_path("count_words")
NOTE = ".loops/references/rollback.md"

# One context per role, as its activity builds it; fields that may be None are, somewhere.
SAMPLES: dict[Role, RoleContext] = {
    Role.HYDRATOR: HydratorContext(
        task=TASK,
        template=None,
        suggested_template="minor-edit",
        template_steps=["Draft", "Verify"],
        templates={"minor-edit": "Minor edit"},
        user_rules=RULES,
        feedback=[],
        playbook_items=ITEMS,
    ),
    Role.CRITIC: CriticContext(task=TASK, hydration=HYDRATION),
    Role.PLANNER: PlannerContext(
        task=TASK,
        intent=HYDRATION.intent,
        acceptance_criteria=HYDRATION.acceptance_criteria,
        iteration=2,
        last_evaluation=EVALUATION,
    ),
    Role.PRODUCER: ProducerContext(
        task=TASK,
        intent=HYDRATION.intent,
        acceptance_criteria=HYDRATION.acceptance_criteria,
        rules=RULES,
        plan=PLAN,
        current_artifact=None,
    ),
    Role.REFINER: RefinerContext(task=TASK, critique=CRITIQUE, current_artifact="# Guide\n"),
    Role.PREPARER: PreparerContext(task=TASK, rules=RULES),
    Role.EVALUATOR: EvaluatorContext(
        task=TASK,
        questions=[Question(rule_id="has-title", question="Has it a title?")],
        artifact="",
    ),
    Role.ARTIFACT_CRITIC: ArtifactCriticContext(
        task=TASK, artifact="# Guide\n", evaluation=EVALUATION, rules=RULES
    ),
    Role.CUSTODIET: CustodietContext(
        task=TASK, intent=HYDRATION.intent, plan_focus=PLAN.focus, evaluation=None
    ),
    Role.QA_VERIFIER: QAVerifierContext(
        task=TASK,
        intent=HYDRATION.intent,
        acceptance_criteria=HYDRATION.acceptance_criteria,
        artifact="# Guide\n",
        evaluation=EVALUATION,
    ),
    Role.REFLECTOR: ReflectorContext(
        task=TASK,
        stop_reason=StopReason.ITERATION_LIMIT,
        status=RunStatus.STOPPED,
        iteration=3,
        last_score=0.5,
        guidance=["critic: PROCEED"],
        acceptance_criteria=HYDRATION.acceptance_criteria,
        playbook_items=ITEMS,
    ),
    Role.TASK_PLANNER: TaskPlannerContext.listing(TASK, ["docs/rollback.md", "README.md"]),
    Role.TASK_CURATOR: TaskCuratorContext(
        task=TASK,
        outcome="success",
        summary="The guide was written and verified.",
        friction_points=[],
        proposed_changes=["none needed"],
        acceptance_criteria=HYDRATION.acceptance_criteria,
        playbook_items=ITEMS,
    ),
    Role.SKILL_GENERATOR: SkillGeneratorContext.asking(
        task=TASK,
        curator_summary="Counting words was done by hand.",
        helper_paths=[HELPER],
        reference_requests=["how a rollback is run"],
        reference_paths=[NOTE],
        existing_skills=ITEMS[1:],
    ),
    Role.SKILL_REFLECTOR: SkillReflectorContext(
        task=TASK,
        helper_paths=[HELPER],
        reference_paths=[NOTE],
        files={HELPER: "print('hi')\n", NOTE: "# Rollback\n"},
        generator_summary="Wrote a helper and a note.",
    ),
    Role.SKILL_CURATOR: SkillCuratorContext(
        task=TASK,
        accepted=[
            AcceptedFile(
                review=HelperReview(
                    path=HELPER,
                    verdict=HelperVerdict.ACCEPT,
                    check_command=f"python3 {HELPER} --self-test",
                ),
                content="print('hi')\n",
                check_output="self-test passed",
            )
        ],
        playbook_items=[],
    ),
}
ROLES = list(SAMPLES)


def headings(prompt: str) -> list[str]:
    return re.findall(r"^## (.+)$", prompt, flags=re.MULTILINE)


def with_note(context: RoleContext) -> RoleContext:
    return context.model_copy(update={"operator_note": "Keep it short."})


def test_every_role_has_a_context_model_and_a_sample() -> None:
    assert set(CONTEXTS) == set(SAMPLES) == set(Role)
    for role, context in SAMPLES.items():
        assert type(context) is CONTEXTS[role]


@pytest.mark.parametrize("role", ROLES, ids=str)
@pytest.mark.parametrize("note", [False, True], ids=["no-note", "note"])
def test_context_round_trips_through_the_prompts_sections(role: Role, note: bool) -> None:
    """What the fakes of the Messages API read back from the sections is what was sent
    (a None or empty field has no section and reads back as its default)."""
    context = with_note(SAMPLES[role]) if note else SAMPLES[role]
    sent = context.model_dump(mode="json")
    read = context_from_sections(user_prompt(sent), role)
    assert read == sent
    assert CONTEXTS[role].model_validate(read) == context
    assert default_answer(role, read) == default_answer(role, sent)


def test_each_input_is_sent_once() -> None:
    """No second copy of the inputs (a JSON fence did that until 2026-11): a real model's
    input tokens are paid for once."""
    tasked = [role for role in ROLES if "task" in CONTEXTS[role].model_fields]
    assert len(tasked) > len(ROLES) / 2
    for role in tasked:
        sent = SAMPLES[role].model_dump(mode="json")
        assert user_prompt(sent).count(sent["task"]) == 1, role


def test_a_step_without_inputs_still_sends_a_message() -> None:
    assert user_prompt({}) == user_prompt({"note": None}) == NO_INPUTS


@pytest.mark.parametrize("role", ROLES, ids=str)
def test_sections_follow_the_fields_and_the_note_comes_last(role: Role) -> None:
    context = with_note(SAMPLES[role])
    sent = context.model_dump(mode="json")
    fields = [name for name in CONTEXTS[role].model_fields if name != OPERATOR_NOTE]
    # Every field is sent, a None as null (the JSON is exact); the note is the last key.
    assert list(sent) == [*fields, OPERATOR_NOTE]
    # A section is rendered for every field with something in it, in field order.
    shown = [section_title(name) for name in fields if sent[name] not in (None, [], {}, "")]
    assert headings(user_prompt(sent)) == [*shown, "Operator Note"]


def test_without_a_note_there_is_no_note_key() -> None:
    sent = SAMPLES[Role.PLANNER].model_dump(mode="json")
    assert OPERATOR_NOTE not in sent
    assert "Operator Note" not in user_prompt(sent)


def test_the_planners_context_is_the_json_it_always_was() -> None:
    # The keys, their order and their JSON, as the planner's activity sent them as a dict.
    assert SAMPLES[Role.PLANNER].model_dump(mode="json") == {
        "task": TASK,
        "intent": HYDRATION.intent,
        "acceptance_criteria": HYDRATION.acceptance_criteria,
        "iteration": 2,
        "last_evaluation": EVALUATION.model_dump(mode="json"),
    }
    reflector = SAMPLES[Role.REFLECTOR].model_dump(mode="json")
    assert (reflector["stop_reason"], reflector["status"]) == ("iteration_limit", "stopped")


def test_the_task_planners_file_list_is_capped_with_a_note() -> None:
    small = SAMPLES[Role.TASK_PLANNER]
    assert isinstance(small, TaskPlannerContext)
    assert (small.files, small.files_note) == (["README.md", "docs/rollback.md"], None)
    deep = [f"src/pkg/module_{n:04d}.py" for n in range(TASK_PLANNER_FILES_CAP)]
    cut = TaskPlannerContext.listing(TASK, [*deep, "README.md", "src/main.py", "README.md"])
    # The shallowest paths are kept, so the layout shows; the note says how many are not.
    assert len(cut.files) == TASK_PLANNER_FILES_CAP
    assert {"README.md", "src/main.py"} <= set(cut.files) and cut.files == sorted(cut.files)
    assert cut.files_note is not None and cut.files_note.startswith(
        f"2 of the repository's {TASK_PLANNER_FILES_CAP + 2} files are not listed"
    )
    assert "## Files Note" in user_prompt(cut.model_dump(mode="json"))


# --- the offline model reads through the same models -------------------------------------


REQUIRED = [
    (role, name)
    for role in ROLES
    for name, field in CONTEXTS[role].model_fields.items()
    if field.is_required()
]


def test_every_context_requires_its_task() -> None:
    # The task planner's task is a whole goal, which its tasks split.
    assert {role for role, name in REQUIRED if name in ("task", "goal")} == set(Role)
    assert (Role.TASK_PLANNER, "goal") in REQUIRED


@pytest.mark.parametrize(("role", "field"), REQUIRED, ids=[f"{r}-{f}" for r, f in REQUIRED])
def test_offline_model_refuses_a_context_missing_a_required_field(role: Role, field: str) -> None:
    sent = SAMPLES[role].model_dump(mode="json")
    del sent[field]
    with pytest.raises(ValidationError) as raised:
        default_answer(role, sent)
    [error] = raised.value.errors()
    assert (error["type"], error["loc"]) == ("missing", (field,))


def test_offline_model_refuses_a_renamed_key_even_of_a_field_that_may_be_missing() -> None:
    sent = SAMPLES[Role.PLANNER].model_dump(mode="json")
    sent["previous_evaluation"] = sent.pop("last_evaluation")
    with pytest.raises(ValidationError) as raised:
        default_answer(Role.PLANNER, sent)
    assert [e["type"] for e in raised.value.errors()] == ["extra_forbidden"]


def test_offline_model_refuses_another_roles_context() -> None:
    with pytest.raises(ValidationError):
        default_answer(Role.CUSTODIET, SAMPLES[Role.QA_VERIFIER].model_dump(mode="json"))


# --- for_role: the one place a context becomes a call ---------------------------


def deps(tmp_path: Path) -> StepDeps:
    return StepDeps(
        settings=Settings(),
        models=OfflineModels(),
        agents=load_agents(),
        templates=load_templates(),
        workspaces=GitWorkspaces(tmp_path, author_name="t", author_email="t@localhost"),
    )


def test_for_role_sends_the_contexts_json_with_the_operators_note_last(tmp_path: Path) -> None:
    context = SAMPLES[Role.CUSTODIET]
    step = ModelStep(run_id="r", operator_note="The block was a false alarm.")
    _, call = for_role(deps(tmp_path), Role.CUSTODIET, step, context)
    assert call.context == {
        **context.model_dump(mode="json"),
        OPERATOR_NOTE: "The block was a false alarm.",
    }
    assert list(call.context)[-1] == OPERATOR_NOTE
    _, plain = for_role(deps(tmp_path), Role.CUSTODIET, ModelStep(run_id="r"), context)
    assert plain.context == context.model_dump(mode="json")


def test_for_role_refuses_another_roles_context(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="custodiet takes a CustodietContext"):
        for_role(deps(tmp_path), Role.CUSTODIET, ModelStep(run_id="r"), SAMPLES[Role.PLANNER])
