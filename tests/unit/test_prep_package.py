"""A prep package (docs/graphs.md#prep-packages): its six checks, its tasks as graph tasks,
its hash."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from loopworks.schemas.prep import (
    DEFAULT_CRITERION,
    PrepPackage,
    package_sha256,
    prep_package_errors,
    prep_tasks,
)
from loopworks.schemas.tasks import graph_errors

pytestmark = pytest.mark.unit

NOW = datetime(2026, 2, 8, 12, 0, tzinfo=UTC)
ROOT = "/work/project"
TASKS_TEXT = '{"id": "task-001", "description": "Add the client: a PocketBase client"}\n'


def package(**changes: Any) -> dict[str, Any]:
    """A package that passes every check (the shape the preparation tool writes)."""
    data: dict[str, Any] = {
        "version": "1.0.0",
        "generated_at": (NOW - timedelta(hours=2)).isoformat(),
        "prep_status": "ready",
        "target_skill": "loopworks",
        "environment": {"project_root": ROOT, "tech_stack": "python"},
        "source": {"tool": "collaborative-plan-with-file", "session_id": "CPLAN-x"},
        "tasks": {"total": 1, "by_priority": {"high": 1}},
        "auto_loop": {"enabled": True, "max_iterations": 10},
    }
    data.update(changes)
    return data


def test_a_sound_package_passes_every_check() -> None:
    assert prep_package_errors(package(), TASKS_TEXT, ROOT, NOW) == []
    # The preparation tool's own name for the loop it prepares for is taken too.
    assert prep_package_errors(package(target_skill="ccw-loop"), TASKS_TEXT, ROOT, NOW) == []
    parsed = PrepPackage.model_validate(package())
    assert parsed.source is not None and parsed.source.tool == "collaborative-plan-with-file"
    assert parsed.tasks.total == 1


# Each of the six checks failing alone: how to break it, and what the failure must say.
BREAKS: dict[str, tuple[Callable[[], tuple[dict[str, Any], str | None]], str]] = {
    "status": (
        lambda: (package(prep_status="cancelled"), TASKS_TEXT),
        'prep_status is "cancelled", expected "ready"',
    ),
    "target_skill": (
        lambda: (package(target_skill="ccw-cycle"), TASKS_TEXT),
        'target_skill is "ccw-cycle", expected "ccw-loop" or "loopworks"',
    ),
    "project_root": (
        lambda: (package(environment={"project_root": "/elsewhere"}), TASKS_TEXT),
        'project_root mismatch: prep="/elsewhere", current="/work/project"',
    ),
    "age": (
        lambda: (package(generated_at=(NOW - timedelta(hours=25)).isoformat()), TASKS_TEXT),
        "prep-package is 25h old (max 24h), may be stale",
    ),
    "tasks_file": (lambda: (package(), None), "prep-tasks.jsonl not found"),
    "task_count": (
        lambda: (package(tasks={"total": 0}), TASKS_TEXT),
        "task count is 0: tasks.total must be above 0",
    ),
}


@pytest.mark.parametrize("check", list(BREAKS))
def test_each_check_fails_alone_and_is_named(check: str) -> None:
    make, message = BREAKS[check]
    data, tasks_text = make()
    assert prep_package_errors(data, tasks_text, ROOT, NOW) == [message]


def test_all_six_failures_are_reported_together() -> None:
    stale = {
        "prep_status": "draft",
        "target_skill": "ccw-cycle",
        "environment": {"project_root": "/elsewhere"},
        "generated_at": "2026-02-07T11:00:00+00:00",
        "tasks": {"total": 0},
    }
    assert prep_package_errors(stale, None, ROOT, NOW) == [
        'prep_status is "draft", expected "ready"',
        'target_skill is "ccw-cycle", expected "ccw-loop" or "loopworks"',
        'project_root mismatch: prep="/elsewhere", current="/work/project"',
        "prep-package is 25h old (max 24h), may be stale",
        "prep-tasks.jsonl not found",
        "task count is 0: tasks.total must be above 0",
    ]


def test_an_empty_object_fails_every_check_without_raising() -> None:
    errors = prep_package_errors({}, None, ROOT, NOW)
    assert len(errors) == 6
    assert "generated_at is missing: the package's age cannot be checked" in errors
    odd = {"environment": "here", "tasks": {"total": True}, "generated_at": 1707000000}
    errors = prep_package_errors(odd, TASKS_TEXT, ROOT, NOW)
    assert "generated_at 1707000000 is not an ISO 8601 date-time" in errors
    assert "task count is True: tasks.total must be above 0" in errors


@pytest.mark.parametrize(
    ("generated_at", "fresh"),
    [
        ((NOW - timedelta(hours=24)).isoformat(), True),  # at most 24 h old passes
        ((NOW - timedelta(hours=24, minutes=1)).isoformat(), False),
        # The preparation tool writes UTC+8 times labelled `Z`: 8 h ahead is fresh.
        ((NOW + timedelta(hours=8)).strftime("%Y-%m-%dT%H:%M:%S.000Z"), True),
        ((NOW + timedelta(hours=30)).isoformat(), False),
        ("2026-02-08T10:00:00", True),  # no zone: read as UTC
    ],
)
def test_the_age_window(generated_at: str, fresh: bool) -> None:
    errors = prep_package_errors(package(generated_at=generated_at), TASKS_TEXT, ROOT, NOW)
    assert (errors == []) is fresh


def test_a_future_package_is_named_as_such() -> None:
    ahead = package(generated_at=(NOW + timedelta(hours=30)).isoformat())
    [error] = prep_package_errors(ahead, TASKS_TEXT, ROOT, NOW)
    assert error.startswith("prep-package is dated 30h in the future")


def test_project_roots_compare_as_paths() -> None:
    data = package(environment={"project_root": ROOT + "/"})
    assert prep_package_errors(data, TASKS_TEXT, ROOT, NOW) == []


# --- prep-tasks.jsonl -----------------------------------------------------------------------


def test_ccw_loop_task_lines_become_graph_tasks() -> None:
    lines = [
        {
            "id": "task-001",
            "description": "Implement JWT token service: Create JWT service with refresh",
            "tool": "gemini",
            "status": "pending",
            "priority": 1,
            "files_changed": ["src/auth/jwt.ts", {"path": "src/auth/index.ts"}],
            "_convergence": {
                "criteria": ["tokens expire after 15 minutes"],
                "verification": "npm test -- jwt",
            },
            "_depends_on": [],
        },
        {
            "id": "task-002",
            "description": "Add OAuth2 Google strategy",
            "files_changed": [],
            "_depends_on": ["task-001"],
        },
    ]
    read = prep_tasks("\n".join(json.dumps(line) for line in lines) + "\n")
    first, second = read.tasks
    assert read.skipped == []
    assert first.id == "T-001"
    assert first.title == "Implement JWT token service"
    assert first.description == lines[0]["description"]
    assert first.context.files == ["src/auth/jwt.ts", "src/auth/index.ts"]
    assert first.acceptance_criteria == ["tokens expire after 15 minutes"]
    assert first.verification_command == "npm test -- jwt"
    assert second.id == "T-002"
    assert second.requires == ["T-001"]
    assert second.acceptance_criteria == [DEFAULT_CRITERION]
    # No command is guessed: the graph validator names the missing one.
    assert graph_errors([first, second]) == [
        "T-002 has no verification command: give a shell command that exits 0 exactly when "
        "the task is done"
    ]


def test_a_line_in_task_shape_is_taken_as_it_is() -> None:
    line = {
        "id": "T-010",
        "title": "Client",
        "description": "Add the client",
        "requires": ["T-009"],
        "context": {"files": ["a.py"], "docs": ["docs/x.md"], "skills": ["task-indexer"]},
        "acceptance_criteria": ["imports"],
        "verification_command": "python -c 'import a'",
    }
    [parsed] = prep_tasks(json.dumps(line)).tasks
    assert parsed.model_dump(mode="json") == line


def test_bad_lines_are_skipped_and_each_named_by_number() -> None:
    text = "\n".join(
        [
            '{"id": "task-001", "description": "fine"}',
            "{not json",
            "",
            '["a list"]',
            '{"id": "task-005"}',
            '{"id": "setup", "description": "no number in the id"}',
            '{"id": "T-007", "description": "d", "acceptance_criteria": ["  "]}',
        ]
    )
    read = prep_tasks(text)
    assert [task.id for task in read.tasks] == ["T-001"]
    assert read.skipped == [
        "line 2: not JSON (Expecting property name enclosed in double quotes at column 2)",
        "line 4: not a JSON object",
        "line 5: description missing (a task needs both)",
        "line 6: id 'setup' is not a task id like T-001",
        "line 7 (T-007): acceptance_criteria.0: String should have at least 1 character",
    ]


def test_blank_text_has_no_tasks() -> None:
    assert prep_tasks("\n\n").tasks == []


def test_the_package_hash_names_both_files() -> None:
    first = package_sha256('{"a": 1}', TASKS_TEXT)
    assert first == package_sha256('{"a": 1}', TASKS_TEXT)
    assert len(first) == 64
    assert first != package_sha256('{"a": 1}', TASKS_TEXT + "\n")
    # Text moved from one file to the other is another pair.
    assert package_sha256("ab", "c") != package_sha256("a", "bc")
