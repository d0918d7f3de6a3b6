"""The gc's Temporal Schedule (docs/operations.md#retention): created by every worker at
start, so that every deployment has it, whoever runs it (`loops up`, compose, Kubernetes,
a worker on another machine), with nothing else to run.

One Schedule per task queue (a deployment's runs are its task queue's), created
idempotently: the first worker creates it, the others find it; one whose interval is not
LOOPS_RETENTION_EVERY_HOURS is set to it. It starts `RetentionWorkflow`, never two at
once, and it is in the Temporal UI's Schedules, where it can be paused or triggered.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
    ScheduleUpdate,
    ScheduleUpdateInput,
)

from loopworks.schemas.retention import RetentionInput
from loopworks.schemas.settings import Settings
from loopworks.workflows.retention import RetentionWorkflow

log = logging.getLogger(__name__)


def schedule_id(task_queue: str) -> str:
    return f"retention/{task_queue}"


def retention_schedule(settings: Settings) -> Schedule:
    """What the Schedule is: every LOOPS_RETENTION_EVERY_HOURS, a gc of the task queue's
    runs by the workers' policy, skipped while the last one still runs."""
    every = timedelta(hours=settings.retention_every_hours)
    return Schedule(
        action=ScheduleActionStartWorkflow(
            RetentionWorkflow.run,
            RetentionInput(),
            id=f"retention/{settings.task_queue}/scheduled",
            task_queue=settings.task_queue,
            static_summary="the gc of finished runs' records",
        ),
        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=every)]),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
        state=ScheduleState(
            note="loopworks: removes finished runs' refs and clones past LOOPS_RETENTION_*"
            " (docs/operations.md#retention); created by the workers"
        ),
    )


async def ensure_retention_schedule(client: Client, settings: Settings) -> str:
    """Create the Schedule unless it exists; set its interval when it differs. Its id."""
    wanted = retention_schedule(settings)
    name = schedule_id(settings.task_queue)
    try:
        await client.create_schedule(name, wanted)
        log.info("created the retention schedule %s", name)
        return name
    except ScheduleAlreadyRunningError:
        pass
    handle = client.get_schedule_handle(name)
    current = (await handle.describe()).schedule
    every = [interval.every for interval in wanted.spec.intervals]
    if [interval.every for interval in current.spec.intervals] != every:

        def updated(given: ScheduleUpdateInput) -> ScheduleUpdate:
            schedule = given.description.schedule
            schedule.spec = wanted.spec
            return ScheduleUpdate(schedule=schedule)

        await handle.update(updated)
        log.info("set the retention schedule %s to every %s", name, every[0])
    return name
