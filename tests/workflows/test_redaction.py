"""A command that reads the worker's secrets leaves only `[REDACTED]` behind (SECURITY.md):
in the run's events, the workflow history and the trajectory committed to git."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo

from loopworks.checks.redaction import REDACTED
from loopworks.llm.base import ModelCall
from loopworks.llm.offline.model import OfflineModels
from loopworks.schemas.events import EvaluationDone
from loopworks.schemas.roles import Role
from loopworks.schemas.run import RunStatus
from loopworks.schemas.settings import Settings
from loopworks.worker.build import build_worker
from tests.workflows.conftest import LoopHarness

pytestmark = pytest.mark.workflow

# Only in the worker's settings and in the environment of the process the commands read:
# never in this test's environment, so nothing but the settings tells the worker it is one.
KEY = "sk-ant-api03-fake-" + "7" * 40


@pytest.fixture
def keyholder() -> Iterator[int]:
    """A process started with the key in its environment, as a worker is: what a command
    finds in `/proc/<worker pid>/environ`. (The test's own process cannot stand in: its
    `/proc/self/environ` is the environment it was started with, without the key.)"""
    env = {"PATH": os.environ.get("PATH", os.defpath), "ANTHROPIC_API_KEY": KEY}
    proc = subprocess.Popen(["sleep", "300"], env=env)
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


class ProducerReadsTheEnvironment(OfflineModels):
    """The offline model, but the producer first runs `command` with `run_command`."""

    def __init__(self, command: str) -> None:
        super().__init__()
        self.command = command

    async def respond(
        self, call: ModelCall, messages: list[ModelMessage], info: AgentInfo
    ) -> ModelResponse:
        first_turn = not any(isinstance(m, ModelResponse) for m in messages)
        if call.role == Role.PRODUCER and first_turn and not info.output_tools:
            part = ToolCallPart("run_command", {"command": self.command}, tool_call_id="toolu_env")
            return ModelResponse(parts=[part], model_name="offline")
        return await super().respond(call, messages, info)


def git_everything(harness: LoopHarness) -> str:
    """Every commit of the origin, patches included: trajectories, history, artifact."""
    return subprocess.run(
        ["git", "--git-dir", str(harness.origin), "log", "--all", "-p", "--format=%H %B"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


async def test_a_command_that_prints_the_worker_key_leaves_it_redacted(
    harness: LoopHarness, keyholder: int
) -> None:
    assert KEY not in os.environ.values()
    environ = f"/proc/{keyholder}/environ"
    # The check reads the worker's environment, and then the key holder's (last: the runner
    # keeps the output's end); it fails, so its output goes on to the critic's context too.
    check_command = f"tr '\\0' '\\n' < /proc/$PPID/environ; tr '\\0' '\\n' < {environ}; exit 3"
    # The agent's command gets past the guard's /proc rule as a model could.
    split = environ.replace("/", "'+'/'+'")
    tool_command = f"python3 -c \"print(open(''+'{split}').read().replace(chr(0), chr(10)))\""
    rules: list[dict[str, Any]] = [
        {
            "id": "env-dump",
            "description": "a check that prints the environment",
            "severity": "warn",
            "check": {"kind": "command", "command": check_command},
        }
    ]
    settings = Settings(
        LOOPS_DATA_DIR=harness.data_dir,
        LOOPS_TASK_QUEUE=harness.task_queue,
        LOOPS_LLM="offline",
        ANTHROPIC_API_KEY=KEY,
    )
    models = ProducerReadsTheEnvironment(tool_command)
    async with build_worker(harness.env.client, settings, models=models):
        handle = await harness.start(task="Write a guide", rules=rules)
        state = (await handle.result()).state
        events = await harness.events(handle)
        history = await handle.fetch_history()

    assert state.status == RunStatus.COMPLETED

    # Events show no check's output today (rule ids and scores only); were one to, the key
    # must still not be there.
    assert not [e for e in events if KEY in e.model_dump_json()]
    assert any("env-dump" in e.payload.warnings for e in events if isinstance(e, EvaluationDone))

    payloads = [e.SerializeToString() for e in history.events]
    assert not [p for p in payloads if KEY.encode() in p]
    assert any(REDACTED.encode() in p for p in payloads)

    committed = git_everything(harness)
    assert KEY not in committed
    # The trajectory holds the tool's output, redacted.
    assert f"ANTHROPIC_API_KEY={REDACTED}" in committed
