"""A run on an origin larger than the worker's clone size cap fails at its first clone,
once, saying which cap: a real worker (its interceptor makes the failure non-retryable)
on the time-skipping server, a real repository on disk."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment

from loopworks.schemas.run import RunStatus
from loopworks.schemas.steps import CLONE_TOO_LARGE
from tests.workflows.conftest import LoopHarness, commit_all

pytestmark = pytest.mark.workflow

MIB = 1024 * 1024


@pytest.fixture
def harness(time_skipping_env: WorkflowEnvironment, tmp_path: Path) -> LoopHarness:
    return LoopHarness(time_skipping_env, tmp_path / "data", f"q-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def large_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "large-project"
    repo.mkdir()
    (repo / "README.md").write_text("# a large project\n")
    (repo / "data.bin").write_bytes(os.urandom(3 * MIB))
    commit_all(repo)
    return repo


async def test_a_run_on_an_origin_over_the_cap_fails_once_saying_which_cap(
    harness: LoopHarness, large_repo: Path
) -> None:
    async with harness.worker(LOOPS_MAX_CLONE_BYTES=MIB):
        handle = await harness.start(task="Write a guide", repo=str(large_repo))
        state = (await asyncio.wait_for(handle.result(), timeout=120)).state
        history = await handle.fetch_history()

    assert state.status == RunStatus.FAILED
    assert "LOOPS_MAX_CLONE_BYTES" in state.stop.message
    assert f"{MIB} bytes" in state.stop.message
    failures = [
        e.activity_task_failed_event_attributes.failure
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
    ]
    assert failures, "no step failed"
    for failure in failures:
        assert failure.application_failure_info.type == CLONE_TOO_LARGE
        assert failure.application_failure_info.non_retryable
    attempts = [
        e.activity_task_started_event_attributes.attempt
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    ]
    assert set(attempts) == {1}, "a step over the cap was retried"
    # Nothing of the origin stayed on the worker's disk.
    workspaces = harness.data_dir / "workspaces"
    kept = [p for p in workspaces.rglob("data.bin")] if workspaces.exists() else []
    assert kept == []
