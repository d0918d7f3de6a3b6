"""Starting, reading and steering task graphs through their workflow handles.

A finished graph answers from its workflow result (no worker needed); a live one answers
the `status` and `ledger` queries. Messages reuse the run routes' rules: an update the
graph's state does not allow is a 409 that says why.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Any

from fastapi.sse import format_sse_event
from pydantic import BaseModel
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy

from loopworks.api import admission, deliveries, launch, quotas, redaction, run_handles
from loopworks.api.errors import GraphNotFound, NotApplicable, TaskNotFound, invalid
from loopworks.schemas.graph import (
    GraphApproval,
    GraphInput,
    GraphRequest,
    GraphResult,
    GraphState,
    GraphStatus,
)
from loopworks.schemas.origin_rules import OriginRules
from loopworks.schemas.run import RunState
from loopworks.schemas.settings import Settings
from loopworks.schemas.tasks import GraphError, LedgerLine, TaskStatus, validated_graph
from loopworks.workflows.decisions import alias_for
from loopworks.workflows.graph.workflow import GRAPH_WORKFLOW, TaskGraphWorkflow
from loopworks.workflows.loop import LoopWorkflow

GraphHandle = WorkflowHandle[TaskGraphWorkflow, GraphResult]


def checked(request: GraphRequest, rules: OriginRules) -> GraphRequest:
    """A 422 for what would only fail inside the graph: a bad or disallowed repo, invalid
    tasks. Blocking (a host may be resolved): call it from a thread."""
    if request.repo:
        probe = launch.checked_repo(request.repo, rules)
        launch.checked_branch(probe, request.base_branch)
        request = request.model_copy(update={"repo": probe})
    launch.checked_notify(request.notify, rules)
    if request.tasks is not None:
        try:
            validated_graph(request.tasks)
        except GraphError as err:
            raise invalid("tasks", str(err), None) from err
    return request


def within_limits(request: GraphRequest, settings: Settings) -> GraphRequest:
    """The request with the operator's budgets, for each task loop and for the whole
    graph, or a 422 naming the setting it goes past."""
    budget = quotas.checked_budget(request.budget, settings)
    total = quotas.checked_budget(request.total_budget, settings, "total_budget")
    launch.notify_configured(request.notify, settings)
    return request.model_copy(update={"budget": budget, "total_budget": total})


async def start_graph(
    client: Client, settings: Settings, request: GraphRequest, *, caller: str
) -> str:
    """Start a graph for `caller` (a token's name) in a slot of each cap, its total budget at
    most what its client's day leaves (`loopworks.api.admission`)."""
    now = datetime.now(UTC)
    graph_id = f"graph-{alias_for(request.goal)}-{now:%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"
    async with admission.admitted(
        client, settings, quotas.Kind.GRAPHS, caller, graph_id, request.total_budget
    ) as admitted:
        params = GraphInput(
            graph_id=graph_id,
            request=request.model_copy(update={"total_budget": admitted.budget}),
            created_at=now.isoformat(),
            started_by=caller,
            notify=settings.notify_plan(request.notify),
            slots=admitted.slot_ids,
        )
        await client.start_workflow(
            TaskGraphWorkflow.run,
            params,
            id=graph_id,
            task_queue=settings.task_queue,
            search_attributes=launch.started_by(caller),
            static_summary=launch.summary(request.goal),
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            # Admission burns the id of a graph admitted but never started.
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            memo=admitted.memo(),
        )
    return graph_id


async def read(handle: GraphHandle) -> tuple[GraphState, list[LedgerLine]]:
    """The graph's state and ledger, read together, as the API may serve them
    (`api.redaction`)."""
    return redaction.served(await _read(handle))


async def _read(handle: GraphHandle) -> tuple[GraphState, list[LedgerLine]]:
    description = await run_handles.describe(handle, GRAPH_WORKFLOW, GraphNotFound)
    if description.status == WorkflowExecutionStatus.COMPLETED:
        # The result is the final state and ledger, read from history: no worker needed.
        result = await handle.result(follow_runs=False, rpc_timeout=run_handles.QUERY_TIMEOUT)
        return result.state, result.ledger
    try:
        state = await handle.query(TaskGraphWorkflow.status, rpc_timeout=run_handles.QUERY_TIMEOUT)
        ledger = await handle.query(TaskGraphWorkflow.ledger, rpc_timeout=run_handles.QUERY_TIMEOUT)
    except run_handles.QUERY_FAILURES as err:
        params = await run_handles.never_ran(
            handle, description, "status", err, GraphInput, GraphNotFound
        )
        memory = params.memory or params.first_memory()
        state, ledger = memory.state, memory.ledger
    if run_handles.is_closed(description) and not state.status.is_terminal:
        # Closed before the graph concluded (terminated, timed out): say how it ended.
        cancelled = description.status == WorkflowExecutionStatus.CANCELED
        ended = {
            "status": GraphStatus.STOPPED if cancelled else GraphStatus.FAILED,
            "message": await run_handles.ended_from_outside(handle, description),
        }
        state = state.model_copy(update=ended)
    return state, ledger


async def read_state(handle: GraphHandle) -> GraphState:
    return (await read(handle))[0]


async def with_late_failures(client: Client, state: GraphState) -> GraphState:
    """A finished graph's state with the notifications given up after it closed
    (`api.deliveries`) after those it recorded itself."""
    if not state.status.is_terminal:
        return state
    late = [given.failed for given in await deliveries.unrecorded(client, state.graph_id)]
    if not late:
        return state
    return state.model_copy(update={"notify_failed": [*state.notify_failed, *late]})


async def read_ledger(handle: GraphHandle) -> list[LedgerLine]:
    return (await read(handle))[1]


async def request_stop(handle: GraphHandle, reason: str | None) -> GraphState:
    description = await run_handles.describe(handle, GRAPH_WORKFLOW, GraphNotFound)
    if run_handles.is_closed(description):
        raise NotApplicable(f"graph {handle.id} has already finished")
    with run_handles.finished_meanwhile(f"graph {handle.id} has already finished"):
        await handle.signal(TaskGraphWorkflow.stop, redaction.prose(reason))
    return await read_state(handle)


async def pause(handle: GraphHandle) -> GraphState:
    return await _update(handle, "pause", TaskGraphWorkflow.pause)


async def resume(handle: GraphHandle) -> GraphState:
    return await _update(handle, "resume", TaskGraphWorkflow.resume)


async def approve(handle: GraphHandle, approval: GraphApproval) -> GraphState:
    return await _update(
        handle, "approve", TaskGraphWorkflow.approve, redaction.graph_approval(approval)
    )


async def _update(handle: GraphHandle, action: str, update: Any, *args: Any) -> GraphState:
    state: GraphState = await run_handles.update(
        handle,
        action,
        lambda: handle.execute_update(update, *args, rpc_timeout=run_handles.UPDATE_TIMEOUT),
        GRAPH_WORKFLOW,
        GraphNotFound,
    )
    return state


async def clear_block(client: Client, handle: GraphHandle, task_id: str, note: str) -> RunState:
    """Reach the task's running loop: a custodiet block holds only that task (and what
    needs it), and clearing it is the loop's own update."""
    state = await read_state(handle)
    task = next((t for t in state.tasks if t.task.id == task_id), None)
    if task is None:
        raise TaskNotFound(handle.id, task_id)
    if task.status != TaskStatus.IN_PROGRESS or not task.run_ids:
        raise NotApplicable(f"task {task_id} of graph {handle.id} is not running")
    loop = client.get_workflow_handle_for(LoopWorkflow.run, task.run_ids[-1])
    return await run_handles.clear_block(loop, note)


class LedgerEntry(BaseModel):
    """A ledger line and its place in the ledger (from 1): what the stream numbers."""

    seq: int
    line: LedgerLine


def encode_entry(entry: LedgerEntry) -> bytes:
    return format_sse_event(data_str=entry.line.to_jsonl(), event="ledger", id=str(entry.seq))


class GraphLedger:
    """A graph's ledger lines after a cursor, and whether the graph has closed: what
    `api.stream.follow` streams, as it streams a run's events."""

    def __init__(self, handle: GraphHandle) -> None:
        self._handle = handle

    async def events(self, after: int) -> list[LedgerEntry]:
        lines = await read_ledger(self._handle)
        return [LedgerEntry(seq=n, line=line) for n, line in enumerate(lines, 1) if n > after]

    async def closed(self) -> bool:
        return run_handles.is_closed(
            await run_handles.describe(self._handle, GRAPH_WORKFLOW, GraphNotFound)
        )
