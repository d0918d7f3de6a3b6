"""`/graphs`: start a task graph, list graphs, read one (its tasks and ledger), steer it."""

from __future__ import annotations

import asyncio
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Header, Query, Request, Response, status
from fastapi.sse import EventSourceResponse
from pydantic import Field

from loopworks.api import graph_handles, redaction, stream
from loopworks.api.deps import ClientDep, ConnectionDep, SettingsDep, WorkspacesDep
from loopworks.api.errors import GraphNotFound
from loopworks.api.models import (
    ClearBlockRequest,
    ErrorBody,
    GraphCreated,
    GraphListed,
    NoArguments,
    StopRequest,
)
from loopworks.api.quotas import StreamSlots
from loopworks.api.routes.runs import CONFLICT, OVER_QUOTA, UNAUTHORIZED, Responses
from loopworks.api.security import CallerDep, require_token
from loopworks.api.trajectory import graph_trajectory, served
from loopworks.schemas.graph import GraphApproval, GraphRequest, GraphState
from loopworks.schemas.run import RunState
from loopworks.workflows.graph.workflow import GRAPH_WORKFLOW
from loopworks.workflows.search_attributes import LOOP_STARTED_BY
from loopworks.workspace.refs import checked_run_id

NOT_FOUND: Responses = {404: {"model": ErrorBody, "description": "Unknown graph"}}

router = APIRouter(
    prefix="/graphs",
    tags=["graphs"],
    dependencies=[Depends(require_token)],
    responses=UNAUTHORIZED,
)


async def graph_handle(graph_id: str, connection: ConnectionDep) -> graph_handles.GraphHandle:
    try:
        checked_run_id(graph_id)
    except ValueError as err:
        raise GraphNotFound(graph_id[:200]) from err
    client = await connection.client()
    return client.get_workflow_handle_for(graph_handles.TaskGraphWorkflow.run, graph_id)


GraphHandle = Annotated[graph_handles.GraphHandle, Depends(graph_handle)]


@router.post("", status_code=status.HTTP_201_CREATED, responses=OVER_QUOTA)
async def create_graph(
    body: GraphRequest,
    connection: ConnectionDep,
    settings: SettingsDep,
    response: Response,
    caller: CallerDep,
) -> GraphCreated:
    request = await asyncio.to_thread(graph_handles.checked, body, settings.origin_rules())
    request = redaction.graph_request(graph_handles.within_limits(request, settings))
    client = await connection.client()
    graph_id = await graph_handles.start_graph(client, settings, request, caller=caller.name)
    url = str(router.url_path_for("get_graph", graph_id=graph_id))
    response.headers["Location"] = url
    return GraphCreated(graph_id=graph_id, status_url=url)


@router.get("")
async def list_graphs(
    client: ClientDep, limit: Annotated[int, Query(ge=1, le=500)] = 50
) -> list[GraphListed]:
    listed: list[GraphListed] = []
    query = f'WorkflowType = "{GRAPH_WORKFLOW}"'
    async for execution in client.list_workflows(query, limit=limit):
        listed.append(
            GraphListed(
                graph_id=execution.id,
                status=execution.status.name.lower() if execution.status else "unknown",
                start_time=execution.start_time.isoformat() if execution.start_time else None,
                started_by=execution.typed_search_attributes.get(LOOP_STARTED_BY),
            )
        )
    return listed


@router.get("/{graph_id}", responses=NOT_FOUND)
async def get_graph(handle: GraphHandle, client: ClientDep) -> GraphState:
    """The graph's status, integration branch, and every task with its attempts and runs;
    once it has finished, its notifications given up since are in its `notify_failed`."""
    return await graph_handles.with_late_failures(client, await graph_handles.read_state(handle))


@router.get(
    "/{graph_id}/ledger",
    response_class=Response,
    responses={
        **NOT_FOUND,
        200: {"content": {"application/x-ndjson": {}, "text/event-stream": {}}},
        204: {"description": "`follow` on a finished graph whose lines were all received"},
    },
)
async def get_ledger(
    handle: GraphHandle,
    caller: CallerDep,
    request: Request,
    follow: Annotated[
        bool, Query(description="Stream the lines as Server-Sent Events until the graph ends")
    ] = False,
    after: Annotated[int, Query(ge=0, description="With `follow`: lines after this one")] = 0,
    last_event_id: Annotated[
        int | None, Header(alias="Last-Event-ID", ge=0, description="Resume after this line")
    ] = None,
) -> Response:
    """The graph's status ledger (docs/graphs.md#the-ledger) as JSON lines, as the graph
    appends it to docs/current/task-status.jsonl on its integration branch; with `follow`,
    its lines as they come (event `ledger`, id the line's number), as `/runs/{id}/events`
    streams."""
    if not follow:
        lines = await graph_handles.read_ledger(handle)
        text = "".join(line.to_jsonl() + "\n" for line in lines)
        return Response(text, media_type="application/x-ndjson")
    cursor = last_event_id if last_event_id is not None else after
    source = graph_handles.GraphLedger(handle)
    closed = await source.closed()
    first = await source.events(cursor)
    if closed and not first:
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    slots: StreamSlots = request.app.state.streams
    slot = slots.take(caller.name)
    return EventSourceResponse(
        slot.hold(
            stream.follow(
                source, handle.id, cursor, first, closed, encoder=graph_handles.encode_entry
            )
        ),
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.get(
    "/{graph_id}/trajectory",
    response_class=Response,
    responses={**NOT_FOUND, 200: {"content": {"application/x-ndjson": {}}}},
)
async def get_graph_trajectory(
    handle: GraphHandle,
    workspaces: WorkspacesDep,
    loop_type: Annotated[
        Literal["task", "skill"] | None,
        Query(description="only the task loop's lines, or only the skill sub-loop's"),
    ] = None,
) -> Response:
    """The graph's own model calls (its task planner's) as JSON lines, in the format of
    `/runs/{id}/trajectory`; each task loop's calls are that run's
    (docs/observability.md#the-trajectory)."""
    state = await graph_handles.read_state(handle)
    return await served(
        lambda: graph_trajectory(workspaces, state),
        f"graph {handle.id}",
        f"graph {handle.id} has no trajectory (no model call of its own)",
        loop_type,
    )


@router.post(
    "/{graph_id}/stop", status_code=status.HTTP_202_ACCEPTED, responses={**NOT_FOUND, **CONFLICT}
)
async def stop_graph(handle: GraphHandle, body: StopRequest | None = None) -> GraphState:
    """Stops every running task loop (each still pushes its work) and starts no more."""
    return await graph_handles.request_stop(handle, body.reason if body else None)


@router.post("/{graph_id}/pause", responses={**NOT_FOUND, **CONFLICT})
async def pause_graph(handle: GraphHandle, body: NoArguments | None = None) -> GraphState:
    """No new task starts; running ones go on."""
    return await graph_handles.pause(handle)


@router.post("/{graph_id}/resume", responses={**NOT_FOUND, **CONFLICT})
async def resume_graph(handle: GraphHandle, body: NoArguments | None = None) -> GraphState:
    return await graph_handles.resume(handle)


@router.post("/{graph_id}/approve", responses={**NOT_FOUND, **CONFLICT})
async def approve_graph(handle: GraphHandle, body: GraphApproval | None = None) -> GraphState:
    """Interactive mode: start the tasks, optionally an edited list (validated again)."""
    return await graph_handles.approve(handle, body or GraphApproval())


class TaskClearBlock(ClearBlockRequest):
    task: str = Field(description="the task whose loop a custodiet audit blocked")


@router.post("/{graph_id}/clear-block", responses={**NOT_FOUND, **CONFLICT})
async def clear_task_block(
    handle: GraphHandle, client: ClientDep, body: TaskClearBlock
) -> RunState:
    """Release the block of one task's running loop; only that task and its dependants
    were held."""
    return await graph_handles.clear_block(client, handle, body.task, body.note)
