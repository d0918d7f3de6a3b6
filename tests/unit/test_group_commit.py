"""Group commit (workspace/group_commit.py): items that arrive while a run for their key is
in progress go together in the next run, and each caller gets its own item's outcome."""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from loopworks.workspace.group_commit import GroupCommit, GroupFailed

pytestmark = pytest.mark.unit


class Interrupted(BaseException):
    """Not an Exception: what a thread ends with when it is told to stop."""


class Recorder:
    """A run that records the groups it got and answers each item doubled; it holds the
    very first run until `release` is set, and fails a group holding -1 (or -2: Interrupted)."""

    def __init__(self) -> None:
        self.groups: list[tuple[Hashable, list[int]]] = []
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, key: Hashable, items: list[int]) -> list[int]:
        self.groups.append((key, list(items)))
        if len(self.groups) == 1:
            self.started.set()
            assert self.release.wait(10)
        if -1 in items:
            raise ValueError(f"{key} refused the group {items}")
        if -2 in items:
            raise Interrupted(f"interrupted during {items}")
        return [item * 2 for item in items]


def test_an_item_alone_is_run_at_once() -> None:
    recorder = Recorder()
    recorder.release.set()
    grouped = GroupCommit(recorder)
    assert grouped.put("origin", 21) == 42
    assert recorder.groups == [("origin", [21])]


def behind_a_held_run(
    pool: ThreadPoolExecutor, items: list[int]
) -> tuple[GroupCommit[int, int], Recorder, Future[int], list[Future[int]]]:
    """Item 1 put and its run held; `items` put meanwhile; the run then let go."""
    recorder = Recorder()
    grouped = GroupCommit(recorder)
    first = pool.submit(grouped.put, "origin", 1)
    assert recorder.started.wait(10)
    waiting = [pool.submit(grouped.put, "origin", n) for n in items]
    time.sleep(0.3)  # they reach the group before the first run ends
    recorder.release.set()
    return grouped, recorder, first, waiting


def test_items_arriving_during_a_run_go_together_in_the_next() -> None:
    with ThreadPoolExecutor(max_workers=8) as pool:
        _, recorder, first, waiting = behind_a_held_run(pool, [2, 3, 4, 5, 6, 7])
        assert first.result(10) == 2
        assert [w.result(10) for w in waiting] == [4, 6, 8, 10, 12, 14]
    assert recorder.groups == [("origin", [1]), ("origin", [2, 3, 4, 5, 6, 7])]


def test_a_run_holds_up_no_other_keys() -> None:
    recorder = Recorder()
    grouped = GroupCommit(recorder)
    with ThreadPoolExecutor(max_workers=1) as pool:
        first = pool.submit(grouped.put, "origin", 1)
        assert recorder.started.wait(10)
        assert grouped.put("elsewhere", 100) == 200
        recorder.release.set()
        assert first.result(10) == 2


def test_a_failed_run_fails_every_item_it_carried_and_only_those() -> None:
    with ThreadPoolExecutor(max_workers=4) as pool:
        grouped, _, first, runner_up = behind_a_held_run(pool, [-1, 3])
        assert first.result(10) == 2
        outcomes = []
        for future in runner_up:
            with pytest.raises((ValueError, GroupFailed), match=r"refused the group \[-1, 3\]"):
                future.result(10)
            outcomes.append(type(future.exception()))
    # The thread that ran the group raises the run's own error, the other one a
    # GroupFailed; a later item is run as ever.
    assert sorted(o.__name__ for o in outcomes) == ["GroupFailed", "ValueError"]
    assert grouped.put("origin", 5) == 10


def test_a_run_ended_by_anything_still_lets_its_group_and_the_next_go() -> None:
    with ThreadPoolExecutor(max_workers=4) as pool:
        grouped, _, first, runner_up = behind_a_held_run(pool, [-2, 3])
        assert first.result(10) == 2
        failures = [type(future.exception(10)).__name__ for future in runner_up]
    assert sorted(failures) == ["GroupFailed", "Interrupted"]
    assert grouped.put("origin", 5) == 10
