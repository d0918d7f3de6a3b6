"""Reading and steering one run through its workflow handle.

A completed run's state and latest events are its workflow result, read from history,
so they answer even when no worker is polling; any other run answers the `status` and
`events` queries (a worker replays it). Events older than the workflow's tail come from
the run's history.jsonl in git (`api.history`). Whatever is read, states and events are
served redacted, and a client's reason or note reaches the run redacted (`api.redaction`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, TypeVar

from temporalio.client import (
    Client,
    RPCTimeoutOrCancelledError,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from loopworks.api import deliveries, history, redaction, unstarted
from loopworks.api.deps import LoopHandle
from loopworks.api.errors import (
    ApiError,
    NotApplicable,
    RunNotFound,
    StateUnavailable,
    TemporalBusy,
    TemporalUnavailable,
)
from loopworks.api.listing import run_status
from loopworks.api.unstarted import Input
from loopworks.schemas.events import Event
from loopworks.schemas.loop import LoopInput
from loopworks.schemas.run import Approval, RunState
from loopworks.workflows.loop import LOOP_WORKFLOW, LoopWorkflow
from loopworks.workspace.git import GitWorkspaces

# A query waits for a worker to answer; past this the caller learns no worker did.
QUERY_TIMEOUT = timedelta(seconds=10)
UPDATE_TIMEOUT = timedelta(seconds=30)
# How a query goes unanswered: the server refused it, the run failed it, or it timed out.
QUERY_FAILURES = (RPCError, WorkflowQueryFailedError, RPCTimeoutOrCancelledError)


def _not_found(err: RPCError) -> bool:
    return err.status == RPCStatusCode.NOT_FOUND


async def describe(
    handle: WorkflowHandle[Any, Any],
    workflow_type: str = LOOP_WORKFLOW,
    missing: type[RunNotFound] = RunNotFound,
) -> WorkflowExecutionDescription:
    """The workflow's description; `missing` (a 404 naming a run, or a graph) when there is
    no workflow of `workflow_type` under its id."""
    try:
        description = await handle.describe()
    except RPCError as err:
        if _not_found(err):
            raise missing(handle.id) from err
        raise
    if description.workflow_type != workflow_type:
        # Another kind of workflow under this id is no run of ours.
        raise missing(handle.id)
    return description


def is_closed(description: WorkflowExecutionDescription) -> bool:
    return description.status not in (None, WorkflowExecutionStatus.RUNNING)


async def read_state(
    handle: LoopHandle, description: WorkflowExecutionDescription | None = None
) -> RunState:
    return redaction.served(await _read_state(handle, description))


async def read_carried_calls(handle: LoopHandle, state: RunState) -> dict[str, str]:
    """The records of single-shot calls a live run holds for its next commit (none once
    it has concluded: its close committed them); none when it cannot be asked."""
    if state.status.is_terminal:
        return {}
    try:
        return await handle.query(LoopWorkflow.carried_calls, rpc_timeout=QUERY_TIMEOUT)
    except QUERY_FAILURES:
        return {}


async def _read_state(
    handle: LoopHandle, description: WorkflowExecutionDescription | None
) -> RunState:
    description = description or await describe(handle)
    if description.status == WorkflowExecutionStatus.COMPLETED:
        # The result is the final state, read from history: no worker, no replay.
        result = await handle.result(follow_runs=False, rpc_timeout=QUERY_TIMEOUT)
        return result.state
    try:
        state = await handle.query(LoopWorkflow.status, rpc_timeout=QUERY_TIMEOUT)
    except QUERY_FAILURES as err:
        params = await never_ran(handle, description, "status", err, LoopInput)
        state = (params.memory or params.first_memory()).state
    if is_closed(description) and not state.status.is_terminal:
        # Closed before the run concluded: its last state still says it is live, as its
        # LoopStatus does. Say how it ended, as the run list does.
        message = await ended_from_outside(handle, description)
        stop = state.stop.model_copy(update={"message": message})
        return state.model_copy(update={"status": run_status(description), "stop": stop})
    return state


# How a workflow that closed before its run concluded ended, in words.
_ENDED = {
    WorkflowExecutionStatus.FAILED: "failed",
    WorkflowExecutionStatus.TERMINATED: "was terminated",
    WorkflowExecutionStatus.TIMED_OUT: "timed out",
    WorkflowExecutionStatus.CANCELED: "was cancelled",
}


async def ended_from_outside(
    handle: WorkflowHandle[Any, Any], description: WorkflowExecutionDescription
) -> str:
    """Why a closed workflow ended without concluding (terminated from the UI or the CLI,
    timed out, failed on a fault), in words: `the workflow was terminated: <reason>`."""
    ended = _ENDED.get(description.status or WorkflowExecutionStatus.FAILED, "closed")
    try:
        await handle.result(follow_runs=False, rpc_timeout=QUERY_TIMEOUT)
        why = None
    except WorkflowFailureError as err:
        why = getattr(err.cause, "message", None) or str(err.cause)
    return f"the workflow {ended}" + (f": {why}" if why else "")


async def read_events(
    handle: LoopHandle,
    after: int,
    workspaces: GitWorkspaces,
    description: WorkflowExecutionDescription | None = None,
    client: Client | None = None,
) -> list[Event]:
    """The run's events after `after`; with `client`, a finished run's are followed by
    the notifications given up after it closed (`api.deliveries`). Served redacted."""
    return redaction.served(await _read_events(handle, after, workspaces, description, client))


async def _read_events(
    handle: LoopHandle,
    after: int,
    workspaces: GitWorkspaces,
    description: WorkflowExecutionDescription | None,
    client: Client | None,
) -> list[Event]:
    description = description or await describe(handle)  # a 404 when it is no run of ours
    if description.status == WorkflowExecutionStatus.COMPLETED:
        # A finished run's result carries its latest events: no worker needed.
        result = await handle.result(follow_runs=False, rpc_timeout=QUERY_TIMEOUT)
        events = await history.with_history(result.log, after, result.state, workspaces, True)
        if client is None:
            return events
        late = deliveries.as_events(
            await deliveries.unrecorded(client, handle.id), result.state, result.events
        )
        return events + [event for event in late if event.seq > after]
    try:
        tail = await handle.query(LoopWorkflow.events, after, rpc_timeout=QUERY_TIMEOUT)
    except QUERY_FAILURES as err:
        params = await never_ran(handle, description, "events", err, LoopInput)
        memory = params.memory or params.first_memory()
        tail = [event for event in memory.tail if event.seq > after]
    if not history.has_gap(tail, after):
        return tail
    state = await read_state(handle, description)
    return await history.with_history(tail, after, state, workspaces, is_closed(description))


async def never_ran(
    handle: WorkflowHandle[Any, Any],
    description: WorkflowExecutionDescription,
    query: str,
    err: Exception,
    input_type: type[Input],
    missing: type[RunNotFound] = RunNotFound,
) -> Input:
    """The start input of a workflow whose `query` failed because it closed before any of
    its code ran (`api.unstarted`); otherwise the error to answer the failed query with."""
    if isinstance(err, RPCError) and _not_found(err):
        raise missing(handle.id) from err
    params = (
        await unstarted.start_input(handle, input_type, description.data_converter)
        if is_closed(description)
        else None
    )
    if params is None:
        raise unanswered(handle, description, query, err) from err
    return params


def unanswered(
    handle: WorkflowHandle[Any, Any],
    description: WorkflowExecutionDescription,
    query: str,
    err: Exception,
) -> ApiError:
    if isinstance(err, RPCError) and err.status == RPCStatusCode.UNAVAILABLE:
        return TemporalUnavailable()
    if isinstance(err, RPCError) and err.status == RPCStatusCode.RESOURCE_EXHAUSTED:
        return TemporalBusy(f"the {query} query of run {handle.id}")
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
    with finished_meanwhile(f"run {handle.id} has already finished"):
        await handle.signal(LoopWorkflow.stop, redaction.prose(reason))
    return state


@contextmanager
def finished_meanwhile(message: str) -> Iterator[None]:
    """A workflow that closed between the check and the signal or update sent to it: a
    409 with `message`, not Temporal's "workflow execution already completed"."""
    try:
        yield
    except RPCError as err:
        if _not_found(err):
            raise NotApplicable(message) from err
        raise


State = TypeVar("State")


async def update(
    handle: WorkflowHandle[Any, Any],
    action: str,
    execute: Callable[[], Awaitable[State]],
    workflow_type: str = LOOP_WORKFLOW,
    missing: type[RunNotFound] = RunNotFound,
) -> State:
    """Run one workflow update; its validator rejecting it (the run's state does not allow
    it) or the run having finished is a 409 that says why."""
    finished = f"cannot {action} {missing.kind} {handle.id}: it has already finished"
    if is_closed(await describe(handle, workflow_type, missing)):
        raise NotApplicable(finished)
    try:
        with finished_meanwhile(finished):
            return redaction.served(await execute())
    except WorkflowUpdateFailedError as err:
        reason = getattr(err.cause, "message", None) or str(err.cause)
        raise NotApplicable(f"cannot {action} {missing.kind} {handle.id}: {reason}") from err


async def clear_block(handle: LoopHandle, note: str) -> RunState:
    return await update(
        handle,
        "clear the block of",
        lambda: handle.execute_update(
            LoopWorkflow.clear_block, redaction.prose(note), rpc_timeout=UPDATE_TIMEOUT
        ),
    )


async def pause(handle: LoopHandle) -> RunState:
    """Accepted at once; the run finishes its current step, then waits in `paused`."""
    return await update(
        handle,
        "pause",
        lambda: handle.execute_update(LoopWorkflow.pause, rpc_timeout=UPDATE_TIMEOUT),
    )


async def resume(handle: LoopHandle) -> RunState:
    return await update(
        handle,
        "resume",
        lambda: handle.execute_update(LoopWorkflow.resume, rpc_timeout=UPDATE_TIMEOUT),
    )


async def approve(handle: LoopHandle, approval: Approval) -> RunState:
    redacted = redaction.approval(approval)
    return await update(
        handle,
        "approve",
        lambda: handle.execute_update(LoopWorkflow.approve, redacted, rpc_timeout=UPDATE_TIMEOUT),
    )
