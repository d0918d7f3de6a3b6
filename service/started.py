"""The repository a workflow was started on, read from its start input in its history.

A run's and a graph's input name it as `request.repo` (None: the service's default
origin), a playbook writer's as `origin`. Read leniently (a model of those fields alone),
so an input written by an older or newer version reads alike; through the client's own
data converter, so whatever codec it has decodes it. Its history is asked for its first
event only: one call, whatever the workflow's length.
"""

from __future__ import annotations

from pydantic import BaseModel
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client


class _Request(BaseModel):
    repo: str | None = None


class _Started(BaseModel):
    request: _Request | None = None
    origin: str | None = None


class StartedOn(BaseModel):
    """Where a workflow works: `repo`, or the service's default origin when None."""

    repo: str | None = None


async def started_on(client: Client, workflow_id: str) -> StartedOn | None:
    """Where the latest execution of `workflow_id` was started to work; None when its
    start input names nothing of the kind. RPCError (NOT_FOUND) when Temporal does not
    know the workflow."""
    events = client.get_workflow_handle(workflow_id).fetch_history_events(page_size=1)
    async for event in events:
        if event.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            return None
        payloads = event.workflow_execution_started_event_attributes.input.payloads
        if not payloads:
            return None
        [started] = await client.data_converter.decode(payloads[:1], [_Started])
        if started.origin:
            return StartedOn(repo=started.origin)
        if started.request is not None:
            return StartedOn(repo=started.request.repo)
        return None
    return None
