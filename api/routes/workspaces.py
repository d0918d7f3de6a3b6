"""`/runs/{run_id}/workspace`: a finished run's working clones on the service's disk.

`GET` says what is there, `DELETE` removes it (what `loops clean` calls). The run's
result, its pushed branch on the origin, is never touched.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends

from loopworks.api import run_clones
from loopworks.api.deps import RunHandle, WorkspacesDep
from loopworks.api.errors import invalid
from loopworks.api.models import ErrorBody, RunWorkspace, WorkspaceRemoved
from loopworks.api.routes.runs import CONFLICT, NOT_FOUND, UNAUTHORIZED, Responses
from loopworks.api.security import require_token

BAD_ID: Responses = {
    422: {"model": ErrorBody, "description": "The id cannot name a run's workspace"}
}


def checked_run_id(run_id: str, clones: WorkspacesDep) -> str:
    """A 422 for an id the workspace refuses to turn into a path, before Temporal is asked.

    (The other run routes answer such an id 404, as no run has it; here the id is about
    to name directories to delete, so the answer says what is wrong with the request.)
    """
    try:
        clones.workdir(run_id)
    except ValueError as err:
        raise invalid("run_id", str(err), run_id[:200], where="path") from err
    return run_id


# Token first, then the id: a refused request learns nothing about ids.
router = APIRouter(
    prefix="/runs",
    tags=["workspaces"],
    dependencies=[Depends(require_token), Depends(checked_run_id)],
    responses=UNAUTHORIZED,
)


@router.get("/{run_id:run_id}/workspace", responses={**NOT_FOUND, **BAD_ID})
async def get_workspace(handle: RunHandle, clones: WorkspacesDep) -> RunWorkspace:
    """The run's clones and their sizes, and whether the run has finished."""
    return await run_clones.inspect(handle, clones)


@router.delete("/{run_id:run_id}/workspace", responses={**NOT_FOUND, **CONFLICT, **BAD_ID})
async def delete_workspace(handle: RunHandle, clones: WorkspacesDep) -> WorkspaceRemoved:
    """Remove a finished run's clones (409 while it runs); answers what went and its size.
    Removing an absent workspace removes nothing and is not an error."""
    return await run_clones.clean(handle, clones)
