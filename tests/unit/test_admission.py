"""Admission's and a client's day's decisions, without Temporal (api/admission.py,
api/spend.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from loopworks.api import admission, quotas, spend
from loopworks.api.admission import Holder, Verdict, lock_verdict, verdict
from loopworks.api.security import refusal_to_start
from loopworks.schemas.admission import Spent
from loopworks.schemas.run import Budget
from loopworks.schemas.settings import Settings

pytestmark = pytest.mark.unit

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)


def test_a_caps_slots_are_its_limit_many_and_a_clients_are_its_own() -> None:
    settings = Settings(LOOPS_MAX_RUNS_PER_CLIENT="2", LOOPS_MAX_RUNS="3")
    runs = quotas.caps(settings, quotas.Kind.RUNS)
    assert quotas.slot_ids("q", quotas.Kind.RUNS, runs.per_client, "alice") == [
        "slot/q/runs/client/alice/0",
        "slot/q/runs/client/alice/1",
    ]
    assert quotas.slot_ids("q", quotas.Kind.RUNS, runs.overall, "alice") == [
        "slot/q/runs/all/0",
        "slot/q/runs/all/1",
        "slot/q/runs/all/2",
    ]
    graphs = quotas.caps(Settings(LOOPS_MAX_GRAPHS="0"), quotas.Kind.GRAPHS)
    assert quotas.slot_ids("q", quotas.Kind.GRAPHS, graphs.overall, "alice") == []
    assert admission.day_lock_id("q", "alice") == "slot/q/day/client/alice"


@pytest.mark.parametrize(
    ("slot_open", "holder", "claimed_for", "expected"),
    [
        (False, Holder.OPEN, SECOND, Verdict.FREE),
        (True, Holder.OPEN, timedelta(days=3), Verdict.HELD),
        # Closed without giving it back: terminated, timed out.
        (True, Holder.CLOSED, SECOND, Verdict.FREE),
        # Claimed a moment ago: its start may be on its way.
        (True, Holder.MISSING, SECOND, Verdict.HELD),
        (True, Holder.MISSING, admission.START_GRACE - SECOND, Verdict.HELD),
        # Its API process is gone: burn the holder's id, then free.
        (True, Holder.MISSING, admission.START_GRACE, Verdict.ORPHANED),
    ],
)
def test_whether_a_taken_slot_is_held(
    slot_open: bool, holder: Holder, claimed_for: timedelta, expected: Verdict
) -> None:
    assert verdict(slot_open, holder, claimed_for) == expected


@pytest.mark.parametrize(
    ("lock_open", "holder", "held_for", "expected"),
    [
        (False, Holder.MISSING, SECOND, Verdict.FREE),
        # Held while a budget is decided, whatever its holder is by now.
        (True, Holder.MISSING, SECOND, Verdict.HELD),
        (True, Holder.OPEN, SECOND, Verdict.HELD),
        # Held too long: its process died after starting its run, or before.
        (True, Holder.OPEN, admission.LOCK_GRACE, Verdict.FREE),
        (True, Holder.CLOSED, admission.LOCK_GRACE, Verdict.FREE),
        (True, Holder.MISSING, admission.LOCK_GRACE, Verdict.ORPHANED),
    ],
)
def test_whether_a_day_lock_is_held(
    lock_open: bool, holder: Holder, held_for: timedelta, expected: Verdict
) -> None:
    assert lock_verdict(lock_open, holder, held_for) == expected


@pytest.mark.parametrize(
    ("error", "outright"),
    [
        (WorkflowAlreadyStartedError("r", "LoopWorkflow"), True),
        (RPCError("bad", RPCStatusCode.INVALID_ARGUMENT, b""), True),
        # It may have started: the slots stay until a claim finds the run or its absence.
        (RPCError("slow", RPCStatusCode.DEADLINE_EXCEEDED, b""), False),
        (RPCError("down", RPCStatusCode.UNAVAILABLE, b""), False),
        (TimeoutError(), False),
    ],
)
def test_which_failed_starts_give_their_slots_back_at_once(
    error: BaseException, outright: bool
) -> None:
    assert admission.refused_outright(error) is outright


def _day(tokens: int = 0, usd: float = 0) -> Settings:
    return Settings(LOOPS_CLIENT_DAY_TOKENS=str(tokens), LOOPS_CLIENT_DAY_USD=str(usd))


def _counted(hours_ago: float, tokens: int = 0, usd: float = 0) -> spend.Counted:
    return spend.Counted(f"r-{hours_ago}", NOW - timedelta(hours=hours_ago), tokens, usd)


def test_without_a_day_limit_the_budget_is_the_requests() -> None:
    asked = Budget(max_tokens=500)
    assert spend.day_budget_for(asked, _day(), [_counted(1, 10**9, 10**6)], "a", NOW) == asked
    assert not spend.limited(_day())
    assert spend.limited(_day(usd=1))


def test_the_days_limit_joins_the_runs_budget() -> None:
    counted = [_counted(1, tokens=60_000, usd=6), _counted(2, tokens=10_000, usd=1)]
    settings = _day(tokens=100_000, usd=10)
    # Asked for more than is left: what is left.
    given = spend.day_budget_for(
        Budget(max_tokens=50_000, max_cost_usd=5), settings, counted, "a", NOW
    )
    assert (given.max_tokens, given.max_cost_usd) == (30_000, 3)
    # Asked for less: what it asked. Asked for nothing: what is left.
    assert spend.day_budget_for(Budget(max_cost_usd=1), settings, counted, "a", NOW) == Budget(
        max_tokens=30_000, max_cost_usd=1
    )
    assert spend.day_budget_for(None, settings, counted, "a", NOW) == Budget(
        max_tokens=30_000, max_cost_usd=3
    )


def test_runs_older_than_a_day_count_nothing() -> None:
    counted = [_counted(25, usd=10), _counted(23, usd=4)]
    given = spend.day_budget_for(None, _day(usd=10), counted, "a", NOW)
    assert given.max_cost_usd == 6


def test_nothing_left_is_a_429_naming_the_limit_what_is_left_and_when() -> None:
    counted = [_counted(20, usd=6), _counted(3, usd=3.995)]
    with pytest.raises(spend.DayLimitReached) as raised:
        spend.day_budget_for(Budget(max_cost_usd=1), _day(usd=10), counted, "alice", NOW)
    refused = raised.value
    assert refused.status_code == 429
    assert refused.fields == {"limit": "LOOPS_CLIENT_DAY_USD", "left": pytest.approx(0.005)}
    # When the run started 20 hours ago leaves the day.
    assert refused.headers["Retry-After"] == str(4 * 3600)
    assert "'alice' has $0.005 of LOOPS_CLIENT_DAY_USD ($10.00) left" in refused.message

    with pytest.raises(spend.DayLimitReached) as tokens:
        spend.day_budget_for(None, _day(tokens=5000), [_counted(1, tokens=4500)], "a", NOW)
    assert tokens.value.fields == {"limit": "LOOPS_CLIENT_DAY_TOKENS", "left": 500}
    assert "500 tokens of LOOPS_CLIENT_DAY_TOKENS (5000 tokens) left" in tokens.value.message


def test_a_run_counts_what_it_spent_else_its_whole_budget() -> None:
    assert spend.counts(Budget(max_tokens=10, max_cost_usd=2), Spent(tokens=3, cost_usd=0.5)) == (
        3,
        0.5,
    )
    assert spend.counts(Budget(max_tokens=10, max_cost_usd=2), None) == (10, 2)
    # Started before any limit, with no budget: nothing to count.
    assert spend.counts(None, None) == (0, 0.0)


def test_retry_after_is_when_the_oldest_leaves_the_day() -> None:
    assert spend.retry_after([], NOW) == 24 * 3600
    assert spend.retry_after([_counted(23.5), _counted(1)], NOW) == 1800
    assert spend.retry_after([_counted(24)], NOW) == 1


def test_the_days_query_is_the_clients_runs_and_graphs_started_in_it() -> None:
    query = spend.window_query('q"1', 'al"ice', NOW - spend.WINDOW)
    assert 'WorkflowType IN ("LoopWorkflow", "TaskGraphWorkflow")' in query
    assert 'TaskQueue = "q\\"1"' in query and 'LoopStartedBy = "al\\"ice"' in query
    assert "LoopGraph IS NULL" in query and 'StartTime > "2026-02-28T12:00:00+00:00"' in query


@pytest.mark.parametrize(
    ("variables", "refused"),
    [
        ({"LOOPS_CLIENT_DAY_USD": "10"}, False),
        ({"LOOPS_CLIENT_DAY_USD": "10", "LOOPS_MAX_RUNS_PER_CLIENT": "0"}, True),
        ({"LOOPS_CLIENT_DAY_TOKENS": "10000", "LOOPS_MAX_GRAPHS_PER_CLIENT": "0"}, True),
        ({"LOOPS_MAX_RUNS_PER_CLIENT": "0"}, False),
    ],
)
def test_a_day_limit_needs_the_per_client_caps(variables: dict[str, str], refused: bool) -> None:
    said = refusal_to_start(Settings(**variables))  # type: ignore[arg-type]
    assert (said is not None) is refused
    if said:
        assert "LOOPS_MAX_RUNS_PER_CLIENT" in said and "LOOPS_MAX_GRAPHS_PER_CLIENT" in said
