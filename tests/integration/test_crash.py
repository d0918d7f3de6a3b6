"""kill -9 a worker in the middle of a slow step: a new worker finishes the run, and the
run branch carries each step's commit exactly once."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType

from loopworks.schemas.loop import LoopInput
from loopworks.schemas.run import RunRequest, RunStatus, Step
from loopworks.schemas.settings import Settings
from loopworks.service.connect import connect
from loopworks.workflows.loop import LoopWorkflow
from tests.integration.stack import Stack

pytestmark = pytest.mark.integration


async def test_worker_killed_mid_step_run_completes_without_duplicate_commits(
    stack: Stack, tmp_path: Path
) -> None:
    script = tmp_path / "script.json"
    # Refining takes 20 s: long enough to kill the worker in the middle of it.
    script.write_text(json.dumps({"refiner": {"1": {"delay_ms": 20_000}}}))
    stack.extra_env["LOOPS_OFFLINE_SCRIPT"] = str(script)
    first = stack.start_worker()

    client = await connect(
        Settings(TEMPORAL_ADDRESS=stack.server.address, TEMPORAL_NAMESPACE="default")
    )
    run_id = f"crash-{uuid.uuid4().hex[:8]}"
    handle = await client.start_workflow(
        LoopWorkflow.run,
        LoopInput(
            run_id=run_id,
            alias="crash",
            request=RunRequest(task="Write a guide to caching", audit_probability=0),
            created_at="2026-01-01T00:00:00+00:00",
        ),
        id=run_id,
        task_queue=stack.task_queue,
    )

    async def refining() -> bool:
        return (await handle.query(LoopWorkflow.status)).current_step == Step.REFINE

    deadline = asyncio.get_running_loop().time() + 60
    while not await refining():
        assert asyncio.get_running_loop().time() < deadline, first.output()
        await asyncio.sleep(0.2)
    await asyncio.sleep(2.0)
    first.kill()

    stack.start_worker()
    result = await asyncio.wait_for(handle.result(), timeout=120)
    state = result.state
    assert state.status == RunStatus.COMPLETED, state.stop

    history = await handle.fetch_history()
    scheduled = {
        e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    }
    retried = [
        scheduled[e.activity_task_started_event_attributes.scheduled_event_id]
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and e.activity_task_started_event_attributes.attempt > 1
    ]
    assert retried == ["refine_artifact"], "the killed step was not retried"

    origin = stack.data_dir / "origin.git"
    subjects = subprocess.run(
        ["git", "--git-dir", str(origin), "log", "--format=%s", f"loops/{run_id}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    step_commits = [s for s in subjects if s.startswith("iteration ")]
    assert len(step_commits) == len(set(step_commits)), subjects
    assert sum("· refine" in s for s in step_commits) == 1, subjects
