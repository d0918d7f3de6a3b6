from __future__ import annotations

import asyncio
from typing import Any, Callable

import pytest
from temporalio import activity
from temporalio.client import WorkflowUpdateFailedError
from temporalio.worker import Worker

from loopworks.activities.integration import IntegrationActivities
from loopworks.schemas.graph import GraphApproval, GraphStatus
from loopworks.schemas.integration import LedgerOutput, LedgerRequest
from loopworks.schemas.settings import Settings
from loopworks.schemas.tasks import Task, TaskStatus
from loopworks.llm.offline.model import OfflineModels, OfflineScript
from loopworks.worker.build import activities_of, build_deps
from loopworks.workflows.graph.workflow import TaskGraphWorkflow
from loopworks.workflows.loop import LoopWorkflow
from tests.workflows.conftest import LoopHarness
from tests.workflows.test_graph import start_graph, task

pytestmark = pytest.mark.workflow


async def _wait_status(handle, status):
    for _ in range(600):
        if (await handle.query(TaskGraphWorkflow.status)).status == status:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(status)


async def test_pause_while_awaiting_approval_wedges(harness: LoopHarness) -> None:
    async with harness.worker():
        handle = await start_graph(harness, [task("T-001")], mode="interactive")
        await _wait_status(handle, GraphStatus.AWAITING_APPROVAL)
        paused = await handle.execute_update(TaskGraphWorkflow.pause)
        print("after pause:", paused.status)
        try:
            await handle.execute_update(TaskGraphWorkflow.approve, GraphApproval())
            print("approve while paused: accepted")
        except WorkflowUpdateFailedError as err:
            print("approve while paused: REFUSED:", err.cause)
        resumed = await handle.execute_update(TaskGraphWorkflow.resume)
        print("after resume:", resumed.status)
        try:
            await handle.execute_update(TaskGraphWorkflow.approve, GraphApproval())
            print("approve after resume: accepted")
        except WorkflowUpdateFailedError as err:
            print("approve after resume: REFUSED:", err.cause)
        await asyncio.sleep(2)
        state = await handle.query(TaskGraphWorkflow.status)
        print("final:", state.status, [t.run_ids for t in state.tasks])
        await handle.terminate()


async def test_client_task_named_like_a_fix_stands_in(harness: LoopHarness) -> None:
    tasks = [
        task("T-001", verify="false"),
        task("T-001-fix-1"),
        task("T-002", "T-001"),
    ]
    async with harness.worker():
        handle = await start_graph(harness, tasks)
        result = await asyncio.wait_for(handle.result(), timeout=300)
    for line in result.ledger:
        print(line.id, line.status.value, line.summary[:60])
    print("graph:", result.state.status, result.state.message)


async def test_second_approve_during_ledger_save(harness: LoopHarness) -> None:
    settings = Settings(LOOPS_DATA_DIR=harness.data_dir, LOOPS_TASK_QUEUE=harness.task_queue)
    deps = build_deps(settings, OfflineModels(script=OfflineScript.model_validate({})))
    real_ledger = IntegrationActivities(deps).record_ledger
    held, release = asyncio.Event(), asyncio.Event()

    @activity.defn(name="record_ledger")
    async def held_record_ledger(request: LedgerRequest) -> LedgerOutput:
        if any(l.status == TaskStatus.PENDING for l in request.lines) and not release.is_set():
            held.set()
            await release.wait()
        return await real_ledger(request)

    activities: list[Callable[..., Any]] = [
        *(a for a in activities_of(deps, harness.env.client) if a.__name__ != "record_ledger"),
        held_record_ledger,
    ]
    async with Worker(
        harness.env.client,
        task_queue=harness.task_queue,
        workflows=[TaskGraphWorkflow, LoopWorkflow],
        activities=activities,
    ):
        handle = await start_graph(harness, [task("T-001")], mode="interactive")
        await _wait_status(handle, GraphStatus.AWAITING_APPROVAL)
        await handle.execute_update(
            TaskGraphWorkflow.approve, GraphApproval(tasks=[Task.model_validate(task("T-001"))])
        )
        await asyncio.wait_for(held.wait(), timeout=60)
        second = await handle.execute_update(
            TaskGraphWorkflow.approve, GraphApproval(tasks=[Task.model_validate(task("T-007"))])
        )
        print("second approve accepted, status", second.status)
        release.set()
        result = await asyncio.wait_for(handle.result(), timeout=300)
    for line in result.ledger:
        print(line.id, line.status.value, line.summary[:60])
    print("graph:", result.state.status, [t.task.id for t in result.state.tasks])
