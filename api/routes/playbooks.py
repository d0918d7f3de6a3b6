"""`/playbooks`: list playbooks, read any version from git, roll back, curate by hand."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from loopworks.api import playbook_curation
from loopworks.api.deps import ClientDep, SettingsDep, WorkspacesDep
from loopworks.api.models import ErrorBody
from loopworks.api.routes.runs import UNAUTHORIZED
from loopworks.api.security import require_token
from loopworks.schemas.playbook import (
    AppliedBatch,
    DeltaBatch,
    Playbook,
    PlaybookState,
    PlaybookVersion,
)

NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "Unknown playbook, or no such version"}
}
REFUSED: dict[int | str, dict[str, Any]] = {
    409: {"model": ErrorBody, "description": "The playbook's writer refused the change"},
    502: {"model": ErrorBody, "description": "Git failed on the playbook's origin"},
}

router = APIRouter(
    prefix="/playbooks",
    tags=["playbooks"],
    dependencies=[Depends(require_token)],
    responses=UNAUTHORIZED,
)


@router.get("")
async def list_playbooks(
    client: ClientDep, limit: Annotated[int, Query(ge=1, le=500)] = 100
) -> list[PlaybookState]:
    """Every running playbook's name, origin, version and size, by name."""
    return await playbook_curation.list_states(client, limit)


@router.get("/{name}", responses=NOT_FOUND)
async def get_playbook(name: str, client: ClientDep, workspaces: WorkspacesDep) -> Playbook:
    """The current version, as committed on its origin's playbook branch."""
    return await playbook_curation.current(client, workspaces, name)


@router.get("/{name}/versions", responses=NOT_FOUND)
async def list_versions(
    name: str, client: ClientDep, workspaces: WorkspacesDep
) -> list[PlaybookVersion]:
    """Every version, newest first: its commit, batch, source, date and item count."""
    return await playbook_curation.versions(client, workspaces, name)


@router.get("/{name}/versions/{version}", responses=NOT_FOUND)
async def get_version(
    name: str, version: int, client: ClientDep, workspaces: WorkspacesDep
) -> Playbook:
    return await playbook_curation.at_version(client, workspaces, name, version)


@router.post("/{name}/rollback", responses={**NOT_FOUND, **REFUSED})
async def rollback(
    name: str, body: playbook_curation.PlaybookRollback, client: ClientDep, settings: SettingsDep
) -> AppliedBatch:
    """Make a version's items current again, as a new version."""
    return await playbook_curation.rollback(client, settings, name, body)


@router.post("/{name}/deltas", responses={**NOT_FOUND, **REFUSED})
async def send_deltas(
    name: str,
    body: DeltaBatch,
    client: ClientDep,
    settings: SettingsDep,
    workspaces: WorkspacesDep,
    repo: Annotated[
        str | None, Query(description="The origin of a playbook not started yet.")
    ] = None,
) -> AppliedBatch:
    """Apply hand-curated deltas, once per batch id."""
    return await playbook_curation.send_deltas(client, settings, workspaces, name, body, repo)
