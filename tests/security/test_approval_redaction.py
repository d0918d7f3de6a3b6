"""Exploit: a client pastes a secret into an approval (a run's note, a graph's note and
the tasks it edits). The note reaches the next model step's prompt and the run's history,
the tasks each loop's; so the API redacts them before any workflow gets them, as it does
a task, a goal, a stop reason and a clear-block note (docs/api.md#redaction)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from temporalio.client import WorkflowExecutionStatus

from loopworks.api import graph_handles, run_handles
from loopworks.api.deps import LoopHandle
from loopworks.checks.redaction import REDACTED
from loopworks.schemas.graph import GraphApproval
from loopworks.schemas.run import Approval
from loopworks.schemas.tasks import Task
from loopworks.workflows.graph.workflow import GRAPH_WORKFLOW
from loopworks.workflows.loop import LOOP_WORKFLOW
from tests.api.fake_temporal import FakeDescription, run_state

pytestmark = pytest.mark.unit

MODEL_KEY = "sk-ant-api03-" + "Zx9" * 16


@dataclass
class RecordingHandle:
    """A workflow that takes every update and keeps what it was sent."""

    workflow_type: str
    id: str = "run-1"
    sent: list[Any] = field(default_factory=list)

    async def describe(self, **_: Any) -> FakeDescription:
        return FakeDescription(WorkflowExecutionStatus.RUNNING, self.workflow_type)

    async def execute_update(self, update: Any, *args: Any, **_: Any) -> Any:
        self.sent.extend(args)
        return run_state(self.id)


@pytest.fixture(autouse=True)
def model_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", MODEL_KEY)


async def test_a_runs_approval_note_reaches_the_workflow_redacted() -> None:
    handle = RecordingHandle(LOOP_WORKFLOW)
    await run_handles.approve(
        cast(LoopHandle, handle), Approval(note=f"go ahead, the key is {MODEL_KEY}")
    )

    [approval] = handle.sent
    assert approval.note == f"go ahead, the key is {REDACTED}"


async def test_a_graphs_approval_note_and_edited_tasks_reach_the_workflow_redacted() -> None:
    handle = RecordingHandle(GRAPH_WORKFLOW)
    task = Task(
        id="T-001",
        title=f"Rotate {MODEL_KEY}",
        description=f"Replace {MODEL_KEY} everywhere",
        acceptance_criteria=[f"{MODEL_KEY} appears nowhere"],
        verification_command="true",
    )
    approval = GraphApproval(tasks=[task], note=f"use {MODEL_KEY}")
    await graph_handles.approve(cast(graph_handles.GraphHandle, handle), approval)

    [sent] = handle.sent
    assert MODEL_KEY not in sent.model_dump_json()
    assert sent.note == f"use {REDACTED}"
    assert sent.tasks[0].title == f"Rotate {REDACTED}"
    # What it does is left as written: redacting a command would change it.
    assert sent.tasks[0].verification_command == "true"
