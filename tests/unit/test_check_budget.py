"""One deadline for an evaluation group's checks (checks/budget.py, docs/loop.md#bounded-checks):
what a check the budget overtakes says, how it scores, and that it runs again."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from loopworks.checks.budget import BUDGET_SPENT, CheckBudget, command_within, match_within
from loopworks.schemas.evaluation import CheckResult
from loopworks.schemas.rules import (
    CommandCheck,
    PatternCheck,
    PreparedCheck,
    Rule,
    Severity,
)
from loopworks.schemas.run import Thresholds
from loopworks.workflows.checking import known_results
from loopworks.workflows.decisions import score_results

pytestmark = pytest.mark.unit

# RE2's slow case: a few seconds over 512 KiB of random `a`s and `b`s.
HEAVY = "[ab]{0,600}a[ab]{740}c"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_budget_counts_down_and_names_what_it_left_unchecked() -> None:
    clock = Clock()
    budget = CheckBudget(30, clock=clock)
    assert budget.remaining() == 30
    clock.now += 31
    assert budget.remaining() == -1
    spent = budget.spent("partial output")
    assert not spent.passed and spent.unchecked
    assert spent.detail.startswith(f"{BUDGET_SPENT}: not checked")
    assert "30 s (LOOPS_CHECK_BUDGET_S)" in spent.detail and spent.detail.endswith("partial output")


async def test_a_pattern_after_the_deadline_is_not_searched() -> None:
    clock = Clock()
    budget = CheckBudget(1, clock=clock)
    clock.now += 2
    outcome = await match_within(PatternCheck(pattern="a"), "a\n", budget)
    assert outcome.unchecked and not outcome.passed


async def test_a_search_the_deadline_overtakes_is_given_up_at_the_deadline() -> None:
    rng = random.Random(7)
    text = "".join(rng.choice("ab") for _ in range(1 << 19))
    started = time.monotonic()
    outcome = await match_within(PatternCheck(pattern=HEAVY), text, CheckBudget(0.5))
    elapsed = time.monotonic() - started
    assert outcome.unchecked and outcome.detail.startswith(BUDGET_SPENT)
    # The search itself takes seconds; the evaluation does not wait for it.
    assert elapsed < 2.0, elapsed


async def test_a_quick_pattern_within_the_budget_is_decided() -> None:
    outcome = await match_within(PatternCheck(pattern="^b"), "a\nb\n", CheckBudget(30))
    assert outcome.passed and not outcome.unchecked


async def test_a_command_the_deadline_overtakes_is_killed_and_unchecked(tmp_path: Path) -> None:
    check = CommandCheck(command="echo started; sleep 30", timeout_seconds=600)
    started = time.monotonic()
    outcome = await command_within(check, tmp_path, CheckBudget(1.0))
    assert time.monotonic() - started < 10
    assert outcome.unchecked and not outcome.passed
    assert outcome.detail.startswith(BUDGET_SPENT) and "started" in outcome.detail


async def test_a_command_that_times_out_on_its_own_is_failed_not_unchecked(
    tmp_path: Path,
) -> None:
    check = CommandCheck(command="sleep 30", timeout_seconds=0.5)
    outcome = await command_within(check, tmp_path, CheckBudget(60))
    assert outcome.timed_out and not outcome.unchecked
    assert outcome.detail.startswith("timed out after 0.5s")


async def test_no_command_starts_once_the_budget_is_spent(tmp_path: Path) -> None:
    clock = Clock()
    budget = CheckBudget(1, clock=clock)
    clock.now += 1
    outcome = await command_within(CommandCheck(command="touch ran"), tmp_path, budget)
    assert outcome.unchecked and not (tmp_path / "ran").exists()


def test_an_unchecked_rule_fails_and_the_evaluation_names_it() -> None:
    rules = [
        Rule(id="checked", description="d", severity=Severity.FAIL, check="c"),
        Rule(id="late", description="d", severity=Severity.WARN, check="c"),
    ]
    results = [
        CheckResult(rule_id="checked", passed=True),
        CheckResult(rule_id="late", passed=False, detail=BUDGET_SPENT, unchecked=True),
    ]
    evaluation = score_results(rules, results, rules[0].phase, Thresholds())
    assert evaluation.unchecked == ["late"]
    assert [r.passed for r in evaluation.results] == [True, False]


def test_a_result_left_unchecked_is_not_reused_on_the_same_commit() -> None:
    done = PreparedCheck(rule_id="done", check=PatternCheck(pattern="a"))
    late = PreparedCheck(rule_id="late", check=PatternCheck(pattern="b"))
    checked = [
        (done, CheckResult(rule_id="done", passed=True)),
        (late, CheckResult(rule_id="late", passed=False, unchecked=True)),
    ]
    known = known_results(checked, "c1", "c1")
    assert [result.rule_id for result in known.values()] == ["done"]
    assert known_results(checked, "c1", "c2") == {}
