"""`/runs`: start a run, list runs, read one run, and send it messages."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, Query, Request, Response, status
from fastapi.responses import PlainTextResponse
from fastapi.sse import EventSourceResponse

from loopworks.api import idempotency, launch, listing, redaction, run_handles, stream
from loopworks.api.deps import ClientDep, ConnectionDep, RunHandle, SettingsDep, WorkspacesDep
from loopworks.api.errors import ArtifactMissing, UpstreamError
from loopworks.api.models import (
    ARTIFACT_COMMIT_HEADER,
    RUN_STATUS_HEADER,
    ClearBlockRequest,
    ErrorBody,
    NoArguments,
    RunCreated,
    RunSummary,
    StopRequest,
)
from loopworks.api.quotas import StreamSlots, check_rules
from loopworks.api.security import CallerDep, require_token
from loopworks.api.trajectory import run_trajectory, served
from loopworks.schemas.events import Event
from loopworks.schemas.run import Approval, RunRequest, RunState, RunStatus
from loopworks.schemas.steps import ARTIFACT_PATH
from loopworks.workspace.git import GitError

Responses = dict[int | str, dict[str, Any]]
NOT_FOUND: Responses = {404: {"model": ErrorBody, "description": "Unknown run"}}
CONFLICT: Responses = {
    409: {"model": ErrorBody, "description": "The message does not fit the run's state"}
}

UNAUTHORIZED: Responses = {
    401: {"model": ErrorBody, "description": "LOOPS_API_TOKENS is set and no valid token was sent"},
    403: {"model": ErrorBody, "description": "A read-only token sent a change"},
}
OVER_QUOTA: Responses = {
    429: {"model": ErrorBody, "description": "A cap is reached (the message names its setting)"}
}

# Every run route needs a token when LOOPS_API_TOKENS is set; health and docs do not.
router = APIRouter(
    prefix="/runs",
    tags=["runs"],
    dependencies=[Depends(require_token)],
    responses=UNAUTHORIZED,
)


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    responses={
        **OVER_QUOTA,
        200: {
            "model": RunCreated,
            "description": "The run an earlier request with the same Idempotency-Key started",
        },
        422: {
            "model": ErrorBody,
            "description": "Invalid request, or an Idempotency-Key reused with another request",
        },
    },
)
async def create_run(
    body: RunRequest,
    connection: ConnectionDep,
    settings: SettingsDep,
    response: Response,
    caller: CallerDep,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias=idempotency.KEY_HEADER,
            min_length=1,
            max_length=idempotency.MAX_KEY_CHARS,
            description="Send the same key again to get the same run back instead of a new one",
        ),
    ] = None,
) -> RunCreated:
    # Checked before touching Temporal: bad input is a 422 even while Temporal is down.
    request = await asyncio.to_thread(launch.checked, body, settings.origin_rules())
    request = redaction.run_request(launch.within_limits(request, settings))
    client = await connection.client()
    started = await launch.start_run(client, settings, request, idempotency_key, caller=caller.name)
    status_url = router.url_path_for("get_run", run_id=started.run_id)
    response.headers["Location"] = str(status_url)
    if not started.created:
        response.status_code = status.HTTP_200_OK
        response.headers["Idempotent-Replayed"] = "true"
    return RunCreated(run_id=started.run_id, alias=started.alias, status_url=str(status_url))


@router.get("")
async def list_runs(
    client: ClientDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    status_filter: Annotated[RunStatus | None, Query(alias="status")] = None,
    alias: Annotated[
        str | None,
        Query(
            max_length=100,
            pattern=listing.ALIAS_PATTERN,
            description="Only runs with this alias (newest first)",
        ),
    ] = None,
    before: Annotated[
        datetime | None,
        Query(description="Only runs started before this time: the next page after a run's"),
    ] = None,
) -> list[RunSummary]:
    return await listing.list_runs(client, limit, status_filter, alias, before)


@router.get("/{run_id:run_id}", responses=NOT_FOUND)
async def get_run(handle: RunHandle) -> RunState:
    return await run_handles.read_state(handle)


@router.get(
    "/{run_id:run_id}/events",
    response_model=list[Event],
    responses={
        **NOT_FOUND,
        200: {
            "description": "The events as a JSON list, or with `follow` a text/event-stream",
            "content": {"text/event-stream": {}},
        },
        204: {"description": "`follow` on a finished run whose events were all received"},
    },
)
async def get_events(
    handle: RunHandle,
    client: ClientDep,
    workspaces: WorkspacesDep,
    caller: CallerDep,
    request: Request,
    after: Annotated[
        int, Query(ge=0, description="Only events with a higher seq (the first is 1)")
    ] = 0,
    follow: Annotated[
        bool, Query(description="Stream Server-Sent Events until the run ends")
    ] = False,
    last_event_id: Annotated[
        int | None,
        Header(
            alias="Last-Event-ID",
            ge=0,
            description="With `follow`: resume after this seq (wins over `after`)",
        ),
    ] = None,
) -> list[Event] | Response:
    if not follow:
        return await run_handles.read_events(handle, after, workspaces, client=client)
    # A reconnecting EventSource repeats the original URL and adds the header, so the
    # header is the newer cursor.
    cursor = last_event_id if last_event_id is not None else after
    # Read once before answering: unknown runs are 404s and silent workers 503s here,
    # not a stream that breaks after its 200.
    source = stream.RunEvents(handle, workspaces, client)
    closed = await source.closed()
    first = await source.events(cursor)
    if closed and not any(event.seq > cursor for event in first):
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    slots: StreamSlots = request.app.state.streams
    slot = slots.take(caller.name)
    return EventSourceResponse(
        slot.hold(stream.follow(source, handle.id, cursor, first, closed)),
        # No caching, and no buffering in nginx-style proxies: events go out as they come.
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.get(
    "/{run_id:run_id}/artifact",
    response_class=PlainTextResponse,
    responses={**NOT_FOUND, 200: {"content": {"text/markdown": {}}}},
)
async def get_artifact(handle: RunHandle, workspaces: WorkspacesDep) -> PlainTextResponse:
    """The run's artifact at its latest commit: the final one once it has finished, its
    latest draft while it runs (headers X-Loops-Run-Status, X-Loops-Artifact-Commit)."""
    state = await run_handles.read_state(handle)
    if not state.artifact_commit:
        if state.status.is_terminal:  # it never will: no "yet"
            ended = f"run {handle.id} ended ({state.status.value}) without producing an artifact"
            raise ArtifactMissing(ended)
        raise ArtifactMissing(f"run {handle.id} has produced no artifact yet")
    try:
        # Git is blocking I/O; keep it off the event loop.
        text = await asyncio.to_thread(
            workspaces.read_file, state.origin, state.artifact_commit, ARTIFACT_PATH
        )
    except (GitError, ValueError) as err:
        raise UpstreamError(f"could not read the artifact of run {handle.id}: {err}") from err
    if text is None:
        raise ArtifactMissing(
            f"run {handle.id}: {ARTIFACT_PATH} is not in commit {state.artifact_commit}"
        )
    # Whether this is the final artifact or a live run's latest draft, and which commit.
    headers = {RUN_STATUS_HEADER: state.status.value, ARTIFACT_COMMIT_HEADER: state.artifact_commit}
    return PlainTextResponse(text, media_type="text/markdown; charset=utf-8", headers=headers)


@router.get(
    "/{run_id:run_id}/trajectory",
    response_class=Response,
    responses={**NOT_FOUND, 200: {"content": {"application/x-ndjson": {}}}},
)
async def get_trajectory(
    handle: RunHandle,
    workspaces: WorkspacesDep,
    loop_type: Annotated[
        Literal["task", "skill"] | None,
        Query(description="only the task loop's lines, or only the skill sub-loop's"),
    ] = None,
) -> Response:
    """Every model call of the run, as JSON lines tagged with step, role, iteration,
    `loop_type` and `trajectory_id`: the agents' from the run's latest commit, the
    single-shot calls' from their own refs (docs/observability.md#the-trajectory)."""
    state = await run_handles.read_state(handle)
    if not state.usage.calls and not state.artifact_commit:
        raise ArtifactMissing(f"run {handle.id} has no trajectory yet")  # no model call yet
    carried = await run_handles.read_carried_calls(handle, state)
    return await served(
        lambda: run_trajectory(workspaces, state, carried),
        f"run {handle.id}",
        f"run {handle.id} has no trajectory yet",
        loop_type,
    )


@router.post(
    "/{run_id:run_id}/stop",
    status_code=status.HTTP_202_ACCEPTED,
    responses={**NOT_FOUND, **CONFLICT},
)
async def stop_run(handle: RunHandle, body: StopRequest | None = None) -> RunState:
    return await run_handles.request_stop(handle, body.reason if body else None)


@router.post("/{run_id:run_id}/clear-block", responses={**NOT_FOUND, **CONFLICT})
async def clear_block(handle: RunHandle, body: ClearBlockRequest) -> RunState:
    return await run_handles.clear_block(handle, body.note)


@router.post("/{run_id:run_id}/pause", responses={**NOT_FOUND, **CONFLICT})
async def pause_run(handle: RunHandle, body: NoArguments | None = None) -> RunState:
    """The current step finishes, then the run waits in status `paused` until resumed."""
    return await run_handles.pause(handle)


@router.post("/{run_id:run_id}/resume", responses={**NOT_FOUND, **CONFLICT})
async def resume_run(handle: RunHandle, body: NoArguments | None = None) -> RunState:
    return await run_handles.resume(handle)


@router.post("/{run_id:run_id}/approve", responses={**NOT_FOUND, **CONFLICT})
async def approve_run(
    handle: RunHandle, settings: SettingsDep, body: Approval | None = None
) -> RunState:
    """Interactive mode: start iterating, optionally with edited rules, thresholds and
    max iterations (validated as in a new run request)."""
    if body is not None and body.rules is not None:
        check_rules(len(body.rules), settings)
    return await run_handles.approve(handle, body or Approval())
