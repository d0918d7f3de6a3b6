"""The loop's pure decisions: scoring, next step, stagnation, distance to success, alias."""

from __future__ import annotations

import re

import pytest

from loopworks.schemas.evaluation import CheckResult, Evaluation, RuleResult
from loopworks.schemas.rules import Phase, Rule, Severity
from loopworks.schemas.run import StopReason, Thresholds
from loopworks.workflows.decisions import (
    STAGNATION_DELTA,
    STAGNATION_LIMIT,
    Next,
    alias_for,
    decide,
    distance_to_success,
    is_success,
    next_stagnation_count,
    no_skill_loop,
    score_results,
    should_audit,
    stop_message,
)

pytestmark = pytest.mark.unit

THRESHOLDS = Thresholds()  # A=0.8, B=0.9


def rule(
    rule_id: str,
    severity: str = "fail",
    phase: str = "A",
    weight: float | None = None,
) -> Rule:
    return Rule(
        id=rule_id,
        description=f"rule {rule_id}",
        severity=Severity(severity),
        phase=Phase(phase),
        weight=weight,
        check=f"does {rule_id} hold?",
    )


def ok(rule_id: str, detail: str = "") -> CheckResult:
    return CheckResult(rule_id=rule_id, passed=True, detail=detail)


def ko(rule_id: str, detail: str = "") -> CheckResult:
    return CheckResult(rule_id=rule_id, passed=False, detail=detail)


def by_id(evaluation: Evaluation) -> dict[str, RuleResult]:
    return {r.rule_id: r for r in evaluation.results}


# --- score_results ------------------------------------------------------------------------


def test_weights_come_from_severity() -> None:
    rules = [rule("f", "fail"), rule("w", "warn"), rule("i", "info")]
    evaluation = score_results(rules, [ok("f"), ok("w"), ok("i")], Phase.A, THRESHOLDS)
    weights = {r.rule_id: r.weight for r in evaluation.results}
    assert weights == {"f": 2.0, "w": 1.0, "i": 0.0}
    assert {r.rule_id: r.severity for r in evaluation.results} == {
        "f": Severity.FAIL,
        "w": Severity.WARN,
        "i": Severity.INFO,
    }


@pytest.mark.parametrize(
    ("outcomes", "expected"),
    [
        # fail (2) passes, warn (1) fails: 2 / 3
        ({"f": True, "w": False, "i": True}, 0.6667),
        # fail fails, warn passes: 1 / 3
        ({"f": False, "w": True, "i": True}, 0.3333),
        # info carries no weight: failing it changes nothing
        ({"f": True, "w": True, "i": False}, 1.0),
        ({"f": False, "w": False, "i": True}, 0.0),
    ],
)
def test_score_is_passed_weight_over_active_weight(
    outcomes: dict[str, bool], expected: float
) -> None:
    rules = [rule("f", "fail"), rule("w", "warn"), rule("i", "info")]
    checks = [CheckResult(rule_id=rid, passed=passed) for rid, passed in outcomes.items()]
    assert score_results(rules, checks, Phase.A, THRESHOLDS).score == expected


def test_explicit_weight_counts_instead_of_severity_weight() -> None:
    rules = [rule("heavy", "warn", weight=3.0), rule("f", "fail")]
    evaluation = score_results(rules, [ok("heavy"), ko("f")], Phase.A, THRESHOLDS)
    assert by_id(evaluation)["heavy"].weight == 3.0
    assert evaluation.score == 0.6  # 3 / (3 + 2)


def test_phase_a_ignores_b_rules() -> None:
    rules = [rule("a1"), rule("b1", phase="B"), rule("b2", "warn", phase="B")]
    # The B rules fail (or have no result at all): phase A must not see them.
    evaluation = score_results(rules, [ok("a1"), ko("b1")], Phase.A, THRESHOLDS)
    assert [r.rule_id for r in evaluation.results] == ["a1"]
    assert evaluation.score == 1.0
    assert evaluation.passed
    assert evaluation.threshold == THRESHOLDS.A


def test_phase_b_includes_a_and_b_rules() -> None:
    rules = [rule("a1"), rule("a2", "warn"), rule("b1", phase="B"), rule("b2", "warn", phase="B")]
    checks = [ok("a1"), ok("a2"), ko("b1"), ok("b2")]
    evaluation = score_results(rules, checks, Phase.B, THRESHOLDS)
    assert sorted(r.rule_id for r in evaluation.results) == ["a1", "a2", "b1", "b2"]
    assert evaluation.score == round(4 / 6, 4)
    assert evaluation.threshold == THRESHOLDS.B
    assert evaluation.phase == Phase.B
    assert not evaluation.passed


def test_rule_with_several_checks_passes_only_if_all_pass() -> None:
    rules = [rule("multi"), rule("other", "warn")]
    mixed = score_results(
        rules,
        [ok("multi", "first ok"), ko("multi", "second broke"), ok("other")],
        Phase.A,
        THRESHOLDS,
    )
    assert not by_id(mixed)["multi"].passed
    assert by_id(mixed)["multi"].detail == "first ok; second broke"
    assert mixed.score == round(1 / 3, 4)

    all_ok = score_results(rules, [ok("multi"), ok("multi"), ok("other")], Phase.A, THRESHOLDS)
    assert by_id(all_ok)["multi"].passed
    assert all_ok.score == 1.0


def test_active_rule_without_check_result_fails() -> None:
    rules = [rule("checked", "warn"), rule("forgotten", "fail")]
    evaluation = score_results(rules, [ok("checked")], Phase.A, THRESHOLDS)
    forgotten = by_id(evaluation)["forgotten"]
    assert not forgotten.passed
    assert forgotten.detail == "no check was run for this rule"
    assert evaluation.failed_blockers == ["forgotten"]
    assert evaluation.score == round(1 / 3, 4)
    assert not evaluation.passed


def test_results_for_unknown_rules_are_ignored() -> None:
    rules = [rule("real")]
    evaluation = score_results(rules, [ok("real"), ko("ghost")], Phase.A, THRESHOLDS)
    assert [r.rule_id for r in evaluation.results] == ["real"]
    assert evaluation.score == 1.0


def _four_fifths() -> tuple[list[Rule], list[CheckResult]]:
    # Two fail rules pass (4), one warn rule fails (1): score exactly 0.8.
    rules = [rule("f1"), rule("f2"), rule("w", "warn")]
    return rules, [ok("f1"), ok("f2"), ko("w")]


def test_score_equal_to_threshold_passes() -> None:
    rules, checks = _four_fifths()
    evaluation = score_results(rules, checks, Phase.A, Thresholds(A=0.8))
    assert evaluation.score == 0.8
    assert evaluation.passed


def test_score_just_below_threshold_fails() -> None:
    rules, checks = _four_fifths()
    evaluation = score_results(rules, checks, Phase.A, Thresholds(A=0.8001))
    assert evaluation.score == 0.8
    assert not evaluation.passed


def test_failed_fail_rule_blocks_passing_above_threshold() -> None:
    rules = [rule("blocker", "fail"), rule("bulk", "warn", weight=20.0)]
    evaluation = score_results(rules, [ko("blocker"), ok("bulk")], Phase.A, THRESHOLDS)
    assert evaluation.score == round(20 / 22, 4)
    assert evaluation.score >= THRESHOLDS.A
    assert evaluation.failed_blockers == ["blocker"]
    assert not evaluation.passed


def test_failed_warn_rule_does_not_block_at_threshold() -> None:
    rules = [rule("f"), rule("bulk", "warn", weight=8.0), rule("w", "warn")]
    evaluation = score_results(rules, [ok("f"), ok("bulk"), ko("w")], Phase.A, THRESHOLDS)
    assert evaluation.score == round(10 / 11, 4)
    assert evaluation.failed_warnings == ["w"]
    assert evaluation.passed


def test_all_info_rules_score_one() -> None:
    rules = [rule("i1", "info"), rule("i2", "info")]
    evaluation = score_results(rules, [ko("i1")], Phase.A, THRESHOLDS)
    assert evaluation.score == 1.0
    assert evaluation.passed
    assert not any(r.passed for r in evaluation.results)


def test_no_active_rule_scores_one() -> None:
    evaluation = score_results([rule("b", phase="B")], [], Phase.A, THRESHOLDS)
    assert evaluation.results == []
    assert evaluation.score == 1.0


# --- decide ---------------------------------------------------------------------------------


def evaluation(
    phase: Phase = Phase.A,
    score: float = 0.5,
    passed: bool = False,
    blockers: tuple[str, ...] = ("b1",),
    warnings: tuple[str, ...] = (),
) -> Evaluation:
    results = [RuleResult(rule_id="good", severity=Severity.FAIL, weight=2, passed=True)]
    results += [
        RuleResult(rule_id=r, severity=Severity.FAIL, weight=2, passed=False) for r in blockers
    ]
    results += [
        RuleResult(rule_id=r, severity=Severity.WARN, weight=1, passed=False) for r in warnings
    ]
    return Evaluation(
        phase=phase,
        threshold=THRESHOLDS.for_phase(phase),
        score=score,
        passed=passed,
        results=results,
    )


def test_phase_a_pass_switches_to_b() -> None:
    passing = evaluation(Phase.A, score=0.9, passed=True, blockers=())
    decision = decide(passing, None, iteration=1, max_iterations=4, stagnation_count=1)
    assert decision.next == Next.SWITCH_TO_B
    assert decision.reason is None
    assert decision.stagnation_count == 1


def test_phase_a_pass_switches_to_b_even_at_the_last_iteration() -> None:
    passing = evaluation(Phase.A, score=0.9, passed=True, blockers=())
    decision = decide(passing, None, iteration=4, max_iterations=4, stagnation_count=0)
    assert decision.next == Next.SWITCH_TO_B


def test_phase_b_pass_stops_with_threshold_reached() -> None:
    passing = evaluation(Phase.B, score=0.95, passed=True, blockers=())
    decision = decide(passing, None, iteration=2, max_iterations=4, stagnation_count=0)
    assert decision.next == Next.STOP
    assert decision.reason == StopReason.THRESHOLD_REACHED


@pytest.mark.parametrize("phase", [Phase.A, Phase.B])
def test_failure_without_fail_blockers_stops_with_no_major_issues(phase: Phase) -> None:
    # Below threshold, but only warnings remain.
    failing = evaluation(phase, score=0.5, passed=False, blockers=(), warnings=("w1", "w2"))
    decision = decide(failing, None, iteration=1, max_iterations=4, stagnation_count=0)
    assert decision.next == Next.STOP
    assert decision.reason == StopReason.NO_MAJOR_ISSUES


@pytest.mark.parametrize(("iteration", "max_iterations"), [(4, 4), (5, 4), (1, 1)])
def test_iteration_at_or_past_the_limit_stops(iteration: int, max_iterations: int) -> None:
    failing = evaluation(score=0.5)
    decision = decide(failing, None, iteration, max_iterations, stagnation_count=0)
    assert decision.next == Next.STOP
    assert decision.reason == StopReason.ITERATION_LIMIT


def test_iteration_below_the_limit_refines() -> None:
    failing = evaluation(score=0.5)
    decision = decide(failing, None, iteration=3, max_iterations=4, stagnation_count=0)
    assert decision.next == Next.REFINE
    assert decision.reason is None
    assert decision.stagnation_count == 0


def test_two_consecutive_stagnant_evaluations_stop_with_stagnation() -> None:
    first = evaluation(score=0.50)
    second = evaluation(score=0.51)  # +0.01: stagnant
    third = evaluation(score=0.51)  # +0.00: stagnant again

    d1 = decide(first, None, iteration=1, max_iterations=10, stagnation_count=0)
    assert (d1.next, d1.stagnation_count) == (Next.REFINE, 0)
    d2 = decide(second, first, iteration=2, max_iterations=10, stagnation_count=d1.stagnation_count)
    assert (d2.next, d2.stagnation_count) == (Next.REFINE, 1)
    d3 = decide(third, second, iteration=3, max_iterations=10, stagnation_count=d2.stagnation_count)
    assert d3.next == Next.STOP
    assert d3.reason == StopReason.STAGNATION
    assert d3.stagnation_count == STAGNATION_LIMIT


def test_score_drop_counts_as_stagnant() -> None:
    decision = decide(
        evaluation(score=0.4),
        evaluation(score=0.6),
        iteration=2,
        max_iterations=10,
        stagnation_count=1,
    )
    assert decision.reason == StopReason.STAGNATION


def test_cleared_blocker_resets_the_stagnation_count() -> None:
    previous = evaluation(score=0.5, blockers=("b1", "b2"))
    current = evaluation(score=0.5, blockers=("b2",))
    decision = decide(current, previous, iteration=3, max_iterations=10, stagnation_count=1)
    assert decision.next == Next.REFINE
    assert decision.stagnation_count == 0


def test_swapping_one_blocker_for_another_still_clears_one() -> None:
    previous = evaluation(score=0.5, blockers=("b1",))
    current = evaluation(score=0.5, blockers=("b2",))
    assert next_stagnation_count(previous, current, 1) == 0


def test_new_blocker_without_a_cleared_one_is_stagnant() -> None:
    previous = evaluation(score=0.5, blockers=("b1",))
    current = evaluation(score=0.5, blockers=("b1", "b2"))
    decision = decide(current, previous, iteration=3, max_iterations=10, stagnation_count=1)
    assert decision.reason == StopReason.STAGNATION


def test_progress_of_at_least_the_delta_resets_the_count() -> None:
    previous = evaluation(score=0.50)
    current = evaluation(score=0.55)
    decision = decide(current, previous, iteration=3, max_iterations=10, stagnation_count=1)
    assert decision.next == Next.REFINE
    assert decision.stagnation_count == 0


def test_iteration_limit_wins_over_stagnation_at_the_last_iteration() -> None:
    previous = evaluation(score=0.50)
    current = evaluation(score=0.50)
    decision = decide(current, previous, iteration=4, max_iterations=4, stagnation_count=1)
    assert decision.next == Next.STOP
    assert decision.reason == StopReason.ITERATION_LIMIT
    # The count is still tracked, so run state shows the loop was stagnating too.
    assert decision.stagnation_count == 2


def test_no_major_issues_wins_over_iteration_limit() -> None:
    failing = evaluation(score=0.3, blockers=(), warnings=("w1",))
    decision = decide(
        failing, evaluation(score=0.3), iteration=4, max_iterations=4, stagnation_count=5
    )
    assert decision.reason == StopReason.NO_MAJOR_ISSUES


def test_threshold_reached_wins_over_iteration_limit() -> None:
    passing = evaluation(Phase.B, score=0.95, passed=True, blockers=())
    decision = decide(passing, None, iteration=9, max_iterations=4, stagnation_count=5)
    assert decision.reason == StopReason.THRESHOLD_REACHED


# --- next_stagnation_count ------------------------------------------------------------------


def test_no_previous_evaluation_resets_to_zero() -> None:
    assert next_stagnation_count(None, evaluation(score=0.5), 7) == 0


def test_below_delta_increments() -> None:
    assert next_stagnation_count(evaluation(score=0.5), evaluation(score=0.5199), 3) == 4


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (0.5, 0.52),
        (0.0, 0.02),
        (0.98, 1.0),
        # In binary floating point these differences come out just under 0.02.
        (0.1, 0.12),
        (0.28, 0.3),
    ],
)
def test_delta_of_exactly_the_threshold_is_not_stagnant(before: float, after: float) -> None:
    assert STAGNATION_DELTA == 0.02
    assert next_stagnation_count(evaluation(score=before), evaluation(score=after), 1) == 0


# --- distance_to_success --------------------------------------------------------------------


def test_distance_to_success_fields() -> None:
    rules = [
        rule("f1"),
        rule("f2"),
        rule("f3"),
        rule("w1", "warn"),
        rule("i1", "info"),
        rule("b1", phase="B"),
    ]
    checks = [ok("f1"), ko("f2"), ko("w1"), ok("i1"), ok("b1")]  # f3 never checked
    ev = score_results(rules, checks, Phase.B, THRESHOLDS)
    distance = distance_to_success(ev)
    assert distance.phase == Phase.B
    assert distance.threshold == 0.9
    assert distance.score == ev.score == round(4 / 9, 4)
    assert distance.gap == round(0.9 - round(4 / 9, 4), 4)
    assert distance.failed_blocker_count == 2
    assert distance.blocking_rule_ids == ["f2", "f3"]  # warn w1 is not a blocker
    assert distance.passed_rules == 3  # f1, i1, b1
    assert distance.total_rules == 6


def test_distance_gap_is_rounded() -> None:
    distance = distance_to_success(evaluation(Phase.A, score=0.7))
    assert distance.gap == 0.1  # not 0.10000000000000009


def test_distance_gap_is_floored_at_zero() -> None:
    # Score above the threshold, yet failed: a blocker remains.
    distance = distance_to_success(evaluation(Phase.A, score=0.95, blockers=("b1",)))
    assert distance.gap == 0.0
    assert distance.failed_blocker_count == 1
    assert distance.blocking_rule_ids == ["b1"]


# --- should_audit ---------------------------------------------------------------------------


@pytest.mark.parametrize("draw", [0.0, 1e-12, 0.5, 0.999999])
def test_probability_zero_never_audits(draw: float) -> None:
    assert not should_audit(draw, 0.0)


@pytest.mark.parametrize("draw", [0.0, 0.5, 0.999999])
def test_probability_one_always_audits(draw: float) -> None:
    assert should_audit(draw, 1.0)


def test_audit_boundary() -> None:
    assert should_audit(0.1999, 0.2)
    assert not should_audit(0.2, 0.2)  # draw is uniform in [0, 1): P(draw < p) == p
    assert not should_audit(0.2001, 0.2)


# --- alias_for ------------------------------------------------------------------------------

SLUG = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


@pytest.mark.parametrize(
    "task",
    [
        "Fix the README typo",
        "OpenAPI 3.1 spec + DDD notes + JSON examples",
        "a",
        "!!!",
        "日本語のタスク",
        "Écrire un résumé — vite!",
        "x" * 500,
        " ".join(["word"] * 200),
        "  Hello,   World!!  ",
        "under_score.dot/slash\\back",
        "a b",
    ],
)
def test_alias_is_a_lowercase_hyphen_slug_of_3_to_64_chars(task: str) -> None:
    alias = alias_for(task)
    assert SLUG.match(alias), alias
    assert 3 <= len(alias) <= 64


@pytest.mark.parametrize(
    ("task", "alias"),
    [
        ("Fix the README typo", "fix-the-readme-typo"),
        ("  Hello,   World!!  ", "hello-world"),
        ("OpenAPI 3.1 spec", "openapi-3-1-spec"),
        ("Écrire un résumé", "ecrire-un-resume"),  # non-ASCII letters are transliterated
        ("über: API", "uber-api"),
        ("under_score.dot", "under-score-dot"),
    ],
)
def test_alias_transliterates_and_drops_punctuation(task: str, alias: str) -> None:
    assert alias_for(task) == alias


@pytest.mark.parametrize(
    ("task", "alias"),
    [("a", "a-loop"), ("Go", "go-loop"), ("!!!", "task"), ("🙂", "task"), ("a b", "a-b")],
)
def test_alias_pads_very_short_tasks(task: str, alias: str) -> None:
    assert alias_for(task) == alias


def test_alias_of_a_long_task_keeps_whole_leading_words() -> None:
    alias = alias_for("one two three four five six seven eight nine ten eleven twelve")
    assert alias == "one-two-three-four-five-six-seven-eight"
    assert not alias.endswith("-")


def test_alias_is_deterministic() -> None:
    task = "Write a migration guide for Postgres 16 (billing service)"
    assert alias_for(task) == alias_for(task) == "write-a-migration-guide-for-postgres-16"


def test_alias_keeps_the_start_of_a_very_long_first_word() -> None:
    assert alias_for("x" * 500) == "x" * 40


@pytest.mark.parametrize("reason", list(StopReason))
def test_only_threshold_and_no_major_issues_are_successes(reason: StopReason) -> None:
    expected = reason in (StopReason.THRESHOLD_REACHED, StopReason.NO_MAJOR_ISSUES)
    assert is_success(reason) is expected


@pytest.mark.parametrize(
    ("reason", "said"),
    [
        (StopReason.ITERATION_LIMIT, "the iteration limit (4) was reached"),
        (StopReason.STAGNATION, f"no progress in {STAGNATION_LIMIT} evaluations in a row"),
    ],
)
def test_a_stop_short_of_a_pass_says_why_and_where_the_loop_stood(
    reason: StopReason, said: str
) -> None:
    stuck = evaluation(Phase.B, score=0.5, blockers=("b1", "b2"))
    assert stop_message(reason, stuck, max_iterations=4) == (
        f"{said}: phase B scored 0.5 of 0.9, failing b1, b2"
    )


@pytest.mark.parametrize("reason", list(StopReason))
def test_a_halted_run_or_one_a_block_held_starts_no_skill_sub_loop(reason: StopReason) -> None:
    # Its generator is an agent with every workspace tool that no custodiet audits.
    why = no_skill_loop(reason, blocked=False)
    assert (why is not None) == (reason == StopReason.CRITIC_HALT)
    assert no_skill_loop(reason, blocked=True) is not None
    assert no_skill_loop(None, blocked=False) is None
