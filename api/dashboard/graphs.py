"""`/ui/graphs`: the task graphs, and one graph's DAG with live statuses, its ledger, its
merge queue and its spend (docs/dashboard.md#a-graph)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from temporalio.client import Client

from loopworks.api import graph_handles, listing
from loopworks.api.dashboard import dag, render
from loopworks.api.dashboard.access import UiCaller
from loopworks.api.dashboard.runs import digest, spend, temporal_link
from loopworks.api.deps import ClientDep, SettingsDep
from loopworks.api.models import RunSummary
from loopworks.api.routes.graphs import GraphHandle
from loopworks.schemas.graph import TaskState
from loopworks.schemas.run import RunStatus
from loopworks.schemas.tasks import TaskStatus
from loopworks.workflows.graph.workflow import GRAPH_WORKFLOW
from loopworks.workflows.loop import LOOP_WORKFLOW
from loopworks.workflows.search_attributes import (
    GRAPH_STATUS,
    GRAPH_TASKS,
    LOOP_GRAPH,
    LOOP_STARTED_BY,
)

router = APIRouter(prefix="/ui", tags=["dashboard"], include_in_schema=False)

# What a node shows, from the ledger's status and the task's latest loop: a loop that
# completed and whose task is still in progress waits in the merge queue (merged, then
# verified); a loop waiting for a person holds its task.
NODE_STATUSES = ("pending", "running", "verifying", "merged", "failed", "held")
_HELD_LOOPS = frozenset({RunStatus.BLOCKED, RunStatus.AWAITING_APPROVAL, RunStatus.PAUSED})


def node_status(task: TaskState, loop: RunSummary | None) -> str:
    if task.status == TaskStatus.COMPLETED:
        return "merged"
    if task.status == TaskStatus.FAILED:
        return "failed"
    if task.status == TaskStatus.BLOCKED:
        return "held"
    if task.status == TaskStatus.PENDING:
        return "pending"
    if loop is not None and loop.status == RunStatus.COMPLETED:
        return "verifying"
    if loop is not None and loop.status in _HELD_LOOPS:
        return "held"
    return "running"


async def task_loops(client: Client, graph_id: str) -> dict[str, RunSummary]:
    """Every loop of the graph's tasks, as visibility lists them, by run id. The graph id
    is one the workspace accepts (the route checked it): no quote reaches the query."""
    query = f'WorkflowType = "{LOOP_WORKFLOW}" AND {LOOP_GRAPH.name} = "{graph_id}"'
    found = client.list_workflows(query, limit=2000, page_size=1000)
    return {execution.id: listing.summarize(execution) async for execution in found}


@dataclass(frozen=True)
class TaskRow:
    state: TaskState
    status: str
    loop: RunSummary | None


@router.get("/graphs")
async def graphs_page(
    request: Request,
    caller: UiCaller,
    client: ClientDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> HTMLResponse:
    """The newest graphs, with their status and task counts as visibility holds them."""
    query = f'WorkflowType = "{GRAPH_WORKFLOW}"'
    rows = [
        {
            "graph_id": execution.id,
            "execution": execution.status.name.lower() if execution.status else "",
            "status": execution.typed_search_attributes.get(GRAPH_STATUS) or "",
            "tasks": execution.typed_search_attributes.get(GRAPH_TASKS) or "",
            "started_by": execution.typed_search_attributes.get(LOOP_STARTED_BY) or "",
            "start_time": execution.start_time,
        }
        async for execution in client.list_workflows(query, limit=limit)
    ]
    return render.page(request, "graphs.html", caller, {"rows": rows})


@router.get("/graphs/{graph_id}")
async def graph_page(
    request: Request,
    caller: UiCaller,
    handle: GraphHandle,
    client: ClientDep,
    settings: SettingsDep,
    part: str | None = None,
) -> HTMLResponse:
    """The DAG of the graph's tasks, coloured by status, each linking to its loop; the
    ledger; the merge queue; the spend against the graph's total budget."""
    state, ledger = await graph_handles.read(handle)
    loops = await task_loops(client, handle.id)
    rows = []
    for task in state.tasks:
        loop = loops.get(task.run_ids[-1]) if task.run_ids else None
        rows.append(TaskRow(task, node_status(task, loop), loop))
    by_id = {row.state.task.id: row for row in rows}
    layout = dag.layout([(t.task.id, t.task.requires) for t in state.tasks])
    queue = sorted(
        (row for row in rows if row.status == "verifying"),
        key=lambda row: row.loop.closed_at.isoformat() if row.loop and row.loop.closed_at else "",
    )
    context = {
        "graph": state,
        "rows": rows,
        "by_id": by_id,
        "layout": layout,
        "ledger": ledger,
        "queue": queue,
        "spend": spend(state.usage, state.total_budget),
        "statuses": NODE_STATUSES,
        "temporal_link": temporal_link(settings, handle.id),
        "versions": {
            "graph": digest(
                state.model_dump(mode="json", exclude={"updated_at"}),
                [row.status for row in rows],
                len(ledger),
            )
        },
    }
    if part == "live":
        context |= {"caller": caller, "can_act": not caller.read_only}
        return render.fragment("graph_live.html", context)
    return render.page(request, "graph.html", caller, context)
