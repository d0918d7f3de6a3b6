"""A task graph's pure decisions: what starts, what is stranded, when it is done, fixes."""

from __future__ import annotations

import re

import pytest

from loopworks.schemas.tasks import TASK_ID_PATTERN, Task, TaskContext, TaskStatus
from loopworks.workflows.graph.decisions import (
    FAILURE_MAX,
    archive_due,
    counts,
    downstream,
    fix_task,
    fixes_by_root,
    graph_done,
    requirement_met,
    root_id,
    startable,
    stranded,
)

pytestmark = pytest.mark.unit

PENDING = TaskStatus.PENDING
RUNNING = TaskStatus.IN_PROGRESS
DONE = TaskStatus.COMPLETED
FAILED = TaskStatus.FAILED
BLOCKED = TaskStatus.BLOCKED


def task(task_id: str, requires: tuple[str, ...] = (), files: tuple[str, ...] = ()) -> Task:
    return Task(
        id=task_id,
        title=f"task {task_id}",
        description=f"do {task_id}",
        requires=list(requires),
        context=TaskContext(files=list(files)),
        acceptance_criteria=["it works"],
        verification_command=f"test -f {task_id}",
    )


A, B, C, D = "T-001", "T-002", "T-003", "T-004"
# The diamond: A, then B and C side by side, then D.
DIAMOND = [
    task(A, files=("a.py",)),
    task(B, (A,), files=("b.py",)),
    task(C, (A,), files=("c.py",)),
    task(D, (B, C), files=("d.py",)),
]


def status(**by_id: TaskStatus) -> dict[str, TaskStatus]:
    """Statuses by letter (`a=DONE`); the rest pending."""
    letters = {"a": A, "b": B, "c": C, "d": D}
    return {letters[letter]: value for letter, value in by_id.items()}


# --- startable ----------------------------------------------------------------------------


def test_the_diamond_runs_in_dependency_order() -> None:
    assert startable(DIAMOND, {}, running=(), max_parallel=4) == [A]
    assert startable(DIAMOND, status(a=RUNNING), running={A}, max_parallel=4) == []
    assert startable(DIAMOND, status(a=DONE), running=(), max_parallel=4) == [B, C]
    assert startable(DIAMOND, status(a=DONE, b=DONE, c=RUNNING), {C}, 4) == []
    assert startable(DIAMOND, status(a=DONE, b=DONE, c=DONE), (), 4) == [D]
    assert startable(DIAMOND, status(a=DONE, b=DONE, c=DONE, d=DONE), (), 4) == []


def test_max_parallel_counts_the_running_tasks() -> None:
    assert startable(DIAMOND, status(a=DONE), running=(), max_parallel=1) == [B]
    assert startable(DIAMOND, status(a=DONE, b=RUNNING), {B}, max_parallel=1) == []
    assert startable(DIAMOND, status(a=DONE, b=RUNNING), {B}, max_parallel=2) == [C]
    assert startable(DIAMOND, status(a=DONE), running=(), max_parallel=0) == []


def test_a_task_running_but_not_yet_in_the_ledger_does_not_start_twice() -> None:
    assert startable(DIAMOND, status(a=DONE), running={B}, max_parallel=4) == [C]


def test_tasks_sharing_a_file_do_not_run_together() -> None:
    tasks = [
        task(A),
        task(B, (A,), files=("shared.py", "b.py")),
        task(C, (A,), files=("c.py", "shared.py")),
        task(D, (A,), files=("d.py",)),
    ]
    # Picked in graph order: B takes shared.py, so C waits.
    assert startable(tasks, status(a=DONE), running=(), max_parallel=4) == [B, D]
    # A running task's files are taken too.
    assert startable(tasks, status(a=DONE, c=RUNNING), {C}, max_parallel=4) == [D]
    assert startable(tasks, status(a=DONE, b=DONE), running=(), max_parallel=4) == [C, D]


def test_a_completed_fix_meets_the_requirement_on_the_failed_task() -> None:
    fix = task(f"{A}-fix-1")
    tasks = [*DIAMOND, fix]
    failed = {A: FAILED, fix.id: PENDING}
    assert startable(tasks, failed, running=(), max_parallel=4) == [fix.id]
    assert startable(tasks, {A: FAILED, fix.id: DONE}, running=(), max_parallel=4) == [B, C]


def test_only_pending_tasks_start() -> None:
    assert startable(DIAMOND, {A: FAILED}, running=(), max_parallel=4) == []
    assert startable(DIAMOND, {A: BLOCKED}, running=(), max_parallel=4) == []


# --- downstream, stranded, done -------------------------------------------------------------


def test_downstream_is_every_task_that_transitively_requires_one() -> None:
    assert downstream(DIAMOND, A) == {B, C, D}
    assert downstream(DIAMOND, B) == {D}
    assert downstream(DIAMOND, D) == set()
    assert downstream(DIAMOND, "T-404") == set()


def test_tasks_behind_a_failure_are_stranded() -> None:
    assert stranded(DIAMOND, status(a=FAILED)) == [B, C, D]
    assert stranded(DIAMOND, status(a=DONE, b=BLOCKED, c=DONE)) == [D]
    assert stranded(DIAMOND, status(a=DONE, b=RUNNING)) == []
    # A pending fix may still complete: nothing is stranded yet.
    fix = task(f"{A}-fix-1")
    assert stranded([*DIAMOND, fix], {A: FAILED}) == []
    assert stranded([*DIAMOND, fix], {A: FAILED, fix.id: FAILED}) == [B, C, D]


def test_the_graph_is_done_when_nothing_can_still_run() -> None:
    assert not graph_done(DIAMOND, {})
    assert not graph_done(DIAMOND, status(a=DONE, b=DONE, c=RUNNING))
    assert graph_done(DIAMOND, status(a=DONE, b=DONE, c=DONE, d=DONE))
    assert graph_done(DIAMOND, status(a=FAILED))
    assert graph_done(DIAMOND, status(a=DONE, b=FAILED, c=DONE))
    assert not graph_done(DIAMOND, status(a=DONE, b=FAILED))  # C can still run
    assert graph_done(DIAMOND, status(a=DONE, b=FAILED, c=DONE, d=BLOCKED))
    fix = task(f"{B}-fix-1")
    assert not graph_done([*DIAMOND, fix], status(a=DONE, b=FAILED, c=DONE))


def test_counts_list_every_status() -> None:
    assert counts(status(a=DONE, b=DONE, c=FAILED, d=PENDING)) == {
        "pending": 1,
        "in-progress": 0,
        "completed": 2,
        "failed": 1,
        "blocked": 0,
    }
    assert counts({}) == dict.fromkeys([value.value for value in TaskStatus], 0)


# --- fix tasks ------------------------------------------------------------------------------


def test_fix_tasks_are_numbered_from_the_task_they_fix() -> None:
    failed = DIAMOND[1]
    first = fix_task(failed, DIAMOND, "AssertionError: b")
    assert first.id == "T-002-fix-1"
    second = fix_task(failed, [*DIAMOND, first], "again")
    assert second.id == "T-002-fix-2"
    # The second fix failed in its turn: the third is still numbered from T-002.
    third = fix_task(second, [*DIAMOND, first, second], "and again")
    assert third.id == "T-002-fix-3"
    assert root_id(third.id) == B
    assert Task.model_validate(third.model_dump()).id == third.id
    for fix in (first, second, third):
        assert fix.requires == [A]
        assert fix.context == failed.context
        assert fix.acceptance_criteria == failed.acceptance_criteria
        assert fix.verification_command == failed.verification_command
        assert fix.title == "Fix T-002: task T-002"
    assert third.description.startswith("do T-002\n\nT-002-fix-2 was attempted and failed")
    assert third.description.endswith("The failure:\nand again")
    assert failed.id == B  # the failed task is left as it was


def test_a_fix_quotes_the_end_of_a_long_failure() -> None:
    failure = "x" * 5000 + "FAILED tests/test_b.py::test_it"
    fix = fix_task(DIAMOND[1], DIAMOND, failure)
    quoted = fix.description.split("The failure:\n", 1)[1]
    assert len(quoted) == FAILURE_MAX
    assert quoted.startswith("...") and quoted.endswith("FAILED tests/test_b.py::test_it")
    assert "(no output)" in fix_task(DIAMOND[1], DIAMOND, "  ").description


def test_fix_ids_match_the_task_id_pattern() -> None:
    fix = fix_task(task("T-1234"), [], "boom")
    assert re.match(TASK_ID_PATTERN, fix.id)
    assert fix.id == "T-1234-fix-1"


# --- archiving ------------------------------------------------------------------------------


def test_completed_task_files_are_archived_past_ten() -> None:
    ids = [f"T-{n:03d}" for n in range(1, 13)]
    ten = dict.fromkeys(ids[:10], DONE) | {ids[10]: FAILED, ids[11]: PENDING}
    assert archive_due(ids, ten) == []
    eleven = ten | {ids[10]: DONE}
    assert archive_due(ids, eleven) == ids[:11]
    # Files already archived are not in docs/tasks/ any more.
    assert archive_due(ids[5:], eleven) == []


def test_fixes_by_root_and_requirement_met() -> None:
    tasks = [*DIAMOND, task(f"{A}-fix-1"), task(f"{A}-fix-2"), task(f"{C}-fix-1")]
    fixes = fixes_by_root(tasks)
    assert fixes == {A: [f"{A}-fix-1", f"{A}-fix-2"], C: [f"{C}-fix-1"]}
    assert not requirement_met(A, {A: FAILED, f"{A}-fix-1": FAILED}, fixes)
    assert requirement_met(A, {A: FAILED, f"{A}-fix-2": DONE}, fixes)
    assert requirement_met(B, {B: DONE}, fixes)
