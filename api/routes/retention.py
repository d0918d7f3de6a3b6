"""Retention (docs/operations.md#retention): `POST /gc` runs the gc of finished runs'
records now (an admin token's only), `POST /runs/{id}/pin` and `/unpin` keep a run from
it or give it back."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from loopworks.api import pruning
from loopworks.api.deps import RUN_ID, ClientDep, SettingsDep, WorkspacesDep
from loopworks.api.errors import RunNotFound
from loopworks.api.models import ErrorBody
from loopworks.api.routes.runs import NOT_FOUND, UNAUTHORIZED, Responses
from loopworks.api.security import AdminDep, CallerDep, require_token
from loopworks.schemas.retention import GcReport, GcRequest, PinRequest, PinState

NOT_ADMIN: Responses = {
    403: {"model": ErrorBody, "description": "The token is not one of LOOPS_API_ADMIN_TOKENS"}
}
STILL_RUNNING: Responses = {
    504: {"model": ErrorBody, "description": "The gc goes on past the request's wait"}
}
UPSTREAM: Responses = {502: {"model": ErrorBody, "description": "Git failed on the origin"}}


def pinnable(run_id: str) -> str:
    """A run's or a graph's id, or a 404: nothing else can hold a pin (it names a ref)."""
    if not RUN_ID.fullmatch(run_id) or ".." in run_id:
        raise RunNotFound(run_id[:200])
    return run_id


PinnableId = Annotated[str, Depends(pinnable)]

router = APIRouter(
    tags=["retention"], dependencies=[Depends(require_token)], responses=UNAUTHORIZED
)


@router.post("/gc", responses={**NOT_ADMIN, **STILL_RUNNING})
async def collect_garbage(
    body: GcRequest, caller: AdminDep, client: ClientDep, settings: SettingsDep
) -> GcReport:
    """Remove finished runs' expired records now (the workers' LOOPS_RETENTION_* policy),
    or with `dry_run` only say what would go: per origin, the runs, their refs and their
    clones' bytes. Open and pinned runs are never touched; result branches stay unless
    `branches` (or LOOPS_RETENTION_BRANCHES) says otherwise."""
    return await pruning.collect(client, settings, body, caller.name)


@router.post("/runs/{run_id:run_id}/pin", responses={**NOT_FOUND, **UPSTREAM})
async def pin_run(
    run_id: PinnableId,
    caller: CallerDep,
    client: ClientDep,
    settings: SettingsDep,
    workspaces: WorkspacesDep,
    body: PinRequest | None = None,
) -> PinState:
    """Keep a run's (or a graph's) records from the gc, whatever its age."""
    request = body or PinRequest()
    return await pruning.pin(client, settings, workspaces, run_id, request, caller.name, True)


@router.post("/runs/{run_id:run_id}/unpin", responses={**NOT_FOUND, **UPSTREAM})
async def unpin_run(
    run_id: PinnableId,
    caller: CallerDep,
    client: ClientDep,
    settings: SettingsDep,
    workspaces: WorkspacesDep,
    body: PinRequest | None = None,
) -> PinState:
    """Give a pinned run back to the gc: it expires as any other finished run."""
    request = body or PinRequest()
    return await pruning.pin(client, settings, workspaces, run_id, request, caller.name, False)
