"""A run whose clone the retention sweep removed goes on: the next step clones again.
Here the sweep runs before every step the worker takes, as if each came a week after the
last, and the run still completes, with its artifact on its branch. A real worker on the
time-skipping server, a real repository on disk."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from loopworks.llm.offline.model import OfflineModels
from loopworks.schemas.run import RunStatus
from loopworks.schemas.settings import Settings
from loopworks.worker.build import build_deps, build_worker
from loopworks.workspace.git import GitWorkspaces
from loopworks.workspace.retention import RetentionPolicy
from loopworks.workspace.sweep import sweep
from tests.integration.stack import git
from tests.workflows.conftest import LoopHarness

pytestmark = pytest.mark.workflow

WEEK = 7 * 24 * 3600.0


class SweptBeforeEachStep(GitWorkspaces):
    """The worker's workspaces, swept a week later before each step takes its clone."""

    removed: list[str]

    def checkout(self, run_id: str, origin: str, commit: str, slot: str | None = None) -> Path:
        decision = sweep(self.root, RetentionPolicy(keep_seconds=0), now=time.time() + WEEK)
        self.removed.extend(decision.remove)
        return super().checkout(run_id, origin, commit, slot)


async def test_a_run_whose_clone_is_swept_between_steps_completes(
    time_skipping_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    harness = LoopHarness(time_skipping_env, tmp_path / "data", f"q-{uuid.uuid4().hex[:8]}")
    settings = Settings(
        LOOPS_DATA_DIR=harness.data_dir,
        LOOPS_TASK_QUEUE=harness.task_queue,
        LOOPS_WORKFLOW_SANDBOX=True,
    )
    deps = build_deps(settings, OfflineModels())
    swept = SweptBeforeEachStep(deps.workspaces.root, "loopworks", "loopworks@localhost")
    swept.removed = []
    deps = dataclasses.replace(deps, workspaces=swept)

    async with build_worker(time_skipping_env.client, settings, deps=deps):
        handle = await harness.start(task="Write a guide", max_iterations=2)
        state = (await asyncio.wait_for(handle.result(), timeout=120)).state

    assert state.status == RunStatus.COMPLETED, state.stop
    assert swept.removed.count(state.run_id) >= 2, swept.removed
    shown = git("--git-dir", str(harness.origin), "show", f"{state.branch}:artifact.md")
    assert shown.strip()
