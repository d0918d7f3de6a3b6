"""The run request, rule normalisation, role answers, statuses and token usage."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from pydantic import ValidationError

from loopworks.schemas import patterns
from loopworks.schemas.roles import (
    ANSWER_MODELS,
    Issue,
    PreparedCheckAnswer,
    ReflectionAnswer,
    Role,
    RuleJudgement,
    judgements_model,
    judgements_of,
)
from loopworks.schemas.rules import (
    CommandCheck,
    JudgeCheck,
    PatternCheck,
    Phase,
    PreparedCheck,
    Rule,
    Severity,
    normalise_rule_id,
    normalise_rules,
)
from loopworks.schemas.run import (
    STATUS_FOR_REASON,
    TERMINAL_STATUSES,
    Mode,
    RunRequest,
    RunStatus,
    StopReason,
    Thresholds,
    TokenUsage,
)

pytestmark = pytest.mark.unit


def invalid_fields(excinfo: pytest.ExceptionInfo[ValidationError]) -> set[str]:
    """Dotted locations of every error in a ValidationError."""
    return {".".join(str(part) for part in err["loc"]) for err in excinfo.value.errors()}


def rule_data(rule_id: str = "r1", **fields: Any) -> dict[str, Any]:
    return {"id": rule_id, "description": f"rule {rule_id}", "check": "Is it good?", **fields}


# --- RunRequest -----------------------------------------------------------------------------


def test_run_request_defaults() -> None:
    request = RunRequest(task="Write a changelog")
    assert request.thresholds.A == 0.8
    assert request.thresholds.B == 0.9
    # Unset: a prep package's limit when the run takes one, else 4 (LoopInput.first_memory).
    assert request.max_iterations is None
    assert request.mode == Mode.AUTO
    assert request.audit_probability == 0.2
    assert request.rules == []
    assert request.repo is None
    assert request.template is None


@pytest.mark.parametrize("max_iterations", [1, 4, 20])
def test_max_iterations_in_bounds(max_iterations: int) -> None:
    assert RunRequest(task="t", max_iterations=max_iterations).max_iterations == max_iterations


@pytest.mark.parametrize("max_iterations", [0, -1, 21])
def test_max_iterations_out_of_bounds(max_iterations: int) -> None:
    with pytest.raises(ValidationError) as excinfo:
        RunRequest(task="t", max_iterations=max_iterations)
    assert invalid_fields(excinfo) == {"max_iterations"}


@pytest.mark.parametrize("phase", ["A", "B"])
@pytest.mark.parametrize("value", [0, 0.0, -0.1, 1.0001, 2.0])
def test_thresholds_out_of_bounds(phase: str, value: float) -> None:
    with pytest.raises(ValidationError) as excinfo:
        RunRequest(task="t", thresholds={phase: value})
    assert invalid_fields(excinfo) == {f"thresholds.{phase}"}


@pytest.mark.parametrize("value", [1.0, 0.5, 0.01])
def test_thresholds_in_bounds(value: float) -> None:
    request = RunRequest(task="t", thresholds={"A": value, "B": value})
    assert request.thresholds.for_phase(Phase.A) == value
    assert request.thresholds.for_phase(Phase.B) == value


def test_partial_thresholds_keep_the_other_default() -> None:
    thresholds = RunRequest(task="t", thresholds={"B": 0.95}).thresholds
    assert (thresholds.A, thresholds.B) == (0.8, 0.95)


def test_thresholds_for_phase() -> None:
    thresholds = Thresholds(A=0.7, B=0.85)
    assert thresholds.for_phase(Phase.A) == 0.7
    assert thresholds.for_phase(Phase.B) == 0.85


@pytest.mark.parametrize("value", [0.0, 0.5, 1.0])
def test_audit_probability_in_bounds(value: float) -> None:
    assert RunRequest(task="t", audit_probability=value).audit_probability == value


@pytest.mark.parametrize("value", [-0.01, 1.01, 2.0])
def test_audit_probability_out_of_bounds(value: float) -> None:
    with pytest.raises(ValidationError) as excinfo:
        RunRequest(task="t", audit_probability=value)
    assert invalid_fields(excinfo) == {"audit_probability"}


@pytest.mark.parametrize("task", ["", " ", "   \n\t  "])
def test_blank_task_rejected(task: str) -> None:
    with pytest.raises(ValidationError) as excinfo:
        RunRequest(task=task)
    assert invalid_fields(excinfo) == {"task"}


def test_task_keeps_its_text() -> None:
    assert RunRequest(task="  indented task  ").task == "  indented task  "


def test_extra_fields_rejected() -> None:
    with pytest.raises(ValidationError) as excinfo:
        RunRequest(task="t", unexpected_field=1)
    assert invalid_fields(excinfo) == {"unexpected_field"}
    assert excinfo.value.errors()[0]["type"] == "extra_forbidden"
    with pytest.raises(ValidationError) as excinfo:
        RunRequest(task="t", thresholds={"A": 0.8, "C": 0.5})
    assert invalid_fields(excinfo) == {"thresholds.C"}


def test_mode_parses_from_string() -> None:
    assert RunRequest(task="t", mode="interactive").mode == Mode.INTERACTIVE
    with pytest.raises(ValidationError) as excinfo:
        RunRequest(task="t", mode="sometimes")
    assert invalid_fields(excinfo) == {"mode"}


# --- rule normalisation ---------------------------------------------------------------------


@pytest.mark.parametrize(("severity", "weight"), [("fail", 2.0), ("warn", 1.0), ("info", 0.0)])
def test_weight_derived_from_severity_when_omitted(severity: str, weight: float) -> None:
    request = RunRequest(task="t", rules=[rule_data(severity=severity)])
    assert request.rules[0].weight == weight
    assert request.rules[0].effective_weight == weight


@pytest.mark.parametrize(("severity", "weight"), [("fail", 5.0), ("warn", 0.5), ("fail", 0.0)])
def test_explicit_weight_kept(severity: str, weight: float) -> None:
    request = RunRequest(task="t", rules=[rule_data(severity=severity, weight=weight)])
    assert request.rules[0].weight == weight


def test_rule_defaults_to_fail_in_phase_a() -> None:
    parsed = Rule.model_validate(rule_data())
    assert parsed.severity == Severity.FAIL
    assert parsed.phase == Phase.A
    assert parsed.weight == 2.0


def test_negative_weight_rejected() -> None:
    with pytest.raises(ValidationError) as excinfo:
        Rule.model_validate(rule_data(weight=-1))
    assert invalid_fields(excinfo) == {"weight"}


def test_duplicate_rule_ids_rejected() -> None:
    with pytest.raises(ValidationError, match="duplicate rule id 'same'"):
        RunRequest(task="t", rules=[rule_data("same"), rule_data("other"), rule_data("same")])


def test_normalise_rules_rejects_duplicates_and_fills_weights() -> None:
    rules = [
        Rule.model_validate(rule_data("a", severity="warn")),
        Rule.model_validate(rule_data("b")),
    ]
    normalised = normalise_rules(rules)
    assert [(r.id, r.weight) for r in normalised] == [("a", 1.0), ("b", 2.0)]
    with pytest.raises(ValueError, match="duplicate rule id 'a'"):
        normalise_rules([*rules, rules[0]])


def test_normalised_rules_round_trip_in_full_form() -> None:
    request = RunRequest(task="t", rules=[rule_data(severity="warn", phase="B")])
    dumped = request.rules[0].model_dump(mode="json")
    assert set(dumped) == {"id", "description", "severity", "weight", "phase", "check", "owner"}
    assert dumped["weight"] == 1.0 and dumped["owner"] == "run"
    assert Rule.model_validate(dumped) == request.rules[0]


def test_an_invented_rule_id_that_is_a_sentence_is_cut_to_a_label() -> None:
    parsed = Rule.model_validate(rule_data("Rule " + "x" * 70))
    assert parsed.id == "rule-" + "x" * 59


@pytest.mark.parametrize("rule_id", ["", "!!!", " - ", "x" * 65])
def test_bad_rule_id_rejected(rule_id: str) -> None:
    with pytest.raises(ValidationError) as excinfo:
        Rule.model_validate(rule_data(rule_id))
    assert invalid_fields(excinfo) == {"id"}


@pytest.mark.parametrize("rule_id", ["r1", "has-title", "A.b_C-9", "--x--", "x" * 64])
def test_valid_rule_id_kept_unchanged(rule_id: str) -> None:
    assert normalise_rule_id(rule_id) == rule_id
    assert Rule.model_validate(rule_data(rule_id)).id == rule_id


@pytest.mark.parametrize(
    ("invented", "normalised"),
    [
        ("Rule 1", "rule-1"),
        ("has space", "has-space"),
        ("bang!", "bang"),
        ("  Tests pass?  ", "tests-pass"),
        ("Title: present / non-empty", "title-present-non-empty"),
        ("Größe", "gr-e"),
    ],
)
def test_invented_rule_id_slugified(invented: str, normalised: str) -> None:
    assert normalise_rule_id(invented) == normalised
    assert Rule.model_validate(rule_data(invented)).id == normalised
    # Every id that refers to a rule is normalised the same way, so references still match.
    judge = {"kind": "llm", "question": "q?"}
    assert PreparedCheck(rule_id=invented, check=judge).rule_id == normalised
    assert PreparedCheckAnswer(rule_id=invented, check=judge).rule_id == normalised
    assert Issue(rule_id=invented, problem="p", fix="f").rule_id == normalised
    # Normalising is idempotent.
    assert normalise_rule_id(normalised) == normalised


@pytest.mark.parametrize("rule_id", ["", "?!", "  "])
def test_rule_id_with_nothing_left_rejected(rule_id: str) -> None:
    with pytest.raises(ValueError, match="not a rule id"):
        normalise_rule_id(rule_id)
    with pytest.raises(ValidationError) as excinfo:
        Issue(rule_id=rule_id, problem="p", fix="f")
    assert invalid_fields(excinfo) == {"rule_id"}


def test_rule_id_of_another_type_is_a_type_error() -> None:
    with pytest.raises(ValidationError) as excinfo:
        Issue.model_validate({"rule_id": 7, "problem": "p", "fix": "f"})
    assert invalid_fields(excinfo) == {"rule_id"}
    assert excinfo.value.errors()[0]["type"] == "string_type"


def test_duplicate_rule_ids_after_normalising_rejected() -> None:
    with pytest.raises(ValidationError, match="duplicate rule id 'rule-1'"):
        RunRequest(task="t", rules=[rule_data("Rule 1"), rule_data("rule-1")])


# --- role answers ---------------------------------------------------------------------------


@pytest.mark.parametrize("outcome", ["success", "partial", "failure"])
def test_reflection_outcome_is_one_of_three_words(outcome: str) -> None:
    answer = ReflectionAnswer(outcome=outcome, followed="Yes", summary="s")  # type: ignore[arg-type]
    assert answer.outcome == outcome


@pytest.mark.parametrize("outcome", ["Success", "done", ""])
def test_reflection_outcome_outside_the_three_rejected(outcome: str) -> None:
    with pytest.raises(ValidationError) as excinfo:
        ReflectionAnswer.model_validate({"outcome": outcome, "followed": "Yes", "summary": "s"})
    assert invalid_fields(excinfo) == {"outcome"}
    enum = ReflectionAnswer.model_json_schema()["properties"]["outcome"]["enum"]
    assert enum == ["success", "partial", "failure"]


def test_every_role_has_an_answer_model_or_works_with_tools() -> None:
    assert set(ANSWER_MODELS) == set(Role)
    assert {role for role, model in ANSWER_MODELS.items() if model is None} == {
        Role.PRODUCER,
        Role.REFINER,
        Role.SKILL_GENERATOR,
    }
    assert ANSWER_MODELS[Role.EVALUATOR] is not None


QUESTIONS = {"has-title": "Does it start with a title?", "Rule 2": "Does it mention 429?"}


def test_judgements_are_one_required_property_per_rule_id() -> None:
    judgements = judgements_model(QUESTIONS)
    schema = judgements.model_json_schema()
    assert schema["required"] == ["has-title", "Rule 2"]
    assert "Does it mention 429?" in schema["properties"]["Rule 2"]["description"]
    with pytest.raises(ValidationError) as excinfo:
        judgements.model_validate({"has-title": {"passed": True, "reason": "yes"}})
    assert invalid_fields(excinfo) == {"Rule 2"}
    with pytest.raises(ValidationError) as excinfo:  # a question that was not asked
        judgements.model_validate(
            {
                "has-title": {"passed": True, "reason": "yes"},
                "Rule 2": {"passed": False, "reason": "no"},
                "other": {"passed": True, "reason": "?"},
            }
        )
    assert invalid_fields(excinfo) == {"other"}
    parsed = judgements.model_validate(
        {
            "has-title": {"passed": True, "reason": "yes"},
            "Rule 2": {"passed": False, "reason": "no"},
        }
    )
    assert judgements_of(parsed) == {
        "has-title": RuleJudgement(passed=True, reason="yes"),
        "Rule 2": RuleJudgement(passed=False, reason="no"),
    }


def test_string_check_stays_a_sentence() -> None:
    parsed = Rule.model_validate(rule_data(check="Does the text answer the question?"))
    assert parsed.check == "Does the text answer the question?"
    assert isinstance(parsed.check, str)


@pytest.mark.parametrize(
    ("check", "expected_type"),
    [
        ({"kind": "command", "command": "pytest -q"}, CommandCheck),
        ({"kind": "pattern", "pattern": r"^# \S"}, PatternCheck),
        ({"kind": "llm", "question": "Is it coherent?"}, JudgeCheck),
    ],
)
def test_concrete_check_parsed_by_kind(check: dict[str, Any], expected_type: type) -> None:
    parsed = Rule.model_validate(rule_data(check=check))
    assert isinstance(parsed.check, expected_type)
    assert parsed.check.kind == check["kind"]


def test_pattern_check_defaults() -> None:
    parsed = Rule.model_validate(rule_data(check={"kind": "pattern", "pattern": "x"}))
    assert isinstance(parsed.check, PatternCheck)
    assert parsed.check.must_match is True
    assert parsed.check.path == "artifact.md"


def test_command_check_defaults() -> None:
    check = CommandCheck(command="true")
    assert check.timeout_seconds == 60.0
    assert check.expect_exit == 0


def test_unknown_check_kind_rejected() -> None:
    with pytest.raises(ValidationError):
        Rule.model_validate(rule_data(check={"kind": "telepathy", "question": "?"}))


@pytest.mark.parametrize("pattern", ["(", "[a-", "*oops", "a{2,1}", r"(a)\1", "(?=a)"])
def test_invalid_regex_rejected_with_a_message(pattern: str) -> None:
    with pytest.raises(ValidationError, match="not a valid regular expression"):
        Rule.model_validate(rule_data(check={"kind": "pattern", "pattern": pattern}))
    with pytest.raises(ValidationError, match="not a valid regular expression"):
        RunRequest(task="t", rules=[rule_data(check={"kind": "pattern", "pattern": pattern})])


def test_valid_regex_accepted() -> None:
    parsed = PatternCheck(pattern=r"(?i)\b(TODO|TBD)\b", must_match=False)
    assert parsed.pattern == r"(?i)\b(TODO|TBD)\b"


def test_a_pattern_is_compiled_once_however_often_its_rule_is_validated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every step's input carries the run's rules, so their patterns are validated at each
    decode: the verdict, a refusal's message included, is remembered."""
    compiled: list[str] = []
    real_compile = patterns.re2.compile

    def counting_compile(source: str, options: Any) -> Any:
        compiled.append(source)
        return real_compile(source, options)

    monkeypatch.setattr(patterns.re2, "compile", counting_compile)
    good, bad = rf"^# once {uuid.uuid4().hex}", rf"(once {uuid.uuid4().hex})\1"
    for _ in range(3):
        assert PatternCheck(pattern=good, must_match=True).pattern == good
        with pytest.raises(ValidationError, match="invalid escape sequence"):
            PatternCheck(pattern=bad, must_match=True)
    assert len(compiled) == 2


# --- statuses -------------------------------------------------------------------------------

STOP_REASON_STATUS = {
    StopReason.THRESHOLD_REACHED: RunStatus.COMPLETED,
    StopReason.NO_MAJOR_ISSUES: RunStatus.COMPLETED,
    StopReason.USER_STOP: RunStatus.STOPPED,
    StopReason.ITERATION_LIMIT: RunStatus.STOPPED,
    StopReason.STAGNATION: RunStatus.STOPPED,
    StopReason.PHASE_ERROR: RunStatus.FAILED,
}


def test_status_for_reason_covers_every_stop_reason() -> None:
    assert set(STATUS_FOR_REASON) == set(StopReason)


@pytest.mark.parametrize(("reason", "status"), sorted(STOP_REASON_STATUS.items()))
def test_status_for_reason_is_as_documented(reason: StopReason, status: RunStatus) -> None:
    assert STATUS_FOR_REASON[reason] == status


def test_critic_halt_means_halted() -> None:
    assert STATUS_FOR_REASON[StopReason.CRITIC_HALT] == RunStatus.HALTED


@pytest.mark.parametrize("reason", list(StopReason))
def test_every_stop_reason_ends_in_a_terminal_status(reason: StopReason) -> None:
    assert STATUS_FOR_REASON[reason].is_terminal


@pytest.mark.parametrize(
    ("status", "terminal"),
    [
        (RunStatus.RUNNING, False),
        (RunStatus.AWAITING_APPROVAL, False),
        (RunStatus.BLOCKED, False),
        (RunStatus.PAUSED, False),
        (RunStatus.COMPLETED, True),
        (RunStatus.STOPPED, True),
        (RunStatus.FAILED, True),
        (RunStatus.HALTED, True),
    ],
)
def test_run_status_is_terminal(status: RunStatus, terminal: bool) -> None:
    assert status.is_terminal is terminal


def test_every_run_status_is_classified() -> None:
    assert set(RunStatus) >= TERMINAL_STATUSES
    assert {s for s in RunStatus if s.is_terminal} == {
        RunStatus.COMPLETED,
        RunStatus.STOPPED,
        RunStatus.FAILED,
        RunStatus.HALTED,
    }


def test_stop_reason_values_are_the_seed_strings() -> None:
    assert {r.value for r in STOP_REASON_STATUS} == {
        "threshold_reached",
        "no_major_issues",
        "user_stop",
        "iteration_limit",
        "stagnation",
        "phase_error",
    }


# --- token usage ----------------------------------------------------------------------------


def test_token_usage_addition_sums_every_field() -> None:
    a = TokenUsage(
        input_tokens=10,
        output_tokens=20,
        cache_read_input_tokens=30,
        cache_creation_input_tokens=40,
        calls=1,
        cost_usd=0.5,
    )
    b = TokenUsage(
        input_tokens=1,
        output_tokens=2,
        cache_read_input_tokens=3,
        cache_creation_input_tokens=4,
        calls=5,
        cost_usd=0.25,
    )
    total = a + b
    assert total == TokenUsage(
        input_tokens=11,
        output_tokens=22,
        cache_read_input_tokens=33,
        cache_creation_input_tokens=44,
        calls=6,
        cost_usd=0.75,
    )
    # Operands are not mutated.
    assert a.input_tokens == 10
    assert b.calls == 5
    # Every field of the model takes part in the sum.
    assert all(getattr(total, name) > getattr(a, name) for name in TokenUsage.model_fields)


def test_token_usage_zero_is_the_identity() -> None:
    usage = TokenUsage(input_tokens=7, output_tokens=3, calls=2)
    assert usage + TokenUsage() == usage
    assert TokenUsage() + usage == usage


def test_token_usage_sum_accumulates() -> None:
    total = TokenUsage()
    for _ in range(3):
        total = total + TokenUsage(input_tokens=2, output_tokens=1, calls=1)
    assert (total.input_tokens, total.output_tokens, total.calls) == (6, 3, 3)
