"""Notifications from inside a run's or graph's workflow (docs/notifications.md): each
transition a plan wants is handed to the owner's delivery workflow
(`workflows.notifications`), which sends it, retries it and gives it up; the owner goes
on at once, and only waits, before it ends or continues as new, for its hand-overs to be
recorded (`drain`, `idle`), which takes a moment, not a receiver's retries.

A run or graph started before hand-overs (no `notifications-handed-over` marker where it
sent its first notification) keeps sending each notification as an activity of its own
and draining them before it ends (`_deliver_before_hand_over`), as its history says.

Used from inside the workflow only; the body is built from the state with plain functions
(`run_body`, `graph_body`), tested without Temporal.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, FailureError, WorkflowAlreadyStartedError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from loopworks.activities.notification import NotificationActivities
    from loopworks.schemas.graph import GraphState, GraphStatus
    from loopworks.schemas.notify import (
        REPORT_CHARS,
        DeliveryInput,
        GraphTask,
        NextStep,
        Notification,
        NotificationBatch,
        NotificationBody,
        NotifyEvent,
        NotifyPlan,
        delivery_workflow_id,
        notify_key,
    )
    from loopworks.schemas.payloads import NotifyFailedPayload
    from loopworks.schemas.run import RunState, RunStatus, StopReason
    from loopworks.workflows.notifications import (
        DELIVER_SIGNAL,
        MAX_RETRY_INTERVAL,
        NotificationWorkflow,
        failure,
    )

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
        # Transitions waiting for their hand-over, in order; one task hands them over.
        self._handing: list[NotificationBatch] = []
        self._hand_over_task: asyncio.Task[None] | None = None

    @property
    def idle(self) -> bool:
        return not self._pending

    def wants(self, event: NotifyEvent) -> bool:
        return self._plan is not None and bool(self._plan.targets(event))

    def send(self, body: NotificationBody, transition: int) -> None:
        """Hand one notification per webhook that wants `body.event` to the delivery
        workflow; nothing waits for it."""
        if self._plan is None:
            return
        key = notify_key(workflow.info().workflow_id, transition, body.event)
        notifications = [
            Notification(body=body, target=target, key=key, namespace=workflow.info().namespace)
            for target in self._plan.targets(body.event)
        ]
        # An execution that sent a notification before hand-overs sends its own, as its
        # history holds (docs/operations.md#notifications-in-flight).
        if workflow.patched("notifications-handed-over"):
            batch = NotificationBatch(notifications=notifications, timing=self._plan.timing)
            self._handing.append(batch)
            if self._hand_over_task is None:
                self._hand_over_task = self._track(self._hand_over_waiting())
        else:
            for notification in notifications:
                self._track(_deliver_before_hand_over(notification, self._plan, self._on_failure))

    def _track(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(work)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        return task

    async def _hand_over_waiting(self) -> None:
        """Hand the waiting transitions over one at a time, in the order they happened."""
        try:
            while self._handing:
                await hand_over(self._handing[0])
                self._handing.pop(0)
        finally:
            self._hand_over_task = None

    async def drain(self) -> None:
        """Wait until every notification is handed over (a run's last step); a run or
        graph from before hand-overs waits until each is sent or given up."""
        if self._pending:
            await workflow.wait_condition(self.idle_now)

    def idle_now(self) -> bool:
        return not self._pending


async def hand_over(batch: NotificationBatch) -> None:
    """Give `batch` to the owner's delivery workflow, and return once Temporal holds it:
    started as a child its owner abandons when it closes (the child's start recorded in
    the owner's history), or, while it is still sending an earlier transition, signalled
    (the signal recorded in its history). A workflow that closed between the two is
    started again."""
    owner = workflow.info().workflow_id
    delivery_id = delivery_workflow_id(owner)
    while True:
        try:
            await workflow.start_child_workflow(
                NotificationWorkflow.run,
                DeliveryInput(owner=owner, batches=[batch]),
                id=delivery_id,
                parent_close_policy=ParentClosePolicy.ABANDON,
                static_summary=f"notifications of {owner}"[:200],
            )
            return
        except WorkflowAlreadyStartedError:
            pass  # still sending: this transition joins it
        try:
            await workflow.get_external_workflow_handle(delivery_id).signal(DELIVER_SIGNAL, batch)
            return
        except FailureError:
            pass  # it closed since: start it again


async def _deliver_before_hand_over(
    notification: Notification,
    plan: NotifyPlan,
    on_failure: Callable[[NotifyFailedPayload], None],
) -> None:
    """How a run or graph from before hand-overs sends a notification: an activity of
    its own, waited for before it ends. Frozen: change `NotificationWorkflow`, never this."""
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
        on_failure(failure(notification, err))
