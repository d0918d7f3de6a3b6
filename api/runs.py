"""Reading and steering one run through its workflow handle.

A completed run's state is its workflow result, read from history, so it answers even
when no worker is polling; any other run answers the `status` query (a worker replays it).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.client import (
    RPCTimeoutOrCancelledError,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from api.deps import LoopHandle
from api.errors import (
    ApiError,
    NotApplicable,
    RunNotFound,
    StateUnavailable,
    TemporalUnavailable,
)
from schemas.events import Event
from schemas.run import RunState
from workflows.loop import LoopWorkflow

WORKFLOW_TYPE = "LoopWorkflow"
# A query waits for a worker to answer; past this the caller learns no worker did.
QUERY_TIMEOUT = timedelta(seconds=10)
UPDATE_TIMEOUT = timedelta(seconds=30)


def _not_found(err: RPCError) -> bool:
    return err.status == RPCStatusCode.NOT_FOUND


async def describe(handle: LoopHandle) -> WorkflowExecutionDescription:
    try:
        description = await handle.describe()
    except RPCError as err:
        if _not_found(err):
            raise RunNotFound(handle.id) from err
        raise
    if description.workflow_type != WORKFLOW_TYPE:
        # Another kind of workflow under this id is no run of ours.
        raise RunNotFound(handle.id)
    return description


def is_closed(description: WorkflowExecutionDescription) -> bool:
    return description.status not in (None, WorkflowExecutionStatus.RUNNING)


async def read_state(
    handle: LoopHandle, description: WorkflowExecutionDescription | None = None
) -> RunState:
    description = description or await describe(handle)
    if description.status == WorkflowExecutionStatus.COMPLETED:
        # The result is the final state, read from history: no worker, no replay.
        result = await handle.result(follow_runs=False, rpc_timeout=QUERY_TIMEOUT)
        return result.state
    try:
        return await handle.query(LoopWorkflow.status, rpc_timeout=QUERY_TIMEOUT)
    except (RPCError, WorkflowQueryFailedError, RPCTimeoutOrCancelledError) as err:
        if isinstance(err, RPCError) and _not_found(err):
            raise RunNotFound(handle.id) from err
        raise _unanswered(handle, description, "status", err) from err


async def read_events(handle: LoopHandle, after: int) -> list[Event]:
    try:
        return await handle.query(LoopWorkflow.events, after, rpc_timeout=QUERY_TIMEOUT)
    except (RPCError, WorkflowQueryFailedError, RPCTimeoutOrCancelledError) as err:
        if isinstance(err, RPCError) and _not_found(err):
            raise RunNotFound(handle.id) from err
        description = await describe(handle)  # a 404 when it is no run of ours
        raise _unanswered(handle, description, "events", err) from err


def _unanswered(
    handle: LoopHandle, description: WorkflowExecutionDescription, query: str, err: Exception
) -> ApiError:
    if isinstance(err, RPCError) and err.status == RPCStatusCode.UNAVAILABLE:
        return TemporalUnavailable()
    # Queries are answered by a worker replaying the run; usually none is polling.
    state = "running" if not is_closed(description) else "finished"
    return StateUnavailable(
        f"no worker answered the {query} query of {state} run {handle.id}"
        f" (is a worker polling the task queue?): {getattr(err, 'message', None) or err}"
    )


async def request_stop(handle: LoopHandle, reason: str | None) -> RunState:
    """Signal `stop`; answers with the state the stop was accepted in."""
    description = await describe(handle)
    if is_closed(description):
        raise NotApplicable(f"run {handle.id} has already finished")
    # Open but already terminal: the run is only finishing its message handlers.
    state = await read_state(handle, description)
    if state.status.is_terminal:
        raise NotApplicable(f"run {handle.id} is already {state.status.value}")
    try:
        await handle.signal(LoopWorkflow.stop, reason)
    except RPCError as err:
        # It closed between the check and the signal.
        if _not_found(err):
            raise NotApplicable(f"run {handle.id} has already finished") from err
        raise
    return state


async def clear_block(handle: LoopHandle, note: str) -> RunState:
    if is_closed(await describe(handle)):
        raise NotApplicable(f"run {handle.id} has finished; there is no block to clear")
    try:
        return await handle.execute_update(
            LoopWorkflow.clear_block, note, rpc_timeout=UPDATE_TIMEOUT
        )
    except WorkflowUpdateFailedError as err:
        # The workflow's validator rejected it: the run is not blocked.
        reason = getattr(err.cause, "message", None) or str(err.cause)
        raise NotApplicable(f"cannot clear the block of run {handle.id}: {reason}") from err
    except RPCError as err:
        if _not_found(err):
            raise NotApplicable(f"run {handle.id} has already finished") from err
        raise
