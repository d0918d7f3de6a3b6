"""PRODUCE and REFINE as an agent in the workspace: whole runs with the offline model."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo

from loopworks.agent.trajectory import from_jsonl
from loopworks.llm.base import ModelCall
from loopworks.llm.offline.model import OfflineModels, OfflineScript
from loopworks.schemas.roles import Role
from loopworks.schemas.run import RunStatus, StopReason
from loopworks.schemas.settings import Settings
from loopworks.schemas.steps import PATHS_LISTED
from loopworks.worker.build import build_worker
from loopworks.workspace.call_records import CALL_NAME
from tests.workflows.conftest import LoopHarness, names
from tests.workflows.test_loop import TESTS_RULE, TITLE_RULE, remote_file

pytestmark = pytest.mark.workflow

TRAJECTORY = ".loops/trajectory"


def branch_files(harness: LoopHarness, branch: str) -> list[str]:
    out = subprocess.run(
        ["git", "--git-dir", str(harness.origin), "ls-tree", "-r", "--name-only", branch],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.splitlines()


def is_call(path: str) -> bool:
    return bool(CALL_NAME.match(path.rsplit("/", 1)[-1].removesuffix(".jsonl")))


class CommandFirst(OfflineModels):
    """The offline model, whose producer (or `role`) runs `command` before it writes its
    files, in every call: a command may write anywhere in the workspace, the run's records
    too."""

    def __init__(
        self, command: str, script: dict[str, Any] | None = None, role: Role = Role.PRODUCER
    ) -> None:
        super().__init__(script=OfflineScript.model_validate(script or {}))
        self.command, self.role = command, role

    async def respond(
        self, call: ModelCall, messages: list[ModelMessage], info: AgentInfo
    ) -> ModelResponse:
        if call.role == self.role and not any(isinstance(m, ModelResponse) for m in messages):
            command = ToolCallPart("run_command", {"command": self.command}, tool_call_id="cmd")
            return ModelResponse(parts=[command], model_name="offline")
        return await super().respond(call, messages, info)


async def test_each_step_commits_its_trajectory_and_changed_names_only_the_work(
    harness: LoopHarness,
) -> None:
    async with harness.worker():
        handle = await harness.start(task="Write a testing guide", rules=[TITLE_RULE, TESTS_RULE])
        state = (await handle.result()).state
        events = await harness.events(handle)

    assert state.status == RunStatus.COMPLETED and state.iteration == 2
    files = branch_files(harness, state.branch)
    # The single-shot calls' files beside them are the close's (workspace/call_records.py).
    assert [f for f in files if f.startswith(TRAJECTORY) and not is_call(f)] == [
        f"{TRAJECTORY}/01-produce.jsonl",
        f"{TRAJECTORY}/01-refine.jsonl",
        f"{TRAJECTORY}/02-produce.jsonl",
        f"{TRAJECTORY}/02-qa.jsonl",  # QA verified iteration 2: its conversation too
    ]
    for name, step, iteration in [("01-produce", "produce", 1), ("01-refine", "refine", 1)]:
        records = from_jsonl(
            remote_file(harness.origin, state.branch, f"{TRAJECTORY}/{name}.jsonl")
        )
        assert {(r.run_id, r.step, r.iteration) for r in records} == {(handle.id, step, iteration)}
        assert [r.kind for r in records] == [
            "system",
            "user",
            "assistant",
            "tool_call",
            "tool_result",
            "assistant",
        ]
        assert all(r.ok for r in records if r.kind == "tool_result")

    artifacts = [
        e.payload for e in events if e.event.value in ("artifact_created", "refinement_done")
    ]
    # The first draft and the refinement changed the artifact; iteration 2's producer kept it
    # as it was. The trajectory, committed alongside, is never counted as a change.
    assert [a.changed for a in artifacts] == [["artifact.md"], ["artifact.md"], ["none"]]
    assert artifacts[2].hash == artifacts[1].hash


async def test_a_producer_that_forgets_the_artifact_is_reminded_and_succeeds(
    harness: LoopHarness,
) -> None:
    # One answer per request of the call: prose first; then, reminded, the default draft
    # (an entry with neither an answer nor raw text).
    script = {"producer": {"1": ["I would rather not use the tools.", {"delay_ms": 0}]}}
    async with harness.worker(script):
        handle = await harness.start(task="Write a guide")
        state = (await handle.result()).state
        events = await harness.events(handle)

    assert state.status == RunStatus.COMPLETED
    assert "phase_error" not in names(events)
    # The reminder is the step's repair, shown as one event before the artifact.
    flow = names(events)
    assert flow.index("output_repaired") < flow.index("artifact_created")
    [repaired] = [e for e in events if e.event.value == "output_repaired"]
    [reminder] = repaired.payload.repairs
    assert "artifact.md" in reminder
    records = from_jsonl(
        remote_file(harness.origin, state.branch, f"{TRAJECTORY}/01-produce.jsonl")
    )
    assert [r.kind for r in records] == [
        "system",
        "user",
        "assistant",
        "retry",
        "assistant",
        "tool_call",
        "tool_result",
        "assistant",
    ]


@pytest.mark.parametrize(
    "answer",
    ["No.", {"files": [{"path": "notes.md", "content": "notes"}]}],
    ids=["prose", "another-file"],
)
async def test_a_producer_that_never_writes_the_artifact_is_a_phase_error(
    harness: LoopHarness, answer: Any
) -> None:
    async with harness.worker({"producer": {"1": answer}}):
        handle = await harness.start(task="Write a guide")
        state = (await handle.result()).state
        events = await harness.events(handle)
        producing = [
            name for name in await harness.activities_run(handle) if name == "produce_artifact"
        ]

    assert state.status == RunStatus.FAILED
    assert state.stop_reason == StopReason.PHASE_ERROR
    [error] = [e for e in events if e.event.value == "phase_error"]
    assert error.payload.step == "PRODUCE_PREPARE"  # produce and prepare run together
    assert "attempt" not in error.payload.model_dump()
    assert error.payload.error.endswith(
        "producer answered with invalid output: it ended without writing artifact.md, "
        "even when reminded"
    )
    # The reminder was the one retry: the step ran once.
    assert producing == ["produce_artifact"]
    assert "artifact_created" not in names(events)


async def test_the_turn_limit_ends_the_agent_and_its_work_is_kept(harness: LoopHarness) -> None:
    settings = Settings(
        LOOPS_DATA_DIR=harness.data_dir,
        LOOPS_TASK_QUEUE=harness.task_queue,
        LOOPS_AGENT_MAX_TURNS=1,
    )
    model = OfflineModels(script=OfflineScript({}))
    async with build_worker(harness.env.client, settings, models=model):
        handle = await harness.start(task="Write a testing guide")
        state = (await handle.result()).state

    assert state.status == RunStatus.COMPLETED
    records = from_jsonl(
        remote_file(harness.origin, state.branch, f"{TRAJECTORY}/01-produce.jsonl")
    )
    assert [r.kind for r in records][-3:] == ["tool_call", "tool_result", "limit"]
    assert remote_file(harness.origin, state.branch, "artifact.md").startswith("# Write")


async def test_a_step_that_changes_thousands_of_files_lists_a_bounded_few(
    harness: LoopHarness,
) -> None:
    """Its result listed every changed path, and the run's events kept them: two steps of
    a dependency install's files took the run's result past what Temporal takes in one
    payload, and its workflow task failed for good."""
    written = [{"path": f"vendor/pkg{n:04d}/index.js", "content": "x"} for n in range(300)]
    answer = {"files": [{"path": "artifact.md", "content": "# Guide\n"}, *written]}
    async with harness.worker({"producer": {"*": answer}}):
        handle = await harness.start(task="Write a guide", max_iterations=1)
        await handle.result()
        events = await harness.events(handle)

    [created] = [e for e in events if e.event.value == "artifact_created"]
    assert len(created.payload.changed) == PATHS_LISTED + 1
    assert created.payload.changed[-1] == "... and 101 more"
