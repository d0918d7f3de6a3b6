"""Run ids made from task aliases are valid Temporal workflow ids and git ref components."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime

import pytest

from loopworks.api.launch import new_run_id
from loopworks.workflows.decisions import ALIAS_MAX_LENGTH, alias_for
from loopworks.workspace.refs import work_ref

pytestmark = pytest.mark.unit

TASKS = [
    "Fix the README typo",
    "日本語のタスク",
    "Écrire un résumé — vite!",
    "ǅ ß ﬁ ① ½ ™",
    "🙂🙂",
    "..lock .lock",
    "refs/heads/main~1^2:@{0}",
    "a\u00a0b\u200bc\td\ne",
    "&amp; &#x41; &#66;",
    "-leading and trailing-",
    "x" * 500,
    "word " * 200,
]


@pytest.mark.parametrize("task", TASKS)
def test_run_id_of_any_task_is_a_valid_workflow_id_and_ref(task: str) -> None:
    alias = alias_for(task)
    assert 3 <= len(alias) <= ALIAS_MAX_LENGTH
    run_id = new_run_id(alias, datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    # Temporal takes any non-empty id up to its length limit; the workspace is stricter.
    assert len(run_id) <= 128
    ref = work_ref(run_id)  # raises on an id unusable as a directory and ref name
    checked = subprocess.run(["git", "check-ref-format", ref], capture_output=True)
    assert checked.returncode == 0, ref
