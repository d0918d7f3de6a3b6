"""`/ui/playbooks`: each repository's playbook, its items with their helpful and harmful
counts and the files its skills keep, its versions, and rollback
(docs/dashboard.md#the-playbook)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from loopworks.api import playbook_curation
from loopworks.api.dashboard import render
from loopworks.api.dashboard.access import UiCaller
from loopworks.api.deps import ClientDep, WorkspacesDep

router = APIRouter(prefix="/ui", tags=["dashboard"], include_in_schema=False)


@router.get("/playbooks")
async def playbooks_page(request: Request, caller: UiCaller, client: ClientDep) -> HTMLResponse:
    states = await playbook_curation.list_states(client, 500)
    return render.page(request, "playbooks.html", caller, {"states": states})


@router.get("/playbooks/{name}")
async def playbook_page(
    request: Request,
    caller: UiCaller,
    name: str,
    client: ClientDep,
    workspaces: WorkspacesDep,
    version: Annotated[int | None, Query(ge=1)] = None,
) -> HTMLResponse:
    """The current version (or `version`), and every version with a rollback to it."""
    state = await playbook_curation.state_of(client, name)
    shown = (
        await playbook_curation.at_version(client, workspaces, name, version)
        if version is not None
        else await playbook_curation.current(client, workspaces, name)
    )
    versions = await playbook_curation.versions(client, workspaces, name)
    sections: dict[str, list[object]] = {}
    for item in shown.items:
        sections.setdefault(item.section, []).append(item)
    context = {
        "state": state,
        "playbook": shown,
        "sections": sections,
        "versions": versions,
        "current": state.version,
    }
    return render.page(request, "playbook.html", caller, context)
