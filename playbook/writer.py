"""Talking to a playbook's one writer from outside it: the API, the CLI's routes and the
activity that sends a run's deltas (`delivery`) all go through here, naming the
workflow, its updates and queries by their methods.

Every call is an update-with-start: the first batch a repository ever sends starts its
`PlaybookWorkflow`, later ones reach the running one (`USE_EXISTING`), and no caller has
to know which.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.workflow import UpdateMethodMultiParam

from loopworks.playbook.workflow import DELIVER_SIGNAL, PlaybookWorkflow
from loopworks.schemas.playbook import (
    AppliedBatch,
    DeltaBatch,
    PlaybookInput,
    PlaybookState,
    workflow_id,
)
from loopworks.schemas.settings import Settings

# How often a sender asks whether its batch is in: soon, then less and less often.
POLL_SECONDS = 0.2
POLL_SECONDS_MAX = 2.0
START_ATTEMPTS = 3
# The error type of a run's batch the writer could not apply.
BATCH_FAILED = "PlaybookBatchFailed"


def _start(
    settings: Settings, name: str, origin: str
) -> WithStartWorkflowOperation[PlaybookWorkflow, None]:
    """How a playbook's workflow is started: by whichever caller comes first."""
    return WithStartWorkflowOperation(
        PlaybookWorkflow.run,
        _input(settings, name, origin),
        id=workflow_id(name),
        task_queue=settings.task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        static_summary=f"playbook {name}",
    )


def _input(settings: Settings, name: str, origin: str) -> PlaybookInput:
    return PlaybookInput(name=name, origin=origin, limits=settings.playbook_limits())


async def send_batch(
    client: Client, settings: Settings, name: str, origin: str, batch: DeltaBatch
) -> AppliedBatch:
    """Apply `batch` to the playbook `name` (of `origin`): once, however often it is sent."""
    return await _update(client, settings, name, origin, PlaybookWorkflow.apply, batch)


async def deliver_batch(
    client: Client,
    settings: Settings,
    name: str,
    origin: str,
    batch: DeltaBatch,
    timeout_seconds: float = 600.0,
) -> AppliedBatch:
    """`send_batch` for runs: a signal-with-start, then the `applied` query until the
    batch is applied. A playbook admits ten updates in flight; signals queue instead, so a
    hundred runs finishing at once all get their batches in (in arrival order).

    A batch the writer could not apply (its commit failed past the writer's retries, or
    origin could not be read) raises `ApplicationError` with the writer's reason, not to
    be retried: the writer retried git already, as for a person's batch, which then
    answers 502."""
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            handle = await client.start_workflow(
                PlaybookWorkflow.run,
                _input(settings, name, origin),
                id=workflow_id(name),
                task_queue=settings.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                static_summary=f"playbook {name}",
                start_signal=DELIVER_SIGNAL,
                start_signal_args=[batch],
            )
            break
        except WorkflowAlreadyStartedError:
            # Two first senders raced to start it (seen on the time-skipping test
            # server): it runs now, so sending again signals it.
            if attempt == START_ATTEMPTS:
                raise

    async def ask() -> AppliedBatch | None:
        return await handle.query(PlaybookWorkflow.applied, batch.batch_id)

    try:
        applied = await wait_until_applied(ask, timeout_seconds)
    except TimeoutError:
        raise TimeoutError(f"playbook {name} did not apply batch {batch.batch_id}") from None
    if applied.error is not None:
        raise ApplicationError(
            f"playbook {name} did not apply batch {batch.batch_id}: {applied.error}",
            type=BATCH_FAILED,
            non_retryable=True,
        )
    return applied


# What a query answers while the workflow cannot answer yet (wait_until_applied).
_NOT_YET = (RPCStatusCode.RESOURCE_EXHAUSTED, RPCStatusCode.FAILED_PRECONDITION)


async def wait_until_applied(
    ask: Callable[[], Awaitable[AppliedBatch | None]],
    timeout_seconds: float,
    first_delay: float = POLL_SECONDS,
    max_delay: float = POLL_SECONDS_MAX,
) -> AppliedBatch:
    """Ask until the batch is applied: soon, then less and less often.

    A query reaching a workflow while it works through a task waits in a small buffer on
    the server; when many runs finishing at once ask the same playbook, the server turns
    the rest away (RESOURCE_EXHAUSTED, "consistent query buffer is full"). That is a
    "not yet" like any other: the batch is queued, so ask again later. So is a query
    reaching the workflow while its last task failed or timed out and waits to be retried
    (FAILED_PRECONDITION, "Workflow Task in failed state"; seen on a loaded machine).
    """
    deadline = time.monotonic() + timeout_seconds
    delay = first_delay
    while True:
        try:
            applied = await ask()
        except RPCError as err:
            if err.status not in _NOT_YET:
                raise
            applied = None
        if applied is not None:
            return applied
        if time.monotonic() > deadline:
            raise TimeoutError("the batch was not applied in time")
        await asyncio.sleep(delay)
        delay = min(delay * 1.5, max_delay)


async def rollback(
    client: Client, settings: Settings, name: str, origin: str, version: int
) -> AppliedBatch:
    """Make version `version`'s items current again, as a new version."""
    return await _update(client, settings, name, origin, PlaybookWorkflow.rollback, version)


async def _update(
    client: Client,
    settings: Settings,
    name: str,
    origin: str,
    update: UpdateMethodMultiParam[[PlaybookWorkflow, Any], AppliedBatch],
    arg: Any,
) -> AppliedBatch:
    return await client.execute_update_with_start_workflow(
        update, arg, start_workflow_operation=_start(settings, name, origin)
    )


async def describe(client: Client, name: str) -> PlaybookState | None:
    """The playbook's name, origin and version; None when it has no workflow."""
    handle = client.get_workflow_handle_for(PlaybookWorkflow.run, workflow_id(name))
    try:
        return await handle.query(PlaybookWorkflow.describe)
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
