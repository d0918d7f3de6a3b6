"""What a run's Temporal histories hold: every execution of a run (continue-as-new makes
one more), the activities it ran, and the size of each payload in them, for the
benchmark and the tests that bound what a run carries."""

from __future__ import annotations

import json
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory


async def executions(client: Client, workflow_id: str) -> list[WorkflowHistory]:
    """Every execution of a workflow id's latest chain, latest first, following
    continue-as-new backwards."""
    histories = []
    run_id: str | None = None
    while True:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        histories.append(history)
        started = history.events[0].workflow_execution_started_event_attributes
        if not started.continued_execution_run_id:
            return histories
        run_id = started.continued_execution_run_id


# The marker the SDK records for each local activity a workflow task ran.
LOCAL_ACTIVITY_MARKER = "core_local_activity"


def activities_run(history: WorkflowHistory) -> list[tuple[str, bool]]:
    """The activities the history's workflow ran, in order, each with whether it ran
    locally (in a workflow task, recorded as a marker) rather than from a task queue."""
    ran: list[tuple[str, bool]] = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            ran.append((event.activity_task_scheduled_event_attributes.activity_type.name, False))
        elif event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            marker = event.marker_recorded_event_attributes
            if marker.marker_name == LOCAL_ACTIVITY_MARKER:
                data = json.loads(marker.details["data"].payloads[0].data)
                ran.append((data["activity_type"], True))
    return ran


def activity_batches(history: WorkflowHistory) -> list[list[tuple[str, bool]]]:
    """The activities of `activities_run`, grouped by the workflow task that scheduled them:
    a batch ran side by side (PRODUCE ‖ PREPARE, a group of checks), batches one after
    another. The benchmark's floor replays this shape with activities that do nothing."""
    batches: dict[int, list[tuple[str, bool]]] = {}
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled = event.activity_task_scheduled_event_attributes
            batch = batches.setdefault(scheduled.workflow_task_completed_event_id, [])
            batch.append((scheduled.activity_type.name, False))
        elif event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            marker = event.marker_recorded_event_attributes
            if marker.marker_name == LOCAL_ACTIVITY_MARKER:
                data = json.loads(marker.details["data"].payloads[0].data)
                batch = batches.setdefault(marker.workflow_task_completed_event_id, [])
                batch.append((data["activity_type"], True))
    return [batches[key] for key in sorted(batches)]


def payload_sizes(history: WorkflowHistory) -> list[int]:
    """The byte size of every payload in the history: inputs, results, details."""
    sizes: list[int] = []

    def walk(message: Any) -> None:
        # Protobuf messages list their set fields; a repeated field's value is a container.
        for field, value in message.ListFields():
            if field.message_type is None:
                continue
            for item in [value] if hasattr(value, "ListFields") else list(value):
                if isinstance(item, Payload):
                    sizes.append(len(item.data))
                elif hasattr(item, "ListFields"):
                    walk(item)

    for event in history.events:
        walk(event)
    return sizes


def continued_inputs(history: WorkflowHistory) -> list[dict[str, Any]]:
    """The input each continue-as-new in the history handed the next execution."""
    inputs = []
    for event in history.events:
        if event.HasField("workflow_execution_continued_as_new_event_attributes"):
            attributes = event.workflow_execution_continued_as_new_event_attributes
            inputs.append(json.loads(attributes.input.payloads[0].data))
    return inputs
