"""A task and a ledger line as docs/graphs.md gives them, and the one validator every task
graph goes through."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest
from pydantic import ValidationError

from loopworks.schemas.graph import GraphRequest, GraphState, TaskState
from loopworks.schemas.proof import PROOF_TIMEOUT_SECONDS
from loopworks.schemas.tasks import (
    LEDGER_PATH,
    MAX_CRITERIA,
    MAX_DECLARED_FILES,
    GraphError,
    LedgerLine,
    Task,
    TaskContext,
    TaskStatus,
    graph_errors,
    latest_lines,
    ledger_lines,
    task_file,
    task_json,
    validated_graph,
    verification_check,
)
from loopworks.workflows.graph.inputs import loop_request

pytestmark = pytest.mark.unit

# The task example of docs/graphs.md#tasks, with a real id.
DOCUMENTED_TASK: dict[str, Any] = {
    "id": "T-003",
    "title": "Short descriptive title",
    "description": "Detailed explanation of the goal",
    "requires": ["T-001", "T-002"],
    "context": {
        "files": ["app/src/path/to/file.js"],
        "docs": ["docs/vision/project-goals.md"],
        "skills": ["task-indexer"],
    },
    "acceptance_criteria": [
        "Criterion 1 (e.g. Component renders without errors)",
        "Criterion 2 (e.g. Data persists to PocketBase)",
    ],
    "verification_command": "npm test or custom shell command",
}

# A ledger as docs/graphs.md#the-ledger gives it.
LEDGER = [
    '{"id": "T-001", "status": "pending", "updated_at": "2026-02-07T15:00:00Z", '
    '"summary": "Task initialized by Orchestrator"}',
    '{"id": "T-001", "status": "in-progress", "updated_at": "2026-02-07T15:10:00Z", '
    '"summary": "Assigned to Ralph-Task"}',
    '{"id": "T-001", "status": "completed", "updated_at": "2026-02-07T15:30:00Z", '
    '"summary": "Successfully initialized PB client", '
    '"delta": {"files_added": ["app/src/lib/pb.js"]}}',
]


def task(
    task_id: str,
    requires: tuple[str, ...] = (),
    files: tuple[str, ...] = (),
    verification: str = "pytest -q",
) -> Task:
    return Task(
        id=task_id,
        title=f"task {task_id}",
        description=f"do {task_id}",
        requires=list(requires),
        context=TaskContext(files=list(files)),
        acceptance_criteria=["it works"],
        verification_command=verification,
    )


# --- the task -----------------------------------------------------------------------------


def test_seed_task_round_trips() -> None:
    parsed = Task.model_validate(DOCUMENTED_TASK)
    assert parsed.model_dump(mode="json") == DOCUMENTED_TASK
    assert json.loads(task_json(parsed)) == DOCUMENTED_TASK
    assert list(json.loads(task_json(parsed))) == list(DOCUMENTED_TASK)  # the documented key order


@pytest.mark.parametrize("task_id", ["T-001", "T-1234", "T-001-fix-1", "T-012-fix-10"])
def test_task_ids_as_documented(task_id: str) -> None:
    assert task(task_id).id == task_id


@pytest.mark.parametrize("task_id", ["T-1", "T-01", "TASK-001", "t-001", "T-001-fix", "T-001 "])
def test_other_ids_are_refused(task_id: str) -> None:
    with pytest.raises(ValidationError, match="id"):
        task(task_id)


def test_a_task_needs_a_title_a_criterion_and_a_verification_command() -> None:
    with pytest.raises(ValidationError) as raised:
        Task.model_validate(
            {"id": "T-001", "title": " ", "description": "d", "acceptance_criteria": []}
        )
    fields = {error["loc"][0] for error in raised.value.errors()}
    assert fields == {"title", "acceptance_criteria", "verification_command"}


def test_context_paths_are_repository_relative() -> None:
    context = TaskContext(files=["./app//main.py", "app/main.py", "docs/x/../y.md"])
    assert context.files == ["app/main.py", "docs/y.md"]
    for path in ("/etc/passwd", "../elsewhere.py", ""):
        with pytest.raises(ValidationError):
            TaskContext(files=[path])


def test_every_task_field_is_described_for_a_planner() -> None:
    schema = Task.model_json_schema()
    assert all("description" in field for field in schema["properties"].values())
    context = schema["$defs"]["TaskContext"]["properties"]
    assert all("description" in field for field in context.values())
    assert "relative to the repository root" in context["files"]["description"]


def test_a_task_holds_no_more_than_its_loop_takes() -> None:
    """A task's loop is a run: a task past the run request's bounds made its loop's
    request fail inside the graph's workflow, whose task then failed forever and hung the
    graph. Refused as a task, it is a 422 for a client and a repair for the planner."""
    graph = GraphState(graph_id="g", goal="g", origin="/repo", integration_branch="graphs/g")
    widest = {
        **DOCUMENTED_TASK,
        "description": "x" * 30_000,
        "acceptance_criteria": [f"criterion {n}" for n in range(MAX_CRITERIA)],
        "context": {"files": [f"src/f{n}.py" for n in range(MAX_DECLARED_FILES)]},
    }
    loop = loop_request(TaskState(task=Task.model_validate(widest)), GraphRequest(goal="g"), graph)
    assert len(loop.acceptance_criteria) == MAX_CRITERIA
    assert len(loop.declared_files) == MAX_DECLARED_FILES

    for field, past in (
        ("acceptance_criteria", [f"criterion {n}" for n in range(MAX_CRITERIA + 1)]),
        ("context", {"files": [f"src/f{n}.py" for n in range(MAX_DECLARED_FILES + 1)]}),
    ):
        with pytest.raises(ValidationError, match="at most"):
            Task.model_validate({**widest, field: past})
    schema = json.dumps(Task.model_json_schema())
    assert f'"maxItems": {MAX_CRITERIA}' in schema, "the planner is not told"
    assert f'"maxItems": {MAX_DECLARED_FILES}' in schema, "the planner is not told"


def test_a_verification_command_has_one_limit_wherever_it_runs() -> None:
    """Its loop's rule took a command check's default 60 s while its proof took 600 and
    the merge queue 300: a suite of two minutes never passed its loop, and one of six
    minutes passed its loop and then failed at merge. The planner is told the limit."""
    graph = GraphState(graph_id="g", goal="g", origin="/repo", integration_branch="graphs/g")
    given = Task.model_validate(DOCUMENTED_TASK)
    loop = loop_request(TaskState(task=given), GraphRequest(goal="g"), graph)
    [rule] = loop.rules
    assert rule.check == verification_check(given.verification_command)
    assert verification_check("pytest -q").timeout_seconds == PROOF_TIMEOUT_SECONDS
    assert f"after {int(PROOF_TIMEOUT_SECONDS)} seconds" in json.dumps(Task.model_json_schema())


def test_task_file_paths() -> None:
    assert task_file(task("T-007")) == "docs/tasks/T-007.json"
    assert task_file("T-007-fix-1") == "docs/tasks/T-007-fix-1.json"
    assert LEDGER_PATH == "docs/current/task-status.jsonl"


# --- the ledger ---------------------------------------------------------------------------


@pytest.mark.parametrize("line", LEDGER)
def test_seed_ledger_lines_round_trip_unchanged(line: str) -> None:
    assert LedgerLine.model_validate_json(line).to_jsonl() == line


def test_our_ledger_fields_are_written_when_set() -> None:
    line = LedgerLine(
        id="T-002-fix-1",
        status=TaskStatus.FAILED,
        updated_at="2026-02-07T16:00:00Z",
        summary="verification failed",
        attempt=2,
        run_id="add-client-20260207-160000-abc123",
        exit_code=1,
        output_sha256="ab" * 32,
    )
    written = json.loads(line.to_jsonl())
    assert written["attempt"] == 2
    assert written["exit_code"] == 1
    assert "delta" not in written
    assert LedgerLine.model_validate_json(line.to_jsonl()) == line
    first = LedgerLine(id="T-002", status="pending", updated_at="t", exit_code=0)
    assert json.loads(first.to_jsonl()) == {
        "id": "T-002",
        "status": "pending",
        "updated_at": "t",
        "summary": "",
        "exit_code": 0,
    }
    multiline = LedgerLine(id="T-002", status="failed", updated_at="t", summary="a\nb")
    assert "\n" not in multiline.to_jsonl()


def test_the_latest_line_of_each_task_wins() -> None:
    text = "\n".join([*LEDGER, "", LEDGER[0].replace("T-001", "T-002")]) + "\n"
    lines = ledger_lines(text)
    assert len(lines) == 4
    latest = latest_lines(lines)
    assert latest["T-001"].status == TaskStatus.COMPLETED
    assert latest["T-001"].delta == {"files_added": ["app/src/lib/pb.js"]}
    assert latest["T-002"].status == TaskStatus.PENDING


# --- the validator ------------------------------------------------------------------------


def test_a_sound_graph_passes() -> None:
    tasks = [task("T-001"), task("T-002", ("T-001",)), task("T-003", ("T-001", "T-002"))]
    assert graph_errors(tasks, existing_files=[]) == []
    assert validated_graph(tasks) == tasks


def test_an_empty_graph_is_refused() -> None:
    assert graph_errors([]) == ["the task graph is empty: a goal needs at least one task"]


def test_a_duplicate_id_is_named() -> None:
    errors = graph_errors([task("T-001"), task("T-002"), task("T-001")])
    assert errors == ["T-001 is defined 2 times: task ids must be unique"]


def test_a_missing_requirement_is_named() -> None:
    errors = graph_errors([task("T-001"), task("T-002", ("T-001", "T-009"))])
    assert errors == ["T-002 requires T-009, which is not a task of the graph"]


def test_a_given_task_named_as_a_fix_is_refused() -> None:
    """`T-001-fix-1` counts for T-001 (its dependants start once it merges): a client's
    task so named let T-002 start and complete while T-001 was still failing."""
    tasks = [task("T-001"), task("T-001-fix-1"), task("T-002", ("T-001",))]
    [error] = graph_errors(tasks)
    assert error.startswith("T-001-fix-1 is named as a fix task")


def test_a_cycle_names_every_task_on_it() -> None:
    tasks = [
        task("T-001"),
        task("T-002", ("T-001", "T-004")),
        task("T-003", ("T-002",)),
        task("T-004", ("T-003",)),
        task("T-005", ("T-004",)),  # after the cycle, not on it
    ]
    [error] = graph_errors(tasks)
    assert error.startswith("T-002, T-003, T-004 form a cycle")
    assert "T-002 requires T-004 requires T-003 requires T-002" in error
    assert "T-001" not in error and "T-005" not in error


def test_two_cycles_and_a_self_requirement_are_each_named() -> None:
    tasks = [
        task("T-001", ("T-002",)),
        task("T-002", ("T-001",)),
        task("T-003", ("T-003",)),
        task("T-004", ("T-005",)),
        task("T-005", ("T-004",)),
    ]
    errors = graph_errors(tasks)
    assert errors == [
        "T-001, T-002 form a cycle (T-001 requires T-002 requires T-001): none of them can "
        "ever start",
        "T-003 requires itself (a cycle): it can never start",
        "T-004, T-005 form a cycle (T-004 requires T-005 requires T-004): none of them can "
        "ever start",
    ]


def test_a_long_chain_is_no_recursion_problem() -> None:
    tasks = [task("T-0000")] + [task(f"T-{i:04d}", (f"T-{i - 1:04d}",)) for i in range(1, 3000)]
    assert graph_errors(tasks) == []
    tasks[0] = task("T-0000", ("T-2999",))
    [error] = graph_errors(tasks)
    assert error.startswith("T-0000, T-0001, ")


@pytest.mark.parametrize("command", ["", "   ", "\n"])
def test_a_blank_verification_command_is_named(command: str) -> None:
    errors = graph_errors([task("T-001"), task("T-002", verification=command)])
    assert errors == [
        "T-002 has no verification command: give a shell command that exits 0 exactly when "
        "the task is done"
    ]


def test_more_than_three_existing_files_must_be_split() -> None:
    existing = {"a.py", "b.py", "c.py", "d.py", "README.md"}
    three = task("T-001", files=("a.py", "b.py", "c.py", "new_1.py", "new_2.py"))
    four = task("T-002", files=("a.py", "new.py", "b.py", "c.py", "d.py"))
    errors = graph_errors([three, four], existing_files=existing)
    assert errors == [
        "T-002 modifies 4 existing files (a.py, b.py, c.py, d.py); split it into tasks of at most 3"
    ]
    # Without the repository's files, the atomic rule is not checked.
    assert graph_errors([three, four]) == []


def test_every_problem_is_reported_at_once() -> None:
    tasks = [
        task("T-001", files=("a", "b", "c", "d")),
        task("T-001"),
        task("T-002", ("T-404",), verification=""),
        task("T-003", ("T-004",)),
        task("T-004", ("T-003",)),
    ]
    errors = graph_errors(tasks, existing_files={"a", "b", "c", "d"})
    assert len(errors) == 5
    assert errors[0].startswith("T-001 is defined 2 times")
    assert errors[1].startswith("T-001 modifies 4 existing files")
    assert errors[2].startswith("T-002 requires T-404")
    assert errors[3].startswith("T-002 has no verification command")
    assert errors[4].startswith("T-003, T-004 form a cycle")
    with pytest.raises(GraphError) as raised:
        validated_graph(tasks, existing_files={"a", "b", "c", "d"})
    assert raised.value.errors == errors
    assert str(raised.value) == "; ".join(errors)


def test_a_graph_error_is_a_value_error_that_survives_pickling() -> None:
    error = GraphError(["T-001 one", "T-002 two"])
    assert isinstance(error, ValueError)
    copy = pickle.loads(pickle.dumps(error))
    assert copy.errors == ["T-001 one", "T-002 two"]
    assert str(copy) == "T-001 one; T-002 two"
