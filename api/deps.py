"""Shared dependencies, as `Annotated` aliases the routes declare by type."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import Depends, Request
from starlette.convertors import Convertor, register_url_convertor
from temporalio.client import Client, WorkflowHandle

from loopworks.api.connection import TemporalConnection
from loopworks.api.errors import RunNotFound
from loopworks.schemas.graph import TASK_LOOP_SUFFIX
from loopworks.schemas.loop import LoopResult
from loopworks.schemas.settings import Settings
from loopworks.workflows.loop import LoopWorkflow
from loopworks.workspace.configured import workspaces_for
from loopworks.workspace.git import GitWorkspaces

# The workspace refuses any other run id (it names a directory and a git ref), so an id
# outside this alphabet cannot belong to a run: answer 404 without asking Temporal. A
# graph's task loops are runs too: `<graph id>/<task id>/<attempt>`.
RUN_ID = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,127}}(?:{TASK_LOOP_SUFFIX})?")


class RunIdConvertor(Convertor[str]):
    """`{run_id:run_id}` in a route: one path segment, or a task loop's three. A plain
    `{run_id}` stops at the first `/`; `:path` would also take `/events` and the like, so
    `GET /runs/{run_id}` would shadow the other run routes. Any single segment matches
    here, so that an impossible id still reaches the dependency, which answers 404 naming
    it: RUN_ID decides what a run id is."""

    regex = rf"[^/]+(?:{TASK_LOOP_SUFFIX})?"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("run_id", RunIdConvertor())

LoopHandle = WorkflowHandle[LoopWorkflow, LoopResult]


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_connection(request: Request) -> TemporalConnection:
    connection: TemporalConnection = request.app.state.temporal
    return connection


async def get_client(connection: Annotated[TemporalConnection, Depends(get_connection)]) -> Client:
    return await connection.client()


SettingsDep = Annotated[Settings, Depends(get_settings)]
ConnectionDep = Annotated[TemporalConnection, Depends(get_connection)]
ClientDep = Annotated[Client, Depends(get_client)]


async def get_run_handle(run_id: str, connection: ConnectionDep) -> LoopHandle:
    # Checked before connecting, so a malformed id is a 404 even while Temporal is down.
    if not RUN_ID.fullmatch(run_id) or ".." in run_id:
        raise RunNotFound(run_id[:200])
    client = await connection.client()
    return client.get_workflow_handle_for(LoopWorkflow.run, run_id)


RunHandle = Annotated[LoopHandle, Depends(get_run_handle)]


def get_workspaces(settings: SettingsDep) -> GitWorkspaces:
    return workspaces_for(settings)


WorkspacesDep = Annotated[GitWorkspaces, Depends(get_workspaces)]
