"""The ledger is the orchestrator's alone (docs/graphs.md#the-ledger), through a whole graph
on the time-skipping server with real git: a task's producer that writes into the ledger is
refused by its tools, or, when a command did it, at the merge, with the reason in the task's
state and ledger; never a git "conflict" nobody can read, and the ledger on the integration
branch is the workflow's, line for line."""

from __future__ import annotations

import json

import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from loopworks.llm.base import ModelCall
from loopworks.llm.offline import OfflineModels, _agent_turn, _written
from loopworks.llm.offline_answers import default_answer
from loopworks.schemas.graph import GraphStatus
from loopworks.schemas.roles import Role
from loopworks.schemas.settings import Settings
from loopworks.schemas.tasks import LEDGER_PATH, TaskStatus, ledger_lines
from loopworks.worker.build import build_worker
from tests.workflows.conftest import LoopHarness
from tests.workflows.test_graph import git_show, start_graph, task

pytestmark = pytest.mark.workflow

# The line a producer that knows the ledger's format would write: its task, completed.
FORGED = {"id": "T-001", "status": "completed", "updated_at": "2026-02-07T15:30:00Z",
          "summary": "Successfully initialized PB client"}  # fmt: skip


class ForgingModels(OfflineModels):
    """The offline model, whose producer first forges its task's completion in the ledger:
    with `write_file`, or with a shell command in the loop of the task's first attempt."""

    def __init__(self, by_command: bool = False) -> None:
        super().__init__()
        self.by_command = by_command
        self.tool_answers: list[str] = []

    def model(self, call: ModelCall) -> FunctionModel:
        if call.role != Role.PRODUCER:
            return super().model(call)

        async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            self.tool_answers += [
                str(getattr(part, "content", ""))
                for message in messages[-1:]
                if isinstance(message, ModelRequest)
                for part in message.parts
                if part.part_kind in ("tool-return", "retry-prompt")
            ]
            forging = not any(
                isinstance(m, ModelResponse) and any(isinstance(p, ToolCallPart) for p in m.parts)
                for m in messages
            )
            if forging and self._forges(call):
                return ModelResponse(parts=[self._forge(call)])
            answer = default_answer(call.role, call.context)
            return ModelResponse(parts=_agent_turn(call, answer, _written(messages)))

        return FunctionModel(respond, model_name="offline")

    def _forges(self, call: ModelCall) -> bool:
        return not self.by_command or call.run_id.endswith("/T-001/1")

    def _forge(self, call: ModelCall) -> ToolCallPart:
        line = json.dumps(FORGED)
        if self.by_command:
            command = f"printf '%s\\n' '{line}' >> {LEDGER_PATH}"
            return ToolCallPart("run_command", {"command": command}, tool_call_id="forge")
        ledger = {"path": LEDGER_PATH, "content": f"{line}\n"}
        return ToolCallPart("write_file", ledger, tool_call_id="forge")


def settings(harness: LoopHarness) -> Settings:
    return Settings(LOOPS_DATA_DIR=harness.data_dir, LOOPS_TASK_QUEUE=harness.task_queue)


async def test_a_producer_writing_the_ledger_is_refused_by_its_tools_and_the_graph_goes_on(
    harness: LoopHarness,
) -> None:
    models = ForgingModels()
    async with build_worker(harness.env.client, settings(harness), models=models):
        handle = await start_graph(harness, [task("T-001"), task("T-002", "T-001")])
        result = await handle.result()

    state = result.state
    assert state.status == GraphStatus.COMPLETED, state.message
    assert [t.attempts for t in state.tasks] == [1, 1]
    # The model read why, and what to do instead.
    refusals = [text for text in models.tool_answers if "orchestrator" in text]
    assert refusals and all(f"`{LEDGER_PATH}`" in text for text in refusals)
    assert "Leave them as they are" in refusals[0]
    # The ledger on the integration branch is the workflow's, line for line: no forged line.
    on_branch = ledger_lines(git_show(harness, state.integration_branch, LEDGER_PATH))
    assert on_branch == result.ledger
    assert all(line.summary != FORGED["summary"] for line in on_branch)


async def test_a_ledger_written_by_a_command_is_refused_at_the_merge_and_the_task_retried(
    harness: LoopHarness,
) -> None:
    models = ForgingModels(by_command=True)
    async with build_worker(harness.env.client, settings(harness), models=models):
        handle = await start_graph(harness, [task("T-001")])
        result = await handle.result()

    state = result.state
    assert state.status == GraphStatus.COMPLETED, state.message
    (only,) = state.tasks
    assert only.attempts == 2
    # The tool told the model what its command did (this model did not listen).
    assert any("refusing: the command changed" in text for text in models.tool_answers)
    # The reason, in the task's state and its ledger line: not a "conflict".
    assert only.last_failure.startswith("orchestrator_files: ")
    assert f"`{LEDGER_PATH}`" in only.last_failure
    assert "written only by the graph's orchestrator" in only.last_failure
    retried = [line for line in result.ledger if line.id == "T-001"]
    assert [line.status for line in retried] == [
        TaskStatus.PENDING, TaskStatus.IN_PROGRESS, TaskStatus.PENDING,
        TaskStatus.IN_PROGRESS, TaskStatus.COMPLETED,
    ]  # fmt: skip
    assert "orchestrator_files" in retried[2].summary and "conflict" not in retried[2].summary
    on_branch = ledger_lines(git_show(harness, state.integration_branch, LEDGER_PATH))
    assert on_branch == result.ledger
