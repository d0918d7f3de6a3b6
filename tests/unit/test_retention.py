"""Which clones the worker's sweep removes: the pure decision, given idle times, sizes,
the age kept and the total cap."""

from __future__ import annotations

import pytest

from loopworks.workspace.retention import (
    IN_USE_SECONDS,
    Clone,
    RetentionPolicy,
    to_remove,
)

pytestmark = pytest.mark.unit

HOUR = 3600.0
DAY = RetentionPolicy(keep_seconds=24 * HOUR)


def test_clones_idle_past_the_age_kept_go_the_rest_stay() -> None:
    clones = [
        Clone("fresh", idle_seconds=60),
        Clone("yesterday", idle_seconds=23 * HOUR),
        Clone("old", idle_seconds=25 * HOUR),
        Clone(".cache/abc", idle_seconds=30 * HOUR),
    ]
    decision = to_remove(clones, DAY)
    assert decision.remove == [".cache/abc", "old"]  # longest idle first
    assert decision.over_by == 0


def test_exactly_the_age_kept_is_old_enough() -> None:
    assert to_remove([Clone("a", idle_seconds=24 * HOUR)], DAY).remove == ["a"]


def test_no_age_below_the_in_use_window_removes_a_clone_a_step_may_hold() -> None:
    """LOOPS_KEEP_CLONES_HOURS=0 still keeps a clone used within the window: its run may
    be in a step (an agent step holds its clone up to an hour)."""
    policy = RetentionPolicy(keep_seconds=0)
    clones = [
        Clone("in-a-step", idle_seconds=30 * 60),
        Clone("done", idle_seconds=IN_USE_SECONDS + 1),
    ]
    assert to_remove(clones, policy).remove == ["done"]


def test_over_the_total_the_longest_idle_go_until_under() -> None:
    policy = RetentionPolicy(keep_seconds=24 * HOUR, max_bytes=250)
    clones = [
        Clone("new", idle_seconds=3 * HOUR, bytes=100),
        Clone("older", idle_seconds=5 * HOUR, bytes=100),
        Clone("oldest", idle_seconds=8 * HOUR, bytes=100),
    ]
    decision = to_remove(clones, policy)
    assert decision.remove == ["oldest"]
    assert decision.kept_bytes == 200
    assert decision.over_by == 0


def test_the_age_goes_first_then_the_total() -> None:
    policy = RetentionPolicy(keep_seconds=24 * HOUR, max_bytes=100)
    clones = [
        Clone("expired", idle_seconds=48 * HOUR, bytes=10),
        Clone("a", idle_seconds=4 * HOUR, bytes=80),
        Clone("b", idle_seconds=6 * HOUR, bytes=80),
    ]
    decision = to_remove(clones, policy)
    assert decision.remove == ["expired", "b"]
    assert decision.kept_bytes == 80


def test_clones_in_use_are_kept_over_the_total_and_the_excess_is_reported() -> None:
    policy = RetentionPolicy(keep_seconds=24 * HOUR, max_bytes=100)
    clones = [
        Clone("idle", idle_seconds=3 * HOUR, bytes=50),
        Clone("running", idle_seconds=10, bytes=120),
        Clone("running-too", idle_seconds=IN_USE_SECONDS - 1, bytes=30),
    ]
    decision = to_remove(clones, policy)
    assert decision.remove == ["idle"]
    assert decision.kept_bytes == 150
    assert decision.over_by == 50


def test_under_the_total_nothing_young_is_removed() -> None:
    policy = RetentionPolicy(keep_seconds=24 * HOUR, max_bytes=1000)
    clones = [Clone("a", idle_seconds=10 * HOUR, bytes=400), Clone("b", 5 * HOUR, bytes=400)]
    assert to_remove(clones, policy).remove == []


def test_nothing_on_disk_nothing_to_do() -> None:
    decision = to_remove([], RetentionPolicy(keep_seconds=0, max_bytes=0))
    assert decision.remove == [] and decision.over_by == 0
