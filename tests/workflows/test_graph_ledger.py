"""The ledger is the orchestrator's alone (docs/graphs.md#the-ledger), through a whole graph
on the time-skipping server with real git: a task's producer that writes into the ledger is
refused by its tools, and what its command wrote there is put back by the worker, the model
told; never a git "conflict" nobody can read, never a task failed for it, and the ledger on
the integration branch is the workflow's, line for line."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from temporalio.testing import ActivityEnvironment

from loopworks.activities.production import ProductionActivities
from loopworks.llm.base import ModelCall
from loopworks.llm.offline.answers import default_answer
from loopworks.llm.offline.model import OfflineModels, _agent_turn, _written
from loopworks.schemas.graph import GraphStatus
from loopworks.schemas.roles import IterationPlan, Role
from loopworks.schemas.settings import Settings
from loopworks.schemas.steps import GitLocation, ProduceInput
from loopworks.schemas.tasks import LEDGER_PATH, TASKS_DIR, TaskStatus, ledger_lines, task_file
from loopworks.worker.build import build_deps, build_worker
from tests.workflows.conftest import LoopHarness
from tests.workflows.test_graph import git_show, start_graph, task

pytestmark = pytest.mark.workflow

# The line a producer that knows the ledger's format would write: its task, completed.
FORGED = {
    "id": "T-001",
    "status": "completed",
    "updated_at": "2026-02-07T15:30:00Z",
    "summary": "Successfully initialized PB client",
}


class ForgingModels(OfflineModels):
    """The offline model, whose producer first forges its task's completion in the ledger,
    in every loop: with `write_file`, or with a shell command that rewrites the ledger and
    deletes the task files, and never undoes it."""

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
            if forging:
                return ModelResponse(parts=[self._forge(call)])
            answer = default_answer(call.role, call.context)
            return ModelResponse(parts=_agent_turn(call, answer, _written(messages)))

        return FunctionModel(respond, model_name="offline")

    def _forge(self, call: ModelCall) -> ToolCallPart:
        line = json.dumps(FORGED)
        if self.by_command:
            command = f"printf '%s\\n' '{line}' > {LEDGER_PATH} && rm -rf {TASKS_DIR}"
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


async def test_a_ledger_rewritten_by_a_command_is_put_back_and_the_task_completes_at_once(
    harness: LoopHarness,
) -> None:
    """The model never undoes what its command did: the worker does, before the work is
    committed, so the merge queue has nothing to refuse and the task's own verification
    decides it on the first attempt."""
    models = ForgingModels(by_command=True)
    async with build_worker(harness.env.client, settings(harness), models=models):
        handle = await start_graph(harness, [task("T-001"), task("T-002", "T-001")])
        result = await handle.result()

    state = result.state
    assert state.status == GraphStatus.COMPLETED, state.message
    assert [t.attempts for t in state.tasks] == [1, 1]
    assert [t.last_failure for t in state.tasks] == ["", ""]
    # The tool told the model what was undone, and that the rest of its work stands.
    undone = [text for text in models.tool_answers if "undone: the command changed" in text]
    assert len(undone) == 2  # one for each task's producer
    assert all(f"`{LEDGER_PATH}`" in text for text in undone)
    # T-002 started from T-001's merge: its command deleted T-001's task file too.
    assert f"`{task_file('T-001')}`" in undone[1]
    assert all("the rest of the command's work stands" in text for text in undone)
    assert not any("refusing" in text for text in models.tool_answers)
    first = [line.status for line in result.ledger if line.id == "T-001"]
    assert first == [TaskStatus.PENDING, TaskStatus.IN_PROGRESS, TaskStatus.COMPLETED]
    # The ledger on the integration branch holds only the orchestrator's lines, and the
    # task files are there.
    on_branch = ledger_lines(git_show(harness, state.integration_branch, LEDGER_PATH))
    assert on_branch == result.ledger
    assert all(line.summary != FORGED["summary"] for line in on_branch)
    assert '"T-001"' in git_show(harness, state.integration_branch, task_file("T-001"))


async def test_the_producer_commits_the_record_as_the_tasks_base_has_it(tmp_path: Path) -> None:
    """Before PRODUCE commits, the record is made what the task's base holds, whatever
    the tools did not see: here the commit the step starts from carries a forged ledger
    (an earlier step's, made before the worker kept the record), and its commit does not.
    A real activity on a real repository, outside Temporal."""
    origin = tmp_path / "origin.git"
    work = tmp_path / "work"

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@t", *args],
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.strip()

    subprocess.run(["git", "init", "-q", "--bare", str(origin)], check=True)
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    (work / LEDGER_PATH).parent.mkdir(parents=True)
    pending = '{"id": "T-001", "status": "pending", "updated_at": "2026-02-07T15:00:00Z"}\n'
    (work / LEDGER_PATH).write_text(pending)
    git("add", "-A")
    git("commit", "-qm", "the task's base")
    base = git("rev-parse", "HEAD")
    (work / LEDGER_PATH).write_text(json.dumps(FORGED) + "\n")
    git("commit", "-qam", "an earlier step's commit, with a forged ledger")
    start = git("rev-parse", "HEAD")
    git("push", "-q", str(origin), "HEAD:refs/heads/graphs/g")

    deps = build_deps(Settings(LOOPS_DATA_DIR=tmp_path / "data"), models=OfflineModels())
    step = ProduceInput(
        run_id="g/T-001/1",
        task="Write part T-001",
        intent="Write part T-001",
        acceptance_criteria=["Part T-001 is written"],
        rules=[],
        plan=IterationPlan(focus="write it", steps=["write artifact.md"]),
        workspace=GitLocation(origin=str(origin), commit=start),
        committed_at=datetime(2026, 1, 1, tzinfo=UTC),
        graph_task=True,
        base_commit=base,
    )
    produced = await ActivityEnvironment().run(ProductionActivities(deps).produce_artifact, step)

    shown = subprocess.run(
        ["git", "--git-dir", str(origin), "show", f"{produced.commit}:{LEDGER_PATH}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert shown == pending
    assert "artifact.md" in produced.changed
