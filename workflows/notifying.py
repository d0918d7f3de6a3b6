"""Notifications from inside a workflow (docs/notifications.md): each transition a plan
wants starts one activity per webhook and the workflow goes on at once; a notification
given up after its retries is reported through `on_failure` (the run's `notify_failed`
event). A workflow drains them before it ends, and continues as new only when none is in
flight (`idle`), so none is lost and none is sent again by a new execution.

Used from inside the workflow only; the body is built from the state with plain functions
(`run_body`, `graph_body`), tested without Temporal.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from loopworks.activities.notification import NotificationActivities, where
    from loopworks.schemas.graph import GraphState, GraphStatus
    from loopworks.schemas.notify import (
        REPORT_CHARS,
        GraphTask,
        NextStep,
        Notification,
        NotificationBody,
        NotifyEvent,
        NotifyPlan,
        NotifyTarget,
        notify_key,
    )
    from loopworks.schemas.payloads import NotifyFailedPayload
    from loopworks.schemas.run import RunState, RunStatus, StopReason

# The longest wait between two attempts of one notification.
MAX_RETRY_INTERVAL = timedelta(minutes=5)

_RUN_EVENTS = {
    status: NotifyEvent(status.value) for status in RunStatus if status.value in set(NotifyEvent)
}
_GRAPH_EVENTS = {
    status: NotifyEvent(status.value) for status in GraphStatus if status.value in set(NotifyEvent)
}
WAITING = frozenset({NotifyEvent.AWAITING_APPROVAL, NotifyEvent.BLOCKED, NotifyEvent.PAUSED})


def run_event(state: RunState) -> NotifyEvent | None:
    """The event a run's status is, if any: a stop QA caused is `qa_rejected`."""
    if state.status == RunStatus.STOPPED and state.stop_reason == StopReason.QA_REJECTED:
        return NotifyEvent.QA_REJECTED
    return _RUN_EVENTS.get(state.status)


def graph_event(state: GraphState) -> NotifyEvent | None:
    return _GRAPH_EVENTS.get(state.status)


def _next(kind: str, id_: str, event: NotifyEvent) -> NextStep | None:
    command = "loops graph" if kind == "graph" else "loops"
    moves = {
        NotifyEvent.AWAITING_APPROVAL: ("approve", "approve"),
        NotifyEvent.BLOCKED: ("clear-block", "clear-block"),
        NotifyEvent.PAUSED: ("resume", "resume"),
    }
    if event not in moves:
        return None
    verb, route = moves[event]
    extra = " --note '...'" if event == NotifyEvent.BLOCKED else ""
    if kind == "graph" and event == NotifyEvent.BLOCKED:
        extra = " --task <task id> --note '...'"
    return NextStep(command=f"{command} {verb} {id_}{extra}", route=f"POST /{kind}s/{id_}/{route}")


def run_body(
    state: RunState, event: NotifyEvent, at: str, graph_id: str | None = None
) -> NotificationBody:
    """A run's notification; a graph's task loop (`graph_id`, its alias the task's id) says
    its graph and task, and a block is cleared through the graph."""
    message = state.block.reason if event == NotifyEvent.BLOCKED else state.stop.message
    graph = GraphTask(id=graph_id, task=state.alias) if graph_id else None
    next_step = _next("run", state.run_id, event)
    if graph is not None and event == NotifyEvent.BLOCKED:
        next_step = NextStep(
            command=f"loops graph clear-block {graph.id} --task {graph.task} --note '...'",
            route=f"POST /graphs/{graph.id}/clear-block",
        )
    return NotificationBody(
        kind="run",
        id=state.run_id,
        alias=state.alias,
        event=event,
        status=state.status.value,
        stop_reason=state.stop_reason.value if state.stop_reason else None,
        score=state.last_score if state.iteration else None,
        message=message[:1000],
        report=_report(state, event),
        next=next_step,
        graph=graph,
        at=at,
    )


def _report(state: RunState, event: NotifyEvent) -> str | None:
    """A block's write-up goes with its notification, as with its `blocked` event."""
    if event != NotifyEvent.BLOCKED or not state.block.report:
        return None
    return state.block.report[:REPORT_CHARS]


def graph_body(state: GraphState, event: NotifyEvent, at: str) -> NotificationBody:
    return NotificationBody(
        kind="graph",
        id=state.graph_id,
        alias=state.goal[:80],
        event=event,
        status=state.status.value,
        message=state.message[:1000],
        next=_next("graph", state.graph_id, event),
        at=at,
    )


class Notifier:
    def __init__(
        self, plan: NotifyPlan | None, on_failure: Callable[[NotifyFailedPayload], None]
    ) -> None:
        self._plan = plan
        self._on_failure = on_failure
        self._pending: set[asyncio.Task[None]] = set()

    @property
    def idle(self) -> bool:
        return not self._pending

    def wants(self, event: NotifyEvent) -> bool:
        return self._plan is not None and bool(self._plan.targets(event))

    def send(self, body: NotificationBody, transition: int) -> None:
        """Start one notification per webhook that wants `body.event`; nothing waits."""
        if self._plan is None:
            return
        key = notify_key(workflow.info().workflow_id, transition, body.event)
        for target in self._plan.targets(body.event):
            notification = Notification(
                body=body, target=target, key=key, namespace=workflow.info().namespace
            )
            task = asyncio.create_task(self._deliver(notification, self._plan))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

    async def _deliver(self, notification: Notification, plan: NotifyPlan) -> None:
        timing = plan.timing
        retry = timedelta(seconds=timing.retry_seconds)
        handle: Any = workflow.start_activity_method(
            NotificationActivities.send_notification,
            notification,
            start_to_close_timeout=timedelta(seconds=timing.attempt_seconds + 5),
            schedule_to_close_timeout=timedelta(seconds=timing.give_up_seconds),
            retry_policy=RetryPolicy(
                initial_interval=retry,
                backoff_coefficient=2.0,
                maximum_interval=max(retry, MAX_RETRY_INTERVAL),
            ),
            summary=f"notify {notification.body.event.value}",
        )
        try:
            await handle
        except ActivityError as err:
            self._on_failure(failure(notification, err))

    async def drain(self) -> None:
        """Wait for every notification in flight (a run's last step)."""
        if self._pending:
            await workflow.wait_condition(self.idle_now)

    def idle_now(self) -> bool:
        return not self._pending


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
