"""NotificationWorkflow: a run's or graph's notifications, delivered by a workflow of
their own (docs/notifications.md#delivery), so the run's workflow closes as soon as the
run is done however long a receiver takes.

One per run or graph, under `notify/<owner id>`: the owner starts it as a child it
abandons with its first transition and signals it the later ones while it is open
(`workflows.notifying`); it closes once nothing is left to send, and the owner's next
transition starts it again under the same id. Each notification is one activity per
webhook, retried with backoff until its give-up time as the owner's own activities were.
A notification given up is kept in this workflow's state and told to its owner
(`notify_failed`) while the owner is open; once it has closed, the state here is the
record, and the API shows it with the owner's events (`api.deliveries`).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, FailureError

with workflow.unsafe.imports_passed_through():
    from loopworks.activities.notification import NotificationActivities, where
    from loopworks.schemas.notify import (
        Delivered,
        DeliveryInput,
        DeliveryState,
        GivenUp,
        Notification,
        NotificationBatch,
        NotifyTarget,
        NotifyTiming,
    )
    from loopworks.schemas.payloads import NotifyFailedPayload

# The workflow's type: not a run's nor a graph's, so no count of runs or graphs in
# progress (api/quotas.py) and no list of them counts it.
NOTIFICATION_WORKFLOW = "NotificationWorkflow"
# The signal that hands it a transition, and the one that tells its owner of a
# notification given up (LoopWorkflow and TaskGraphWorkflow handle it).
DELIVER_SIGNAL = "deliver"
NOTIFY_FAILED_SIGNAL = "notify_failed"

# The longest wait between two attempts of one notification.
MAX_RETRY_INTERVAL = timedelta(minutes=5)


@workflow.defn(name=NOTIFICATION_WORKFLOW)
class NotificationWorkflow:
    @workflow.init
    def __init__(self, params: DeliveryInput) -> None:
        self._waiting: list[NotificationBatch] = list(params.batches)
        self._state = DeliveryState(owner=params.owner)
        self._sending: set[asyncio.Task[None]] = set()

    @workflow.signal(name=DELIVER_SIGNAL)
    def deliver(self, batch: NotificationBatch) -> None:
        """Another transition of the owner's, while this one is still sending."""
        self._waiting.append(batch)

    @workflow.query
    def status(self) -> DeliveryState:
        return self._state

    @workflow.run
    async def run(self, params: DeliveryInput) -> DeliveryState:
        while True:
            await workflow.wait_condition(lambda: bool(self._waiting) or not self._sending)
            if not self._waiting:
                break  # nothing in flight, nothing handed over: every one sent or given up
            batches, self._waiting = self._waiting, []
            for batch in batches:
                for notification in batch.notifications:
                    task = asyncio.create_task(self._send(notification, batch.timing))
                    self._sending.add(task)
                    task.add_done_callback(self._sending.discard)
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self._state

    async def _send(self, notification: Notification, timing: NotifyTiming) -> None:
        try:
            outcome = await workflow.execute_activity_method(
                NotificationActivities.send_notification,
                notification,
                start_to_close_timeout=timedelta(seconds=timing.attempt_seconds + 5),
                schedule_to_close_timeout=timedelta(seconds=timing.give_up_seconds),
                retry_policy=notification_retry(timing),
                summary=f"notify {notification.body.event.value}",
            )
            self._state.delivered.append(
                Delivered(
                    key=notification.key,
                    webhook=_target(notification.target),
                    status_code=outcome.status_code,
                    attempt=outcome.attempt,
                )
            )
        except ActivityError as err:
            failed = failure(notification, err)
            at = workflow.now().isoformat()
            recorded = await self._tell_owner(failed)
            self._state.given_up.append(GivenUp(failed=failed, at=at, recorded=recorded))

    async def _tell_owner(self, failed: NotifyFailedPayload) -> bool:
        """Whether the owner took the failure as its own; not once it has closed."""
        owner = workflow.get_external_workflow_handle(self._state.owner)
        try:
            await owner.signal(NOTIFY_FAILED_SIGNAL, failed)
        except FailureError:
            return False
        return True


def notification_retry(timing: NotifyTiming) -> RetryPolicy:
    """Backoff from the plan's first wait, doubling up to `MAX_RETRY_INTERVAL`; the
    activity's schedule-to-close timeout (the give-up time) ends it."""
    retry = timedelta(seconds=timing.retry_seconds)
    return RetryPolicy(
        initial_interval=retry,
        backoff_coefficient=2.0,
        maximum_interval=max(retry, MAX_RETRY_INTERVAL),
    )


def failure(notification: Notification, err: ActivityError) -> NotifyFailedPayload:
    """The given-up notification as its event says it: the last attempt's error under
    the timeout that ended it."""
    reasons: list[str] = []
    cause: BaseException | None = err.cause
    while cause is not None and len(reasons) < 3:
        reasons.append(str(cause))
        cause = cause.__cause__
    return NotifyFailedPayload(
        event=notification.body.event.value,
        webhook=_target(notification.target),
        key=notification.key,
        error=": ".join(reasons)[:500] or str(err),
    )


def _target(target: NotifyTarget) -> str:
    if target.webhook is not None:
        return where(target.webhook.url)
    return target.label()
