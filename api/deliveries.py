"""Notifications given up after their run or graph closed (docs/notifications.md#retries).

A run's or graph's delivery workflow tells its owner of a notification it gives up while
the owner is open, and the owner records it (a run's `notify_failed` event, a graph's
`notify_failed`). Once the owner has closed, its history has ended: the delivery workflow
keeps the failure in its own state, and the API shows it with the owner's, a run's as
`notify_failed` events numbered after its last. They are all in the latest execution of
`notify/<owner id>`: an earlier one closed before the owner's last transition was handed
over, so while the owner was open to hear of its failures.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.client import (
    Client,
    RPCTimeoutOrCancelledError,
    WorkflowExecutionStatus,
    WorkflowQueryFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from loopworks.schemas.events import Event, NotifyFailed
from loopworks.schemas.notify import GivenUp, delivery_workflow_id
from loopworks.schemas.run import RunState
from loopworks.workflows.notifications import NOTIFICATION_WORKFLOW, NotificationWorkflow

# As long as a run's own status query may take.
QUERY_TIMEOUT = timedelta(seconds=10)


async def unrecorded(client: Client, owner: str) -> list[GivenUp]:
    """The notifications of `owner` (a run's or graph's id) given up after it closed;
    none when it never notified. A delivery workflow still sending is asked by query:
    when no worker answers, what it has given up so far is not known, and none is said."""
    handle = client.get_workflow_handle_for(NotificationWorkflow.run, delivery_workflow_id(owner))
    try:
        description = await handle.describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return []
        raise
    if description.workflow_type != NOTIFICATION_WORKFLOW:
        return []
    try:
        if description.status == WorkflowExecutionStatus.COMPLETED:
            state = await handle.result(follow_runs=False, rpc_timeout=QUERY_TIMEOUT)
        else:
            state = await handle.query(NotificationWorkflow.status, rpc_timeout=QUERY_TIMEOUT)
    except (RPCError, WorkflowQueryFailedError, RPCTimeoutOrCancelledError):
        return []
    return state.unrecorded()


def as_events(given_up: list[GivenUp], state: RunState, last_seq: int) -> list[Event]:
    """A closed run's late failures as its events, numbered after its last one: the
    same every time they are read, and only ever added to at the end."""
    return [
        NotifyFailed(
            seq=last_seq + n,
            ts=given.at,
            run_id=state.run_id,
            iteration=state.iteration,
            phase=state.phase,
            step=state.current_step.value,
            status="error",
            payload=given.failed,
        )
        for n, given in enumerate(given_up, 1)
    ]
