"""A real worker on the time-skipping test server, driven by a scripted offline model."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from loopworks.deploy.histories import activities_run
from loopworks.llm.base import ModelSource
from loopworks.llm.offline.model import OfflineModels, OfflineScript
from loopworks.schemas.events import Event
from loopworks.schemas.loop import LoopInput, LoopResult
from loopworks.schemas.run import RunRequest, RunState
from loopworks.schemas.settings import Settings
from loopworks.schemas.steps import HISTORY_PATH
from loopworks.worker.build import build_worker
from loopworks.workflows.loop import LoopWorkflow
from loopworks.workspace.run_log import parse_history

# The offline model's first PRODUCE answer held for two minutes: a test that stops a run
# while it produces, not while one of its short first steps may be completing (the
# time-skipping server refuses a cancel that crosses a completion, ACTIVITY_UNKNOWN, and
# that run's workflow task then never completes).
PRODUCING_FOR_TWO_MINUTES: dict[str, Any] = {
    "producer": {"1": {"delay_ms": 120_000, "answer": {"files": []}}}
}


@dataclass
class LoopHarness:
    env: WorkflowEnvironment
    data_dir: Path
    task_queue: str

    @property
    def origin(self) -> Path:
        return Settings(LOOPS_DATA_DIR=self.data_dir).default_origin.resolve()

    @asynccontextmanager
    async def worker(
        self,
        script: dict[str, Any] | None = None,
        latency_ms: int = 0,
        workflow_sandbox: bool = True,
        models: ModelSource | None = None,
        **settings_env: Any,
    ) -> AsyncIterator[None]:
        """A worker answering with the scripted offline model, or with `models`."""
        settings = Settings(
            LOOPS_DATA_DIR=self.data_dir,
            LOOPS_TASK_QUEUE=self.task_queue,
            LOOPS_WORKFLOW_SANDBOX=workflow_sandbox,
            **{"LOOPS_LLM": "offline", **settings_env},
        )
        model = models or OfflineModels(
            latency_ms=latency_ms, script=OfflineScript.model_validate(script or {})
        )
        async with build_worker(self.env.client, settings, models=model):
            yield

    async def start(
        self, continue_as_new_after_events: int | None = None, **request: Any
    ) -> WorkflowHandle[LoopWorkflow, LoopResult]:
        run_id = f"test-{uuid.uuid4().hex[:10]}"
        request.setdefault("audit_probability", 0.0)
        # The playbook's steps come after reflection: tests that pin a run's steps and
        # calls opt in (tests/workflows/test_playbook.py, the SDK run).
        request.setdefault("playbook", False)
        return await self.env.client.start_workflow(
            LoopWorkflow.run,
            LoopInput(
                run_id=run_id,
                alias="test",
                request=RunRequest(**request),
                created_at="2026-01-01T00:00:00+00:00",
                continue_as_new_after_events=continue_as_new_after_events,
            ),
            id=run_id,
            task_queue=self.task_queue,
        )

    async def status(self, handle: WorkflowHandle[Any, Any]) -> RunState:
        return await handle.query(LoopWorkflow.status)

    async def events(self, handle: WorkflowHandle[Any, Any]) -> list[Event]:
        """The whole history: the workflow's tail, after what git holds before it."""
        tail = await handle.query(LoopWorkflow.events)
        if not tail or tail[0].seq == 1:
            return tail
        state = await self.status(handle)
        running = (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
        ref = f"refs/loopworks/{state.run_id}" if running else state.branch
        return [*self.history_in_git(ref)[: tail[0].seq - 1], *tail]

    def history_in_git(self, ref: str) -> list[Event]:
        """`.loops/history.jsonl` at `ref` on the origin."""
        shown = subprocess.run(
            ["git", "--git-dir", str(self.origin), "show", f"{ref}:{HISTORY_PATH}"],
            capture_output=True,
            text=True,
            check=True,
        )
        return parse_history(shown.stdout)

    async def activities_run(self, handle: WorkflowHandle[Any, Any]) -> list[str]:
        """The activities the run ran, in order, local ones included."""
        return [name for name, _ in activities_run(await handle.fetch_history())]


@pytest.fixture(autouse=True)
def inside_the_workflow_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every workflow test runs its workflows inside Temporal's sandbox, whatever Settings
    it builds: the guard a worker leaves off by default is kept here, where a
    non-deterministic call would be made (schemas/settings.py, LOOPS_WORKFLOW_SANDBOX)."""
    monkeypatch.setenv("LOOPS_WORKFLOW_SANDBOX", "true")


@pytest.fixture
def harness(time_skipping_env: WorkflowEnvironment, tmp_path: Path) -> LoopHarness:
    return LoopHarness(time_skipping_env, tmp_path / "data", f"q-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A user's repository with one commit: a run's origin when it is given `repo`."""
    repo = tmp_path / f"project-{uuid.uuid4().hex[:6]}"
    repo.mkdir()
    (repo / "README.md").write_text("# a project\n")
    commit_all(repo)
    return repo


def commit_all(repo: Path) -> str:
    """Make the directory `repo` a git repository whose `main` holds its files in one
    commit; that commit's sha."""
    for args in (
        ["init", "--quiet", "--initial-branch=main"],
        ["add", "-A"],
        [
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "commit.gpgsign=false",
            "commit",
            "--quiet",
            "-m",
            "init",
        ],
    ):
        subprocess.run(["git", *args], cwd=repo, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True)
    return head.stdout.strip()


def names(events: list[Event]) -> list[str]:
    return [e.event.value for e in events]
