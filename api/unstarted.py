"""A workflow that closed before any worker ran it has no state to query.

Terminated while its first workflow task was still queued (no worker polling, or a
person quick on the UI's Terminate), none of its code ran, and the server refuses a query
("closed before WorkflowTaskStarted event") however long one waits. What such a run or
graph is, is its start input: the memory that input would have set up.
"""

from __future__ import annotations

from typing import Any, TypeVar

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle
from temporalio.converter import DataConverter

Input = TypeVar("Input")


async def start_input(
    handle: WorkflowHandle[Any, Any], input_type: type[Input], converter: DataConverter
) -> Input | None:
    """The input the workflow was started with if it closed without completing a single
    workflow task; None if any of its code ran (then a worker can answer its queries).
    `converter`: the client's (the description's), which decrypts what it encrypted."""
    started = None
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            return None
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            started = event.workflow_execution_started_event_attributes
    if started is None or not started.input.payloads:
        return None
    [params] = await converter.decode(started.input.payloads, [input_type])
    return params  # type: ignore[no-any-return]
