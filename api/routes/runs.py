"""`/runs`: start a run, list runs, read one run, and send it messages."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response, status
from fastapi.responses import PlainTextResponse

from activities.llm.offline import ARTIFACT_PATH
from activities.workspace import GitError
from api import launch, listing, runs
from api.deps import ClientDep, ConnectionDep, RunHandle, SettingsDep, WorkspacesDep
from api.errors import ArtifactMissing, UpstreamError
from api.models import ClearBlockRequest, ErrorBody, RunCreated, RunSummary, StopRequest
from api.trajectory import read_trajectory
from schemas.events import Event
from schemas.run import RunRequest, RunState, RunStatus

Responses = dict[int | str, dict[str, Any]]
NOT_FOUND: Responses = {404: {"model": ErrorBody, "description": "Unknown run"}}
CONFLICT: Responses = {
    409: {"model": ErrorBody, "description": "The message does not fit the run's state"}
}

router = APIRouter(prefix="/runs", tags=["runs"])


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    responses={422: {"model": ErrorBody, "description": "Invalid request"}},
)
async def create_run(
    body: RunRequest, connection: ConnectionDep, settings: SettingsDep, response: Response
) -> RunCreated:
    # Checked before touching Temporal: bad input is a 422 even while Temporal is down.
    request = launch.checked(body)
    started = await launch.start_run(await connection.client(), settings, request)
    status_url = router.url_path_for("get_run", run_id=started.run_id)
    response.headers["Location"] = str(status_url)
    return RunCreated(run_id=started.run_id, alias=started.alias, status_url=str(status_url))


@router.get("")
async def list_runs(
    client: ClientDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    status_filter: Annotated[RunStatus | None, Query(alias="status")] = None,
) -> list[RunSummary]:
    return await listing.list_runs(client, limit, status_filter)


@router.get("/{run_id}", responses=NOT_FOUND)
async def get_run(handle: RunHandle) -> RunState:
    return await runs.read_state(handle)


@router.get("/{run_id}/events", responses=NOT_FOUND)
async def get_events(handle: RunHandle, after: Annotated[int, Query(ge=0)] = 0) -> list[Event]:
    return await runs.read_events(handle, after)


@router.get(
    "/{run_id}/artifact",
    response_class=PlainTextResponse,
    responses={**NOT_FOUND, 200: {"content": {"text/markdown": {}}}},
)
async def get_artifact(handle: RunHandle, workspaces: WorkspacesDep) -> PlainTextResponse:
    state = await runs.read_state(handle)
    if not state.artifact_commit:
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
    return PlainTextResponse(text, media_type="text/markdown; charset=utf-8")


@router.get(
    "/{run_id}/trajectory",
    response_class=Response,
    responses={**NOT_FOUND, 200: {"content": {"application/x-ndjson": {}}}},
)
async def get_trajectory(handle: RunHandle, workspaces: WorkspacesDep) -> Response:
    """Every message and tool call of the run's PRODUCE and REFINE agents, as JSON lines
    tagged with step and iteration, from the run's latest artifact commit."""
    state = await runs.read_state(handle)
    if not state.artifact_commit:
        raise ArtifactMissing(f"run {handle.id} has no trajectory yet")
    try:
        text = await asyncio.to_thread(
            read_trajectory, workspaces, state.origin, state.artifact_commit
        )
    except (GitError, ValueError) as err:
        raise UpstreamError(f"could not read the trajectory of run {handle.id}: {err}") from err
    if not text:
        raise ArtifactMissing(f"run {handle.id}: no trajectory in commit {state.artifact_commit}")
    return Response(text, media_type="application/x-ndjson")


@router.post(
    "/{run_id}/stop", status_code=status.HTTP_202_ACCEPTED, responses={**NOT_FOUND, **CONFLICT}
)
async def stop_run(handle: RunHandle, body: StopRequest | None = None) -> RunState:
    return await runs.request_stop(handle, body.reason if body else None)


@router.post("/{run_id}/clear-block", responses={**NOT_FOUND, **CONFLICT})
async def clear_block(handle: RunHandle, body: ClearBlockRequest) -> RunState:
    return await runs.clear_block(handle, body.note)
