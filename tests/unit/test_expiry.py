"""Which finished runs' records the gc removes: the pure decision (workspace/expiry.py),
given what an origin holds, what Temporal says, the pins and the policy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from loopworks.schemas.retention import KeptBecause, RetentionPolicy
from loopworks.workspace.expiry import (
    OPEN,
    Known,
    Records,
    decide,
    to_ask,
    unit_of,
)

pytestmark = pytest.mark.unit

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
DAYS_30 = RetentionPolicy(days=30)


def ago(days: float) -> datetime:
    return NOW - timedelta(days=days)


def run(
    work_ref: bool = True,
    calls: int = 2,
    branch_days: float | None = None,
    clones: tuple[str, ...] = (),
) -> Records:
    """A run's records; with `branch_days`, its result branch made that long ago."""
    return Records(
        work_ref=work_ref,
        call_refs=calls,
        branch=None if branch_days is None else "refs/heads/loops/x",
        branch_time=None if branch_days is None else ago(branch_days),
        clones=clones,
        clone_bytes=100 * len(clones),
    )


def removed(plan: object) -> list[str]:
    return [removal.run_id for removal in plan.remove]  # type: ignore[attr-defined]


def test_no_policy_removes_nothing_and_asks_nothing() -> None:
    records = {"old": run(branch_days=900)}
    policy = RetentionPolicy()
    assert to_ask(records, policy) == set()
    assert decide(records, {"old": Known.closed(ago(900))}, set(), policy, NOW).remove == []


def test_a_run_finished_past_the_days_goes_a_recent_one_stays() -> None:
    records = {"old": run(clones=("old", "old.eval")), "new": run()}
    known = {"old": Known.closed(ago(31)), "new": Known.closed(ago(29))}
    plan = decide(records, known, set(), DAYS_30, NOW)
    [removal] = plan.remove
    assert removal.run_id == "old"
    assert (removal.work_ref, removal.call_refs, removal.branch) == (True, 2, False)
    assert removal.clones == ("old", "old.eval") and removal.clone_bytes == 200
    assert "31.0 days ago" in removal.reason and "LOOPS_RETENTION_DAYS=30" in removal.reason
    assert plan.kept == {"new": KeptBecause.WITHIN}


def test_zero_days_expires_a_run_the_moment_it_closed() -> None:
    plan = decide({"r": run()}, {"r": Known.closed(NOW)}, set(), RetentionPolicy(days=0), NOW)
    assert removed(plan) == ["r"]


def test_an_open_run_is_never_touched_however_old() -> None:
    """Running, paused, blocked or awaiting approval: its workflow is open."""
    records = {"waiting": run(branch_days=400)}
    plan = decide(records, {"waiting": OPEN}, set(), RetentionPolicy(days=0), NOW)
    assert plan.remove == []
    assert plan.kept == {"waiting": KeptBecause.OPEN}


def test_a_pinned_run_never_expires() -> None:
    records = {"keep": run(), "drop": run()}
    known = {"keep": Known.closed(ago(400)), "drop": Known.closed(ago(400))}
    plan = decide(records, known, {"keep"}, RetentionPolicy(days=0), NOW)
    assert removed(plan) == ["drop"]
    assert plan.kept == {"keep": KeptBecause.PINNED}


def test_a_run_temporal_forgot_has_finished_when_its_branch_did() -> None:
    """History retention expired: the branch's tip time is when it finished; without a
    branch it may still be in flight (or another deployment's), so it stays."""
    records = {
        "forgotten-old": run(branch_days=40),
        "forgotten-new": run(branch_days=10),
        "no-branch": run(),
    }
    plan = decide(records, {}, set(), DAYS_30, NOW)
    assert removed(plan) == ["forgotten-old"]
    assert plan.kept == {
        "forgotten-new": KeptBecause.WITHIN,
        "no-branch": KeptBecause.UNKNOWN,
    }


def test_a_temporal_close_time_wins_over_the_branch_time() -> None:
    records = {"r": run(branch_days=100)}
    plan = decide(records, {"r": Known.closed(ago(1))}, set(), DAYS_30, NOW)
    assert plan.kept == {"r": KeptBecause.WITHIN}


def test_the_result_branch_goes_only_when_the_policy_says() -> None:
    records = {"r": run(branch_days=40)}
    known = {"r": Known.closed(ago(40))}
    [kept_branch] = decide(records, known, set(), DAYS_30, NOW).remove
    assert not kept_branch.branch
    with_branches = RetentionPolicy(days=30, branches=True)
    [gone] = decide(records, known, set(), with_branches, NOW).remove
    assert gone.branch


def test_a_run_holding_only_its_branch_is_not_asked_about_unless_branches_go() -> None:
    records = {"done": Records(branch="refs/heads/loops/done", branch_time=ago(90))}
    assert to_ask(records, DAYS_30) == set()
    assert decide(records, {}, set(), DAYS_30, NOW) == decide({}, {}, set(), DAYS_30, NOW)
    with_branches = RetentionPolicy(days=30, branches=True)
    assert to_ask(records, with_branches) == {"done"}
    [removal] = decide(records, {}, set(), with_branches, NOW).remove
    assert (removal.work_ref, removal.call_refs, removal.branch) == (False, 0, True)


def test_keep_per_repo_keeps_the_newest_finished_unpinned_and_not_the_open() -> None:
    records = {name: run() for name in ("a", "b", "c", "d", "e", "running")}
    known = {
        "a": Known.closed(ago(1)),
        "b": Known.closed(ago(2)),
        "c": Known.closed(ago(3)),
        "d": Known.closed(ago(4)),
        "e": Known.closed(ago(5)),
        "running": OPEN,
    }
    plan = decide(records, known, {"a"}, RetentionPolicy(keep_per_repo=2), NOW)
    # `a` is pinned and `running` open: neither counts, so b and c are the newest two.
    assert removed(plan) == ["d", "e"]
    assert "newest 2" in plan.remove[0].reason
    assert plan.kept == {
        "a": KeptBecause.PINNED,
        "running": KeptBecause.OPEN,
        "b": KeptBecause.WITHIN,
        "c": KeptBecause.WITHIN,
    }


def test_days_and_count_together_expire_by_whichever_comes_first() -> None:
    records = {name: run() for name in ("a", "b", "c")}
    known = {"a": Known.closed(ago(1)), "b": Known.closed(ago(40)), "c": Known.closed(ago(2))}
    plan = decide(records, known, set(), RetentionPolicy(days=30, keep_per_repo=1), NOW)
    assert sorted(removed(plan)) == ["b", "c"]


def test_task_loops_follow_their_graph() -> None:
    """A graph's task loops go with the graph once it has finished and expired; its
    integration branch (the graph's result) never goes, even with branches asked."""
    records = {
        "g": Records(call_refs=1, branch="refs/heads/graphs/g", branch_time=ago(50)),
        "g/a/1": run(branch_days=50, clones=("g/a/1",)),
        "g/b/1": run(branch_days=50),
        "g/b/2": run(branch_days=50),
    }
    policy = RetentionPolicy(days=30, branches=True)
    assert to_ask(records, policy) == {"g", "g/a/1", "g/b/1", "g/b/2"}
    # The graph open: none of it goes, however old its loops' branches.
    still = decide(records, {"g": OPEN}, set(), policy, NOW)
    assert still.remove == [] and set(still.kept.values()) == {KeptBecause.OPEN}
    known = {"g": Known.closed(ago(40)), "g/b/2": Known.closed(ago(41))}
    plan = decide(records, known, {"g/b/1"}, policy, NOW)
    assert removed(plan) == ["g", "g/a/1", "g/b/2"]
    graph, loop, _ = plan.remove
    assert not graph.branch and graph.call_refs == 1
    assert loop.branch and loop.clones == ("g/a/1",)
    assert loop.reason.startswith("its graph g finished 40.0 days ago")
    assert plan.kept == {"g/b/1": KeptBecause.PINNED}


def test_a_graph_temporal_does_not_know_is_kept_with_its_loops() -> None:
    """Its integration branch is made at its start, so its tip time said nothing of its
    end: a graph in flight (another deployment's on a shared origin) lost its task
    loops' records as the gc took it for finished."""
    records = {
        "g": Records(branch="refs/heads/graphs/g", branch_time=ago(1 / 24)),
        "g/a/1": run(),
        **{f"run-{n}": run(branch_days=n / 1440) for n in range(3)},
    }
    plan = decide(records, {}, set(), RetentionPolicy(keep_per_repo=3), NOW)
    assert removed(plan) == []
    assert plan.kept["g/a/1"] == KeptBecause.UNKNOWN


def test_a_pinned_graph_keeps_its_task_loops() -> None:
    records = {"g/a/1": run(), "g": Records(call_refs=3)}
    plan = decide(records, {"g": Known.closed(ago(90))}, {"g"}, DAYS_30, NOW)
    assert plan.remove == []
    assert plan.kept == {"g": KeptBecause.PINNED, "g/a/1": KeptBecause.PINNED}


def test_a_task_loop_still_open_stays_when_its_graph_closed() -> None:
    records = {"g/a/1": run(), "g/b/1": run()}
    known = {"g": Known.closed(ago(90)), "g/a/1": OPEN, "g/b/1": Known.closed(ago(91))}
    plan = decide(records, known, set(), DAYS_30, NOW)
    assert removed(plan) == ["g/b/1"]
    assert plan.kept == {"g/a/1": KeptBecause.OPEN}


def test_a_graph_counts_once_for_keep_per_repo() -> None:
    records = {"g/a/1": run(), "g/b/1": run(), "older": run()}
    known = {"g": Known.closed(ago(1)), "older": Known.closed(ago(2))}
    plan = decide(records, known, set(), RetentionPolicy(keep_per_repo=1), NOW)
    assert removed(plan) == ["older"]


def test_ids_of_other_shapes_are_not_runs() -> None:
    assert unit_of("run-1") == "run-1"
    assert unit_of("g/t/2") == "g"
    assert unit_of("r/skills") is None
    records = {"r/skills": run()}
    assert to_ask(records, RetentionPolicy(days=0)) == set()
    assert decide(records, {}, set(), RetentionPolicy(days=0), NOW) == decide(
        {}, {}, set(), RetentionPolicy(days=0), NOW
    )
