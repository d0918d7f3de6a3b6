"""The offline model: schema-valid defaults for every role, scripts, latency, and the demo path.

Contexts are built the way the activities in `activities/*.py` build them (their role's
context model, `schemas/contexts.py`) and reach the model as the JSON the activity sends,
so a default answer that stops fitting what an activity sends fails here first. The
defaults are checked as `default_answer` gives them and as `OfflineModels` answers them
through `ask` (the path every structured step takes) or, for the agents, through
`run_agent`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from loopworks.agent.actions import commands_run
from loopworks.agent.loop import run_agent, run_answering_agent
from loopworks.agent.trajectory import AgentStep
from loopworks.checks.runner import run_command_check, run_pattern_check
from loopworks.llm.base import InvalidOutput, ModelCall
from loopworks.llm.offline.answers import QA_CHECK, closing_line, default_answer, draft_files
from loopworks.llm.offline.model import OfflineModels, OfflineScript, ScriptEntry
from loopworks.llm.structured import ask
from loopworks.prompts.catalog import choose_template, load_templates
from loopworks.schemas.contexts import (
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
from loopworks.schemas.curation import (
    CuratorPayload,
    HelperReview,
    HelperVerdict,
    SkillCuration,
    SkillReview,
    helper_path,
)
from loopworks.schemas.evaluation import CheckResult, Evaluation
from loopworks.schemas.playbook import ItemKind, PlaybookItem
from loopworks.schemas.proof import ProofSource, RunProof
from loopworks.schemas.roles import (
    ANSWER_MODELS,
    Audit,
    AuditVerdict,
    CriticReview,
    CriticVerdict,
    Critique,
    Draft,
    Hydration,
    Issue,
    IterationPlan,
    Preparation,
    QAReport,
    QAVerdict,
    ReflectionAnswer,
    Role,
    TaskPlan,
    judgements_model,
    judgements_of,
)
from loopworks.schemas.rules import (
    CommandCheck,
    JudgeCheck,
    PatternCheck,
    Phase,
    Rule,
    normalise_rules,
)
from loopworks.schemas.run import RunStatus, StopReason, Thresholds
from loopworks.schemas.steps import ARTIFACT_PATH
from loopworks.workflows.decisions import Next, active_rules, decide, score_results

pytestmark = pytest.mark.unit

# The answer type each activity validates its role's answer as; for the agents (PRODUCE,
# REFINE) the draft the offline model writes through the workspace tools.
ANSWER_TYPES: dict[Role, type[BaseModel]] = {
    Role.HYDRATOR: Hydration,  # hydration.hydrate
    Role.CRITIC: CriticReview,  # hydration.review_plan
    Role.PLANNER: IterationPlan,  # production.plan_iteration
    Role.PRODUCER: Draft,  # production.produce_artifact (an agent)
    Role.REFINER: Draft,  # production.refine_artifact (an agent)
    Role.PREPARER: Preparation,  # preparation.prepare_checks
    # evaluation.evaluate_group (llm checks, one call a group): the schema is built per
    # call from the group's questions (see `answer_type`); this one is a sample.
    Role.EVALUATOR: ANSWER_MODELS[Role.EVALUATOR],  # type: ignore[dict-item]
    Role.ARTIFACT_CRITIC: Critique,  # critique.critique_artifact
    Role.CUSTODIET: Audit,  # audit.audit_run
    Role.QA_VERIFIER: QAReport,  # qa.verify_result
    Role.REFLECTOR: ReflectionAnswer,  # reflection.reflect_on_run
    Role.TASK_PLANNER: TaskPlan,  # planning.plan_graph
    Role.TASK_CURATOR: CuratorPayload,  # the task curator, after reflection
    Role.SKILL_GENERATOR: Draft,  # the skill sub-loop's generator (an agent)
    Role.SKILL_REFLECTOR: SkillReview,
    Role.SKILL_CURATOR: SkillCuration,
}
AGENT_ROLES = {role for role, model in ANSWER_MODELS.items() if model is None}


def answer_type(role: Role, context: RoleContext) -> type[BaseModel]:
    """What the role's step validates the answer for `context` as."""
    if isinstance(context, EvaluatorContext):
        return judgements_model({q.rule_id: q.question for q in context.questions})
    return ANSWER_TYPES[role]


def answer(role: Role, context: RoleContext) -> dict[str, Any]:
    """The default answer to `context` as the activity sends it: its JSON."""
    return default_answer(role, context.model_dump(mode="json"))


INSTRUCTIONS = "You are the role's agent."

TASK = "Write a migration guide for upgrading the billing service to Postgres 16"
THRESHOLDS = Thresholds()


def model_call(role: Role, context: RoleContext, call_index: int = 1) -> ModelCall:
    """A call as `activities.model_calls.consult` makes it."""
    return ModelCall(
        role=role,
        run_id="run-1",
        call_index=call_index,
        iteration=1,
        model="offline",
        context=context.model_dump(mode="json"),
    )


# --- realistic contexts, one or more per role ----------------------------------------------

TEMPLATES = load_templates()

USER_RULES = normalise_rules(
    [
        Rule(
            id="has-title",
            description="Starts with a title",
            check=PatternCheck(pattern=r"^# \S", example="# Guide"),
        ),
        Rule(
            id="tests-pass",
            description="The test suite passes",
            check=CommandCheck(command="pytest -q"),
        ),
        Rule(
            id="has-summary",
            description="Has a summary",
            severity="warn",
            check=PatternCheck(pattern=r"^## Summary", example="## Summary"),
        ),
        Rule(
            id="clear",
            description="Reads clearly",
            severity="info",
            phase="B",
            check="Is the guide clear to an on-call engineer?",
        ),
    ]
)

FAILED_EVALUATION = score_results(
    USER_RULES,
    [
        CheckResult(rule_id="has-title", passed=True, detail="matched line 1"),
        CheckResult(rule_id="tests-pass", passed=False, detail="exit code 1 (expected 0)"),
        CheckResult(rule_id="has-summary", passed=False, detail="pattern not found"),
    ],
    Phase.A,
    THRESHOLDS,
)
WARN_ONLY_EVALUATION = score_results(
    USER_RULES,
    [
        CheckResult(rule_id="has-title", passed=True),
        CheckResult(rule_id="tests-pass", passed=True),
        CheckResult(rule_id="has-summary", passed=False, detail="pattern not found"),
    ],
    Phase.A,
    THRESHOLDS,
)
PASSED_EVALUATION = score_results(
    USER_RULES,
    [CheckResult(rule_id=r.id, passed=True) for r in USER_RULES],
    Phase.B,
    THRESHOLDS,
)
HYDRATION = Hydration(
    template="minor-edit",
    intent="A migration guide for the billing service",
    plan=["Understand the task", "Produce", "Verify"],
    acceptance_criteria=["Has a title", "Covers rollback"],
    rules=USER_RULES,
)
PLAN = IterationPlan(focus="first complete draft", steps=["Draft every section"])
ARTIFACT = "# Billing migration\n\n## Summary\n\nUpgrade billing to Postgres 16.\n"
CRITIQUE = Critique(
    issues=[
        Issue(
            rule_id="has-summary",
            problem="pattern not found",
            fix="Add a summary",
            suggested_text="## Summary\n\nWhat changes.",
        )
    ]
)


def hydrate_context(task: str, user_rules: list[Rule], feedback: list[str]) -> HydratorContext:
    # activities/hydration.py: HydrationActivities.hydrate
    suggested = choose_template(task, TEMPLATES)
    return HydratorContext(
        task=task,
        template=None,
        suggested_template=suggested,
        template_steps=[s.name for s in TEMPLATES[suggested].steps],
        templates={t.id: t.title for t in TEMPLATES.values()},
        user_rules=user_rules,
        feedback=feedback,
    )


def plan_context(last: Evaluation | None) -> PlannerContext:
    # activities/production.py: plan_iteration
    return PlannerContext(
        task=TASK,
        intent=HYDRATION.intent,
        acceptance_criteria=HYDRATION.acceptance_criteria,
        iteration=2 if last else 1,
        last_evaluation=last,
    )


def produce_context(current: str | None) -> ProducerContext:
    # activities/production.py: produce_artifact, then _write sets current_artifact
    return ProducerContext(
        task=TASK,
        intent=HYDRATION.intent,
        acceptance_criteria=HYDRATION.acceptance_criteria,
        rules=active_rules(USER_RULES, Phase.A),
        plan=PLAN,
        current_artifact=current,
    )


def refine_context(current: str | None) -> RefinerContext:
    # activities/production.py: refine_artifact, then _write sets current_artifact
    return RefinerContext(task=TASK, critique=CRITIQUE, current_artifact=current)


def prepare_context() -> PreparerContext:
    # activities/preparation.py: only rules whose check is a sentence reach the model
    return PreparerContext(task=TASK, rules=[r for r in USER_RULES if isinstance(r.check, str)])


JUDGE_QUESTIONS = [
    Question(rule_id="clear", question="Is the guide clear?"),
    Question(rule_id="covers-rollback", question="Does it say how to roll back?"),
]


def judge_context(artifact: str) -> EvaluatorContext:
    # activities/evaluation.py: evaluate_group, every JudgeCheck of the group in one call
    return EvaluatorContext(task=TASK, questions=JUDGE_QUESTIONS, artifact=artifact)


def critique_context(evaluation: Evaluation) -> ArtifactCriticContext:
    # activities/critique.py: critique_artifact
    return ArtifactCriticContext(
        task=TASK,
        artifact=ARTIFACT,
        evaluation=evaluation,
        rules=active_rules(USER_RULES, evaluation.phase),
    )


def review_context() -> CriticContext:
    # activities/hydration.py: review_plan
    return CriticContext(task=TASK, hydration=HYDRATION)


def audit_context() -> CustodietContext:
    # activities/audit.py: audit_run
    return CustodietContext(
        task=TASK, intent=HYDRATION.intent, plan_focus=PLAN.focus, evaluation=FAILED_EVALUATION
    )


def qa_context(evaluation: Evaluation | None) -> QAVerifierContext:
    # activities/qa.py: verify_result
    return QAVerifierContext(
        task=TASK,
        intent=HYDRATION.intent,
        acceptance_criteria=HYDRATION.acceptance_criteria,
        artifact=ARTIFACT,
        evaluation=evaluation,
    )


ITEMS = [
    PlaybookItem(
        id="pb-1-1",
        kind=ItemKind.CONSTRAINT,
        section="testing",
        content="Run the tests with make test.",
        created_in=1,
        updated_in=1,
    ),
    PlaybookItem(
        id="pb-2-1",
        kind=ItemKind.REFERENCE,
        section="references",
        content="The schema lives in billing/db.py.",
        created_in=2,
        updated_in=2,
    ),
]


def reflect_context(
    reason: StopReason | None,
    status: RunStatus,
    score: float,
    items: list[PlaybookItem] | None = None,
) -> ReflectorContext:
    # activities/reflection.py: reflect_on_run
    return ReflectorContext(
        task=TASK,
        stop_reason=reason,
        status=status,
        iteration=3,
        last_score=score,
        guidance=["critic: PROCEED The plan covers the task."],
        acceptance_criteria=HYDRATION.acceptance_criteria,
        playbook_items=items or [],
    )


SKILL_TASK = f"{TASK} [skill:count_words] [reference:how a rollback is run]"
HELPER = helper_path("count_words")
NOTE = ".loops/references/how-a-rollback-is-run.md"


def curate_task_context(task: str, outcome: str) -> TaskCuratorContext:
    # after reflection: the task curator reads the reflection and the playbook
    return TaskCuratorContext(
        task=task,
        outcome=outcome,
        summary="Run ended with threshold_reached after 1 iteration(s)",
        friction_points=[],
        proposed_changes=[],
        acceptance_criteria=HYDRATION.acceptance_criteria,
        playbook_items=ITEMS,
    )


def generate_skills_context() -> SkillGeneratorContext:
    return SkillGeneratorContext.asking(
        task=SKILL_TASK,
        curator_summary="asked for a helper and a note",
        helper_paths=[HELPER],
        reference_requests=["how a rollback is run"],
        reference_paths=[NOTE],
        existing_skills=[],
    )


def review_skills_context() -> SkillReflectorContext:
    return SkillReflectorContext(
        task=SKILL_TASK,
        helper_paths=[HELPER],
        reference_paths=[NOTE],
        files={HELPER: "import sys\n", NOTE: "# Rollback\n", ".loops/references/empty.md": ""},
        generator_summary="Wrote 1 helper(s) and 1 reference note(s)",
    )


def curate_skills_context() -> SkillCuratorContext:
    command = f"python3 {HELPER} --self-test"
    return SkillCuratorContext(
        task=SKILL_TASK,
        accepted=[
            AcceptedFile(
                review=HelperReview(
                    path=HELPER, verdict=HelperVerdict.ACCEPT, check_command=command
                ),
                content='"""count_words: count words."""\n',
                check_output="self-test passed",
            ),
            AcceptedFile(
                review=HelperReview(path=NOTE, verdict=HelperVerdict.ACCEPT),
                content="# How a rollback is run\n",
            ),
        ],
        playbook_items=ITEMS,
    )


def plan_graph_context(goal: str) -> TaskPlannerContext:
    # activities/planning.py: plan_graph
    return TaskPlannerContext.listing(goal, ["README.md", "billing/db.py"], "main")


CASES: list[tuple[str, Role, RoleContext]] = [
    ("hydrate-draft-rules", Role.HYDRATOR, hydrate_context(TASK, [], [])),
    ("hydrate-user-rules", Role.HYDRATOR, hydrate_context(TASK, USER_RULES, [])),
    ("hydrate-feedback", Role.HYDRATOR, hydrate_context("fix it", [], ["too vague", "add tests"])),
    ("review", Role.CRITIC, review_context()),
    ("plan-first", Role.PLANNER, plan_context(None)),
    ("plan-after-failure", Role.PLANNER, plan_context(FAILED_EVALUATION)),
    ("plan-after-pass", Role.PLANNER, plan_context(PASSED_EVALUATION)),
    ("produce-first", Role.PRODUCER, produce_context(None)),
    ("produce-existing", Role.PRODUCER, produce_context(ARTIFACT)),
    ("prepare", Role.PREPARER, prepare_context()),
    ("judge", Role.EVALUATOR, judge_context(ARTIFACT)),
    ("judge-empty", Role.EVALUATOR, judge_context("")),
    ("critique-failed", Role.ARTIFACT_CRITIC, critique_context(FAILED_EVALUATION)),
    ("critique-nothing-failed", Role.ARTIFACT_CRITIC, critique_context(PASSED_EVALUATION)),
    ("refine", Role.REFINER, refine_context(ARTIFACT)),
    ("refine-no-artifact", Role.REFINER, refine_context(None)),
    ("audit", Role.CUSTODIET, audit_context()),
    ("qa-blockers", Role.QA_VERIFIER, qa_context(FAILED_EVALUATION)),
    ("qa-warnings", Role.QA_VERIFIER, qa_context(WARN_ONLY_EVALUATION)),
    ("qa-no-evaluation", Role.QA_VERIFIER, qa_context(None)),
    (
        "reflect-success",
        Role.REFLECTOR,
        reflect_context(StopReason.THRESHOLD_REACHED, RunStatus.COMPLETED, 0.95),
    ),
    (
        "reflect-limit",
        Role.REFLECTOR,
        reflect_context(StopReason.ITERATION_LIMIT, RunStatus.STOPPED, 0.6),
    ),
    (
        "reflect-halt",
        Role.REFLECTOR,
        reflect_context(StopReason.CRITIC_HALT, RunStatus.HALTED, 0.0),
    ),
    ("reflect-no-reason", Role.REFLECTOR, reflect_context(None, RunStatus.FAILED, 0.0)),
    ("plan-graph", Role.TASK_PLANNER, plan_graph_context(TASK)),
    ("plan-graph-long", Role.TASK_PLANNER, plan_graph_context(f"{TASK}. Cover rollback.")),
    (
        "reflect-tags",
        Role.REFLECTOR,
        reflect_context(StopReason.THRESHOLD_REACHED, RunStatus.COMPLETED, 0.95, ITEMS),
    ),
    ("curate-task-success", Role.TASK_CURATOR, curate_task_context(SKILL_TASK, "success")),
    ("curate-task-failure", Role.TASK_CURATOR, curate_task_context(TASK, "failure")),
    ("generate-skills", Role.SKILL_GENERATOR, generate_skills_context()),
    ("review-skills", Role.SKILL_REFLECTOR, review_skills_context()),
    ("curate-skills", Role.SKILL_CURATOR, curate_skills_context()),
]


STRUCTURED_CASES = [c for c in CASES if c[1] not in AGENT_ROLES]
AGENT_CASES = [c for c in CASES if c[1] in AGENT_ROLES]


def test_every_role_has_a_case_and_an_answer_type() -> None:
    assert {role for _, role, _ in CASES} == set(Role)
    assert set(ANSWER_TYPES) == set(ANSWER_MODELS) == set(Role)
    assert {Role.PRODUCER, Role.REFINER, Role.SKILL_GENERATOR} == AGENT_ROLES
    for role, model in ANSWER_MODELS.items():
        assert model is None or ANSWER_TYPES[role] is model


@pytest.mark.parametrize(("role", "context"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_default_answer_validates_for_every_role(role: Role, context: RoleContext) -> None:
    answer_type(role, context).model_validate(answer(role, context))


@pytest.mark.parametrize(
    ("role", "context"), [c[1:] for c in STRUCTURED_CASES], ids=[c[0] for c in STRUCTURED_CASES]
)
async def test_offline_models_answer_every_structured_role_through_ask(
    role: Role, context: RoleContext
) -> None:
    expected = answer_type(role, context)
    answered = await ask(OfflineModels(), model_call(role, context), INSTRUCTIONS, expected)
    assert answered.answer == expected.model_validate(answer(role, context))
    assert answered.repairs == []
    usage = answered.usage
    assert usage.calls == 1
    assert usage.input_tokens > 0
    assert usage.output_tokens > 0


@pytest.mark.parametrize(
    ("role", "context"), [c[1:] for c in AGENT_CASES], ids=[c[0] for c in AGENT_CASES]
)
async def test_offline_models_write_every_agents_draft_through_tools(
    role: Role, context: RoleContext, tmp_path: Path
) -> None:
    draft = answer(role, context)
    steps: dict[Role, AgentStep] = {Role.PRODUCER: "produce", Role.SKILL_GENERATOR: "skill"}
    step = steps.get(role, "refine")
    # The skill generator has no artifact to leave (activities/skills.py): its files are.
    deliverable = None if role == Role.SKILL_GENERATOR else ARTIFACT_PATH
    outcome = await run_agent(
        OfflineModels(), model_call(role, context), INSTRUCTIONS, tmp_path, 5, step, deliverable
    )
    refused = [r.output for r in outcome.records if r.kind == "tool_result" and not r.ok]
    assert outcome.files_written == [f["path"] for f in draft_files(draft)], refused
    for file in draft_files(draft):
        assert (tmp_path / file["path"]).read_text() == file["content"]
    assert outcome.final_text == closing_line(draft)
    assert outcome.repairs == [] and not outcome.limit_reached


# --- what the defaults say ------------------------------------------------------------------


async def ask_offline(role: Role, context: RoleContext, model: OfflineModels | None = None) -> Any:
    """The offline model's answer: through `ask` for a structured role, the draft the
    agent writes for PRODUCE and REFINE."""
    expected = answer_type(role, context)
    if role in AGENT_ROLES:
        return expected.model_validate(answer(role, context))
    answered = await ask(
        model or OfflineModels(), model_call(role, context), INSTRUCTIONS, expected
    )
    return answered.answer


async def test_hydrator_drafts_unique_rules_across_both_phases() -> None:
    hydration: Hydration = await ask_offline(Role.HYDRATOR, hydrate_context(TASK, [], []))
    rules = normalise_rules(hydration.rules)  # raises on duplicate ids
    assert {r.phase for r in rules} == {Phase.A, Phase.B}
    assert hydration.template in TEMPLATES
    assert "migration" in " ".join(hydration.acceptance_criteria)


async def test_hydrator_keeps_user_rules() -> None:
    hydration: Hydration = await ask_offline(Role.HYDRATOR, hydrate_context(TASK, USER_RULES, []))
    assert hydration.rules == USER_RULES


async def test_hydrator_addresses_critic_feedback() -> None:
    context = hydrate_context("fix it", [], ["too vague", "add tests"])
    hydration: Hydration = await ask_offline(Role.HYDRATOR, context)
    assert hydration.plan[-1] == "Address the critic's feedback: too vague; add tests"


async def test_planner_targets_failed_rules() -> None:
    plan: IterationPlan = await ask_offline(Role.PLANNER, plan_context(FAILED_EVALUATION))
    assert plan.focus == "fix tests-pass, has-summary"


async def test_producer_keeps_an_existing_artifact() -> None:
    draft: Draft = await ask_offline(Role.PRODUCER, produce_context(ARTIFACT))
    assert [(f.path, f.content) for f in draft.files] == [(ARTIFACT_PATH, ARTIFACT)]
    assert draft.changed == []


async def test_preparer_turns_sentences_into_judge_checks() -> None:
    preparation: Preparation = await ask_offline(Role.PREPARER, prepare_context())
    assert [c.rule_id for c in preparation.checks] == ["clear"]
    check = preparation.checks[0].check
    assert isinstance(check, JudgeCheck)
    assert check.question == "Is the guide clear to an on-call engineer?"


async def test_judge_answers_every_question_and_fails_an_empty_artifact() -> None:
    present = judgements_of(await ask_offline(Role.EVALUATOR, judge_context(ARTIFACT)))
    assert {rule: j.passed for rule, j in present.items()} == {
        "clear": True,
        "covers-rollback": True,
    }
    empty = judgements_of(await ask_offline(Role.EVALUATOR, judge_context("  \n")))
    assert {rule: j.passed for rule, j in empty.items()} == {
        "clear": False,
        "covers-rollback": False,
    }
    assert all(j.reason for j in empty.values())


async def test_critic_names_every_failed_rule() -> None:
    critique: Critique = await ask_offline(
        Role.ARTIFACT_CRITIC, critique_context(FAILED_EVALUATION)
    )
    assert [i.rule_id for i in critique.issues] == ["tests-pass", "has-summary"]
    by_rule = {i.rule_id: i for i in critique.issues}
    assert by_rule["has-summary"].suggested_text == "## Summary"  # the check's example
    assert by_rule["tests-pass"].suggested_text is None  # a command check has no example
    assert by_rule["tests-pass"].problem == "exit code 1 (expected 0)"


async def test_plan_critic_proceeds_and_custodiet_approves() -> None:
    review = await ask_offline(Role.CRITIC, review_context())
    assert review.verdict == CriticVerdict.PROCEED
    audit = await ask_offline(Role.CUSTODIET, audit_context())
    assert audit.verdict == AuditVerdict.OK


async def test_qa_verdict_follows_blockers() -> None:
    rejected: QAReport = await ask_offline(Role.QA_VERIFIER, qa_context(FAILED_EVALUATION))
    assert rejected.verdict == QAVerdict.ISSUES
    assert [i.rule_id for i in rejected.issues] == ["tests-pass"]
    warned: QAReport = await ask_offline(Role.QA_VERIFIER, qa_context(WARN_ONLY_EVALUATION))
    assert warned.verdict == QAVerdict.VERIFIED


@pytest.mark.parametrize(
    ("commands", "verdict"),
    [([], QAVerdict.VERIFIED), (["test -f calc.py"], QAVerdict.VERIFIED), (["false"], "ISSUES")],
)
async def test_the_offline_verifier_runs_what_it_cites_before_it_answers(
    commands: list[str], verdict: QAVerdict, tmp_path: Path
) -> None:
    """The offline QA verifier runs the run's proof (else a check of the deliverable) with
    the command tool, then cites those commands; one that fails turns it to ISSUES."""
    (tmp_path / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (tmp_path / ARTIFACT_PATH).write_text(ARTIFACT)
    proof = RunProof(source=ProofSource.REQUEST, commands=commands)
    context = qa_context(WARN_ONLY_EVALUATION).model_copy(update={"proof": proof})
    call = model_call(Role.QA_VERIFIER, context)
    outcome = await run_answering_agent(
        OfflineModels(), call, INSTRUCTIONS, tmp_path, 5, "qa", QAReport
    )
    cited = commands or [QA_CHECK]
    assert [c.command for c in commands_run(outcome.records)] == cited
    assert outcome.answer.verdict == verdict
    if verdict == QAVerdict.VERIFIED:
        assert outcome.answer.evidence == cited
    else:
        assert outcome.answer.evidence == [] and "fail: `false`" in outcome.answer.summary
        assert outcome.answer.issues[0].problem.startswith("`false` failed: exit code 1")


@pytest.mark.parametrize(
    ("reason", "score", "outcome"),
    [
        (StopReason.THRESHOLD_REACHED, 0.95, "success"),
        (StopReason.NO_MAJOR_ISSUES, 0.7, "success"),
        (StopReason.ITERATION_LIMIT, 0.6, "partial"),
        (StopReason.STAGNATION, 0.0, "failure"),
    ],
)
async def test_reflection_outcome(reason: StopReason, score: float, outcome: str) -> None:
    answer: ReflectionAnswer = await ask_offline(
        Role.REFLECTOR, reflect_context(reason, RunStatus.STOPPED, score)
    )
    assert answer.outcome == outcome
    assert (answer.root_cause is None) is (outcome == "success")


# --- determinism ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "context"), [c[1:] for c in STRUCTURED_CASES], ids=[c[0] for c in STRUCTURED_CASES]
)
async def test_same_call_gives_the_same_answer(role: Role, context: RoleContext) -> None:
    call = model_call(role, context)
    model = OfflineModels()
    expected = answer_type(role, context)
    first = await ask(model, call, INSTRUCTIONS, expected)
    second = await ask(model, call, INSTRUCTIONS, expected)
    other = await ask(OfflineModels(), call, INSTRUCTIONS, expected)
    assert first.answer == second.answer == other.answer
    assert first.usage == second.usage == other.usage


# --- scripts --------------------------------------------------------------------------------

REVIEW_CONTEXT = review_context()


async def ask_offline_call(
    model: OfflineModels, role: Role, context: RoleContext, call_index: int = 1
) -> Any:
    answered = await ask(
        model, model_call(role, context, call_index), INSTRUCTIONS, ANSWER_TYPES[role]
    )
    return answered.answer


async def test_script_entries_by_call_index_and_star() -> None:
    script = OfflineScript.model_validate(
        {
            "critic": {
                "1": {"answer": {"verdict": "REVISE", "issues": ["too vague"]}},
                "3": {"answer": {"verdict": "HALT", "feedback": "out of scope"}},
                "*": {"answer": {"verdict": "PROCEED", "feedback": "fine now"}},
            }
        }
    )
    model = OfflineModels(script=script)

    async def review(index: int) -> CriticReview:
        return await ask_offline_call(model, Role.CRITIC, REVIEW_CONTEXT, index)

    assert (await review(1)).verdict == CriticVerdict.REVISE
    assert (await review(1)).issues == ["too vague"]  # a retry of call 1 gets the same entry
    assert (await review(2)).feedback == "fine now"  # no entry of its own: `*`
    assert (await review(3)).verdict == CriticVerdict.HALT
    assert (await review(4)).verdict == CriticVerdict.PROCEED


async def test_unscripted_calls_and_roles_get_the_default() -> None:
    script = OfflineScript.model_validate({"critic": {"2": {"verdict": "HALT"}}})
    model = OfflineModels(script=script)
    first = await ask_offline_call(model, Role.CRITIC, REVIEW_CONTEXT, 1)
    second = await ask_offline_call(model, Role.CRITIC, REVIEW_CONTEXT, 2)
    assert first.verdict == CriticVerdict.PROCEED
    assert first.feedback == "The plan covers the task."
    assert second.verdict == CriticVerdict.HALT
    audit = await ask_offline_call(model, Role.CUSTODIET, audit_context(), 2)
    assert audit.verdict == AuditVerdict.OK


def test_bare_object_is_shorthand_for_an_answer() -> None:
    bare = ScriptEntry.model_validate({"verdict": "HALT", "feedback": "no"})
    assert bare.answer == {"verdict": "HALT", "feedback": "no"}
    assert bare.raw is None
    assert bare.delay_ms == 0
    full = ScriptEntry.model_validate({"answer": {"verdict": "HALT"}, "delay_ms": 5})
    assert full.answer == {"verdict": "HALT"}
    assert full.delay_ms == 5
    text = ScriptEntry.model_validate("not json at all")
    assert text.raw == "not json at all"
    assert text.answer is None


async def test_a_bare_object_is_the_answer_tools_input() -> None:
    script = OfflineScript.model_validate({"custodiet": {"*": {"verdict": "BLOCK", "reason": "x"}}})
    audit = await ask_offline_call(OfflineModels(script=script), Role.CUSTODIET, audit_context())
    assert audit == Audit(verdict=AuditVerdict.BLOCK, reason="x")


@pytest.mark.parametrize(
    "raw",
    [
        "I think the plan is fine.",
        "",
        '{"verdict": "MAYBE"}',  # JSON, but not a valid verdict
        '{"issues": []}',  # JSON, missing the verdict
        "[1, 2, 3]",
    ],
)
async def test_raw_invalid_text_every_time_raises_invalid_output(raw: str) -> None:
    # A single entry answers every request of the call: the repair is invalid too.
    script = OfflineScript.model_validate({"critic": {"1": {"raw": raw}}})
    with pytest.raises(InvalidOutput) as excinfo:
        await ask_offline_call(OfflineModels(script=script), Role.CRITIC, REVIEW_CONTEXT)
    assert excinfo.value.role == Role.CRITIC
    assert excinfo.value.detail
    assert str(excinfo.value).startswith("critic answered with invalid output")


@pytest.mark.parametrize(
    "raw",
    [
        '```json\n{"verdict": "HALT", "feedback": "out of scope"}\n```',
        '```\n{"verdict": "HALT", "feedback": "out of scope"}',  # cut off before it closed
    ],
    ids=["fenced", "unclosed"],
)
async def test_json_arguments_in_a_markdown_fence_are_read_as_the_json(raw: str) -> None:
    # Some compatible servers pass on the tool input as a model wrote it, fence and all.
    script = OfflineScript.model_validate({"critic": {"1": {"raw": raw}}})
    answered = await ask(
        OfflineModels(script=script),
        model_call(Role.CRITIC, REVIEW_CONTEXT),
        INSTRUCTIONS,
        CriticReview,
    )
    assert answered.answer == CriticReview(verdict=CriticVerdict.HALT, feedback="out of scope")
    assert answered.repairs == [] and answered.usage.calls == 1


async def test_raw_string_shorthand_raises_invalid_output() -> None:
    script = OfflineScript.model_validate({"planner": {"*": "no plan today"}})
    with pytest.raises(InvalidOutput):
        await ask_offline_call(OfflineModels(script=script), Role.PLANNER, plan_context(None))


async def test_a_list_entry_answers_each_request_of_the_call_in_turn() -> None:
    repaired = {"verdict": "HALT", "feedback": "out of scope"}
    script = OfflineScript.model_validate({"critic": {"1": ["not json", repaired]}})
    answered = await ask(
        OfflineModels(script=script),
        model_call(Role.CRITIC, REVIEW_CONTEXT),
        INSTRUCTIONS,
        CriticReview,
    )
    assert answered.answer == CriticReview(verdict=CriticVerdict.HALT, feedback="out of scope")
    [repair] = answered.repairs
    assert "Invalid JSON" in repair
    assert answered.usage.calls == 2


async def test_a_list_entry_of_two_invalid_answers_is_invalid_output() -> None:
    script = OfflineScript.model_validate({"critic": {"1": ["not json", {"verdict": "MAYBE"}]}})
    with pytest.raises(InvalidOutput, match="verdict"):
        await ask_offline_call(OfflineModels(script=script), Role.CRITIC, REVIEW_CONTEXT)


def test_the_last_answer_of_a_list_repeats() -> None:
    script = OfflineScript.model_validate(
        {"critic": {"1": ["first", {"verdict": "PROCEED"}], "*": {"verdict": "HALT"}}}
    )
    answers = [script.entry(Role.CRITIC, 1, attempt) for attempt in range(4)]
    assert [a.raw if a else None for a in answers] == ["first", None, None, None]
    assert [a.answer if a else None for a in answers[1:]] == [{"verdict": "PROCEED"}] * 3
    star = script.entry(Role.CRITIC, 2, 5)
    assert star is not None and star.answer == {"verdict": "HALT"}


def test_yaml_script_with_integer_keys_loads(tmp_path: Path) -> None:
    path = tmp_path / "script.yaml"
    path.write_text(
        """\
critic:
  1:
    verdict: REVISE
    issues: [too vague]
  2:
    raw: "not json"
    delay_ms: 10
  "*":
    verdict: PROCEED
artifact-critic:
  1: {answer: {issues: [{rule_id: r, problem: p, fix: f}]}}
"""
    )
    script = OfflineScript.load(path)
    first = script.entry(Role.CRITIC, 1)
    assert first is not None
    assert first.answer == {"verdict": "REVISE", "issues": ["too vague"]}
    second = script.entry(Role.CRITIC, 2)
    assert second is not None
    assert (second.raw, second.delay_ms) == ("not json", 10)
    fallback = script.entry(Role.CRITIC, 7)
    assert fallback is not None
    assert fallback.answer == {"verdict": "PROCEED"}
    critic_entry = script.entry(Role.ARTIFACT_CRITIC, 1)
    assert critic_entry is not None
    assert critic_entry.answer is not None
    assert script.entry(Role.ARTIFACT_CRITIC, 2) is None
    assert script.entry(Role.PLANNER, 1) is None


def test_empty_yaml_script_loads(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("")
    script = OfflineScript.load(path)
    assert all(script.entry(role, 1) is None for role in Role)


def test_script_rejects_unknown_roles(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("poet:\n  1: {verse: roses}\n")
    with pytest.raises(ValueError, match="poet"):
        OfflineScript.load(path)


async def test_yaml_script_drives_the_model(tmp_path: Path) -> None:
    path = tmp_path / "script.yaml"
    path.write_text("critic:\n  1: {verdict: HALT, feedback: out of scope}\n")
    model = OfflineModels(script=OfflineScript.load(path))
    review = await ask_offline_call(model, Role.CRITIC, REVIEW_CONTEXT, 1)
    assert (review.verdict, review.feedback) == (CriticVerdict.HALT, "out of scope")


def test_yaml_script_with_a_list_loads(tmp_path: Path) -> None:
    path = tmp_path / "script.yaml"
    path.write_text(
        """\
planner:
  1:
    - not json
    - {focus: a first draft, steps: [Draft it]}
producer:
  "*": [{raw: "No."}, {delay_ms: 5}]
"""
    )
    script = OfflineScript.load(path)
    first, second = (script.entry(Role.PLANNER, 1, attempt) for attempt in (0, 1))
    assert first is not None and first.raw == "not json"
    assert second is not None and second.answer == {"focus": "a first draft", "steps": ["Draft it"]}
    nudged = script.entry(Role.PRODUCER, 3, 1)
    # An entry without an answer or raw text: the default answer, after its delay.
    assert nudged is not None and (nudged.answer, nudged.raw, nudged.delay_ms) == (None, None, 5)


# --- latency --------------------------------------------------------------------------------

# asyncio may wake a timer up to its clock resolution early: allow a millisecond.
_EARLY = 0.001


async def test_latency_delays_every_answer() -> None:
    model = OfflineModels(latency_ms=200)
    started = time.monotonic()
    await ask_offline_call(model, Role.CRITIC, REVIEW_CONTEXT)
    assert time.monotonic() - started >= 0.2 - _EARLY


async def test_latency_delays_each_request_of_a_repaired_answer() -> None:
    script = OfflineScript.model_validate({"critic": {"1": ["nope", {"verdict": "PROCEED"}]}})
    model = OfflineModels(latency_ms=100, script=script)
    started = time.monotonic()
    await ask_offline_call(model, Role.CRITIC, REVIEW_CONTEXT)
    assert time.monotonic() - started >= 0.2 - _EARLY


async def test_script_delay_overrides_latency() -> None:
    script = OfflineScript.model_validate(
        {"critic": {"1": {"verdict": "PROCEED", "delay_ms": 150}}}
    )
    model = OfflineModels(latency_ms=0, script=script)
    started = time.monotonic()
    await ask_offline_call(model, Role.CRITIC, REVIEW_CONTEXT)
    assert time.monotonic() - started >= 0.15 - _EARLY


# --- fences ---------------------------------------------------------------------------------

VALID_REVIEW = '{"verdict": "REVISE", "issues": ["a"], "feedback": "b"}'


@pytest.mark.parametrize(
    "raw",
    [
        f"```json\n{VALID_REVIEW}\n```",
        f"```\n{VALID_REVIEW}\n```",
        f"\n\n  ```json\n{VALID_REVIEW}\n```  \n",
        f"```json\n{VALID_REVIEW}```",
        f"```json\n{VALID_REVIEW}\n",  # the closing fence is missing
        f"  {VALID_REVIEW}  \n",
    ],
    ids=["json-fence", "bare-fence", "padded", "fence-on-last-line", "unclosed", "no-fence"],
)
async def test_fenced_json_is_accepted(raw: str) -> None:
    script = OfflineScript.model_validate({"critic": {"*": {"raw": raw}}})
    review = await ask_offline_call(OfflineModels(script=script), Role.CRITIC, REVIEW_CONTEXT)
    assert review == CriticReview(verdict=CriticVerdict.REVISE, issues=["a"], feedback="b")


async def test_fence_around_invalid_json_is_still_invalid() -> None:
    script = OfflineScript.model_validate({"critic": {"*": {"raw": "```json\nnope\n```"}}})
    with pytest.raises(InvalidOutput):
        await ask_offline_call(OfflineModels(script=script), Role.CRITIC, REVIEW_CONTEXT)


# --- the demo path: phase switch, then refine -----------------------------------------------


def write_draft(workdir: Path, draft: Draft) -> str:
    for file in draft.files:
        (workdir / file.path).write_text(file.content)
    return (workdir / ARTIFACT_PATH).read_text()


def run_concrete(rule: Rule, workdir: Path) -> bool:
    if isinstance(rule.check, PatternCheck):
        return run_pattern_check(rule.check, workdir).passed
    assert isinstance(rule.check, CommandCheck)
    return run_command_check(rule.check, workdir).passed


async def evaluate(
    model: OfflineModels, rules: list[Rule], phase: Phase, workdir: Path
) -> Evaluation:
    """EVALUATE as the workflow runs it: prepare sentences, run every check, score."""
    active = active_rules(rules, phase)
    results = [
        CheckResult(rule_id=r.id, passed=run_concrete(r, workdir))
        for r in active
        if not isinstance(r.check, str)
    ]
    described = [r for r in active if isinstance(r.check, str)]
    if described:
        preparation: Preparation = await ask_offline(
            Role.PREPARER, PreparerContext(task=TASK, rules=described), model
        )
        artifact = (workdir / ARTIFACT_PATH).read_text()
        questions = []
        for prepared in preparation.checks:
            assert isinstance(prepared.check, JudgeCheck)
            questions.append(Question(rule_id=prepared.rule_id, question=prepared.check.question))
        judged = await ask_offline(
            Role.EVALUATOR,
            EvaluatorContext(task=TASK, questions=questions, artifact=artifact),
            model,
        )
        results += [
            CheckResult(rule_id=rule_id, passed=judgement.passed)
            for rule_id, judgement in judgements_of(judged).items()
        ]
    return score_results(rules, results, phase, THRESHOLDS)


async def first_draft(model: OfflineModels, workdir: Path) -> tuple[list[Rule], str]:
    """Hydrate, plan and produce as the activities do; the draft lands in `workdir`."""
    hydration: Hydration = await ask_offline(Role.HYDRATOR, hydrate_context(TASK, [], []), model)
    rules = normalise_rules(hydration.rules)
    plan: IterationPlan = await ask_offline(
        Role.PLANNER,
        PlannerContext(
            task=TASK,
            intent=hydration.intent,
            acceptance_criteria=hydration.acceptance_criteria,
            iteration=1,
            last_evaluation=None,
        ),
        model,
    )
    draft: Draft = await ask_offline(
        Role.PRODUCER,
        ProducerContext(
            task=TASK,
            intent=hydration.intent,
            acceptance_criteria=hydration.acceptance_criteria,
            rules=active_rules(rules, Phase.A),
            plan=plan,
            current_artifact=None,
        ),
        model,
    )
    assert [f.path for f in draft.files] == [ARTIFACT_PATH]
    return rules, write_draft(workdir, draft)


async def test_first_draft_passes_phase_a_rules_and_fails_has_verification(tmp_path: Path) -> None:
    model = OfflineModels()
    rules, _ = await first_draft(model, tmp_path)
    by_id = {r.id: r for r in rules}
    phase_a = [r for r in rules if r.phase == Phase.A]
    assert {r.id for r in phase_a} >= {"has-title", "covers-task", "has-summary"}
    for rule in phase_a:
        assert not isinstance(rule.check, str), rule.id
        assert run_concrete(rule, tmp_path), f"first draft fails phase-A rule {rule.id}"
    verification = by_id["has-verification"]
    assert verification.phase == Phase.B
    assert isinstance(verification.check, PatternCheck)
    assert not run_pattern_check(verification.check, tmp_path).passed


async def test_offline_demo_switches_phase_then_refines_to_success(tmp_path: Path) -> None:
    model = OfflineModels()
    rules, artifact = await first_draft(model, tmp_path)

    phase_a = await evaluate(model, rules, Phase.A, tmp_path)
    assert phase_a.passed
    assert decide(phase_a, None, 1, 4, 0).next == Next.SWITCH_TO_B

    phase_b = await evaluate(model, rules, Phase.B, tmp_path)
    assert not phase_b.passed
    assert phase_b.failed_blockers == ["has-verification"]
    assert decide(phase_b, None, 1, 4, 0).next == Next.REFINE

    critique: Critique = await ask_offline(
        Role.ARTIFACT_CRITIC,
        ArtifactCriticContext(
            task=TASK,
            artifact=artifact,
            evaluation=phase_b,
            rules=active_rules(rules, Phase.B),
        ),
        model,
    )
    assert [i.rule_id for i in critique.issues] == ["has-verification"]
    refined: Draft = await ask_offline(
        Role.REFINER,
        RefinerContext(task=TASK, critique=critique, current_artifact=artifact),
        model,
    )
    refined_text = write_draft(tmp_path, refined)
    assert refined_text.startswith(artifact.rstrip("\n"))  # the refiner only adds

    final = await evaluate(model, rules, Phase.B, tmp_path)
    assert final.passed
    assert final.score == 1.0
    decision = decide(final, phase_b, 2, 4, 0)
    assert (decision.next, decision.reason) == (Next.STOP, StopReason.THRESHOLD_REACHED)


async def test_refiner_applies_suggested_text_so_a_failed_pattern_rule_passes(
    tmp_path: Path,
) -> None:
    rule = Rule(
        id="has-rollback",
        description="The guide explains how to roll back",
        check=PatternCheck(
            pattern=r"^## Rollback\b", example="## Rollback\n\nRestore the snapshot."
        ),
    )
    assert isinstance(rule.check, PatternCheck)
    original = "# Billing migration\n\nSteps to upgrade.\n"
    (tmp_path / ARTIFACT_PATH).write_text(original)
    assert not run_pattern_check(rule.check, tmp_path).passed

    evaluation = score_results(
        [rule], [CheckResult(rule_id=rule.id, passed=False)], Phase.A, THRESHOLDS
    )
    critique: Critique = await ask_offline(
        Role.ARTIFACT_CRITIC,
        ArtifactCriticContext(task=TASK, artifact=original, evaluation=evaluation, rules=[rule]),
    )
    assert critique.issues[0].suggested_text == rule.check.example
    context = RefinerContext(task=TASK, critique=critique)
    draft: Draft = await ask_offline(
        Role.REFINER, context.model_copy(update={"current_artifact": original})
    )
    refined = write_draft(tmp_path, draft)

    assert run_pattern_check(rule.check, tmp_path).passed
    assert refined.startswith(original.rstrip("\n"))
    assert draft.changed == ["## Rollback"]

    # Refining again with the same critique does not add the text twice.
    again: Draft = await ask_offline(
        Role.REFINER, context.model_copy(update={"current_artifact": refined})
    )
    assert again.files[0].content == refined
    assert again.changed == []


async def test_refiner_without_suggested_text_changes_nothing() -> None:
    critique = Critique(issues=[Issue(rule_id="tests-pass", problem="exit 1", fix="fix the tests")])
    draft: Draft = await ask_offline(
        Role.REFINER, RefinerContext(task=TASK, critique=critique, current_artifact=ARTIFACT)
    )
    assert draft.files[0].content == ARTIFACT
    assert draft.changed == []
