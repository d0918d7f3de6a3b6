"""A prep package as the preparation tool writes it (tests/fixtures/prep/, read as bytes and
used unchanged): its `target_skill` is `ccw-loop`, one task line was cut short and one has
no description, and its `auto_loop.max_iterations` is 6 (docs/graphs.md#prep-packages)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from loopworks.schemas.graph import GraphRequest, GraphState, TaskState
from loopworks.schemas.integration import IntegrationInfo
from loopworks.schemas.prep import (
    PREP_MAX_ITERATIONS,
    package_iterations,
    prep_package_errors,
    prep_tasks,
)
from loopworks.schemas.rules import CommandCheck
from loopworks.schemas.run import RunRequest
from loopworks.workflows.graph.inputs import (
    from_prep_package,
    loop_request,
    prep_for_graph,
    run_from_prep,
)
from loopworks.workflows.graph.workflow import _prep_before_as_written

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).parents[1] / "fixtures" / "prep"
PACKAGE_TEXT = (FIXTURES / "prep-package.json").read_bytes().decode()
TASKS_TEXT = (FIXTURES / "prep-tasks.jsonl").read_bytes().decode()
ROOT = "/home/dev/notes-app"  # the package's environment.project_root
# The tool wrote 20:15 UTC+8 labelled `Z`; an hour later, in UTC.
NOW = datetime(2026, 2, 8, 13, 15, tzinfo=UTC)
SKIPPED = [
    "line 2: not JSON (Unterminated string starting at column 209)",
    "line 4: description missing (a task needs both)",
]


def test_the_fixtures_are_the_files_as_written() -> None:
    # No editor or formatter touched them: the package keeps its blank lines, the tasks
    # file its line cut short.
    assert '"target_skill": "ccw-loop",\n\n  "environment"' in PACKAGE_TEXT
    assert TASKS_TEXT.splitlines()[1].endswith('"created_at":"2026-02-08T20:15:42.')


def test_the_package_passes_the_six_checks() -> None:
    package = json.loads(PACKAGE_TEXT)
    assert prep_package_errors(package, TASKS_TEXT, ROOT, NOW) == []
    package["target_skill"] = "other"
    assert prep_package_errors(package, TASKS_TEXT, ROOT, NOW) == [
        'target_skill is "other", expected "ccw-loop" or "loopworks"'
    ]


def test_the_unreadable_lines_are_skipped_and_named() -> None:
    read = prep_tasks(TASKS_TEXT)
    assert [task.id for task in read.tasks] == ["T-001", "T-003"]
    assert read.skipped == SKIPPED
    first, third = read.tasks
    assert first.title == "Add the Markdown exporter"
    assert first.verification_command == "python3 -c 'import notes.export'"
    assert third.requires == ["T-001"]
    assert third.context.files == ["tests/test_export.py"]


def test_auto_loop_sets_the_iteration_limit_and_10_stands_in() -> None:
    package = json.loads(PACKAGE_TEXT)
    assert package_iterations(package) == 6
    del package["auto_loop"]
    assert package_iterations(package) == PREP_MAX_ITERATIONS == 10
    assert package_iterations({"auto_loop": {"max_iterations": 50}}) == 20
    assert package_iterations({"auto_loop": {"max_iterations": "6"}}) == 10


def test_a_graph_takes_the_package_with_its_skipped_lines_listed() -> None:
    outcome = from_prep_package(PACKAGE_TEXT, TASKS_TEXT, ROOT, ["README.md"], NOW)
    assert outcome.errors == []
    assert [task.id for task in outcome.tasks] == ["T-001", "T-003"]
    assert outcome.skipped == SKIPPED
    assert outcome.max_iterations == 6
    assert outcome.source.startswith("prep package (collaborative-plan-with-file, sha256 ")


def _graph_state() -> GraphState:
    return GraphState(graph_id="g", goal="Export notes", origin=ROOT, integration_branch="b")


def _info(package_text: str, tasks_text: str) -> IntegrationInfo:
    return IntegrationInfo(
        origin=ROOT,
        branch="b",
        commit="c" * 40,
        files=["README.md"],
        prep_package=package_text,
        prep_tasks=tasks_text,
    )


def test_a_graph_started_before_decides_as_it_did() -> None:
    # The path a replay of such a graph takes (the `prep-package-as-written` patch): the
    # package is for ccw-loop and has unreadable lines, so it was rejected, and said why.
    request, state = GraphRequest(goal="Export notes"), _graph_state()
    assert _prep_before_as_written(request, state, _info(PACKAGE_TEXT, TASKS_TEXT), NOW) == []
    assert state.prep_rejected == ['target_skill is "ccw-loop", expected "loopworks"']
    assert state.source == "" and state.prep_skipped == []
    # Made a `loopworks` package, its unreadable lines still reject it, one error each.
    package = json.loads(PACKAGE_TEXT) | {"target_skill": "loopworks"}
    state = _graph_state()
    info = _info(json.dumps(package), TASKS_TEXT)
    assert _prep_before_as_written(request, state, info, NOW) == []
    assert state.prep_rejected == SKIPPED
    # With only readable lines it was taken, and set no iteration limit.
    readable = "\n".join(TASKS_TEXT.splitlines()[i] for i in (0, 2)) + "\n"
    state = _graph_state()
    info = _info(json.dumps(package), readable)
    tasks = _prep_before_as_written(request, state, info, NOW)
    assert [task.id for task in tasks] == ["T-001", "T-003"]
    assert state.prep_rejected == [] and state.source.startswith("prep package (")
    assert state.max_iterations is None


@pytest.mark.parametrize(("asked", "limit"), [(None, 6), (3, 3)])
def test_each_task_loop_gets_the_packages_limit_unless_the_request_sets_one(
    asked: int | None, limit: int
) -> None:
    request = GraphRequest(goal="Export notes", max_iterations=asked)
    state = GraphState(graph_id="g", goal="Export notes", origin=ROOT, integration_branch="b")
    info = IntegrationInfo(
        origin=ROOT,
        branch="b",
        commit="c" * 40,
        files=[],
        prep_package=PACKAGE_TEXT,
        prep_tasks=TASKS_TEXT,
    )
    tasks = prep_for_graph(request, state, info, NOW)
    assert state.prep_skipped == SKIPPED and state.prep_rejected == []
    assert state.max_iterations == limit
    assert loop_request(TaskState(task=tasks[0]), request, state).max_iterations == limit


def test_a_graph_without_a_package_keeps_the_request_limit_or_4() -> None:
    state = GraphState(graph_id="g", goal="g", origin=ROOT, integration_branch="b")
    task = prep_tasks(TASKS_TEXT).tasks[0]
    assert loop_request(TaskState(task=task), GraphRequest(goal="g"), state).max_iterations == 4
    seven = GraphRequest(goal="g", max_iterations=7)
    assert loop_request(TaskState(task=task), seven, state).max_iterations == 7
    # A task loop reads no package from the integration branch: the graph's task is its plan.
    assert loop_request(TaskState(task=task), seven, state).read_prep_package is False


def test_a_run_takes_the_packages_tasks_as_its_plan() -> None:
    outcome = from_prep_package(PACKAGE_TEXT, TASKS_TEXT, ROOT, None, NOW)
    request = RunRequest(task="Add a Markdown export", acceptance_criteria=["it is documented"])
    effective, plan = run_from_prep(request, outcome)
    assert plan == [
        "T-001 Add the Markdown exporter: Add the Markdown exporter: Create notes/export.py "
        "with export_markdown(notes), one heading per note Files: notes/export.py. "
        "Done when `python3 -c 'import notes.export'` exits 0.",
        "T-003 Test the exporter: Test the exporter: Add tests/test_export.py covering an "
        "empty list and two notes Files: tests/test_export.py. "
        "Done when `python3 -m unittest tests.test_export` exits 0.",
    ]
    assert effective.task.startswith("Add a Markdown export\n\nThe plan, from a prep package")
    assert f"1. {plan[0]}\n2. {plan[1]}" in effective.task
    assert [rule.id for rule in effective.rules] == ["T-001", "T-003"]
    check = effective.rules[1].check
    assert isinstance(check, CommandCheck)
    assert check.command == "python3 -m unittest tests.test_export"
    assert effective.acceptance_criteria == [
        "it is documented",
        "T-001: export_markdown returns one '# ' heading per note, in order",
        "T-003: an empty list exports to an empty string",
        "T-003: two notes export to two headings",
    ]
    assert effective.max_iterations == 6
    assert effective.prep_package is None
    asked = request.model_copy(update={"max_iterations": 2})
    assert run_from_prep(asked, outcome)[0].max_iterations == 2
