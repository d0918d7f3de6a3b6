"""A run's and a graph's notifications handed to a workflow of their own
(docs/notifications.md#delivery), on the time-skipping server with a real worker and a
real receiver on 127.0.0.1 (or none: a port nothing listens on is a receiver that is down).

The run's workflow closes at its last step, whatever its receiver does; the delivery
workflow retries, gives up as a run's own activities did, and tells the run of a
notification it gave up while the run is open.

Each test has a test server of its own: once a workflow has signalled another here, the
time-skipping test server stops skipping time for good (temporalio/sdk-java#1618), which
would leave every later test on a shared one waiting out its timers in real time."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType, ParentClosePolicy
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from loopworks.api import graph_handles
from loopworks.deploy.binaries import find_binary
from loopworks.deploy.local import free_port
from loopworks.deploy.search_attributes import register_search_attributes
from loopworks.schemas.graph import GraphInput, GraphRequest, GraphStatus
from loopworks.schemas.loop import LoopInput, LoopResult
from loopworks.schemas.notify import (
    DeliveryState,
    NotifyEvent,
    NotifyPlan,
    NotifyTiming,
    Webhook,
    delivery_workflow_id,
)
from loopworks.schemas.run import Approval, RunRequest, RunStatus
from loopworks.schemas.tasks import TaskStatus
from loopworks.workflows.graph.workflow import TaskGraphWorkflow
from loopworks.workflows.loop import LoopWorkflow
from loopworks.workflows.notifications import NOTIFICATION_WORKFLOW, NotificationWorkflow
from tests.workflows.conftest import LoopHarness, names
from tests.workflows.test_graph import task
from tests.workflows.test_loop import wait_for

pytestmark = pytest.mark.workflow

SECRET = "a-test-notify-secret-of-some-length"
# Far longer than a run: with the old shape, its workflow stayed open this long.
GIVE_UP_S = 600.0


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[LoopHarness]:
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=pydantic_data_converter,
        test_server_existing_path=find_binary("temporal-test-server"),
    )
    await register_search_attributes(env.client, "default")
    try:
        yield LoopHarness(env, tmp_path / "data", f"q-{uuid.uuid4().hex[:8]}")
    finally:
        await env.shutdown()


@dataclass
class Receiver:
    """A webhook on 127.0.0.1 that is down (nothing listens on its port) until `up`."""

    port: int = field(default_factory=free_port)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def up(self) -> None:
        bodies = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self) -> list[str]:
        return sorted(body["event"] for body in self.bodies)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver()
    yield made
    if made.server is not None:
        made.server.shutdown()
        made.server.server_close()


def settings_env(receiver: Receiver) -> dict[str, Any]:
    return {
        "LOOPS_NOTIFY_SECRET": SECRET,
        "LOOPS_ALLOWED_ORIGINS": f"127.0.0.1:{receiver.port}",
        "LOOPS_ALLOWED_SCHEMES": "https,ssh,file,http",
    }


def plan(receiver: Receiver, *events: NotifyEvent, give_up: float = GIVE_UP_S) -> NotifyPlan:
    return NotifyPlan(
        webhooks=[Webhook(url=receiver.url)],
        events=list(events),
        timing=NotifyTiming(attempt_seconds=2, retry_seconds=1, give_up_seconds=give_up),
    )


async def start_run(
    harness: LoopHarness, notify: NotifyPlan, **request: Any
) -> WorkflowHandle[LoopWorkflow, LoopResult]:
    run_id = f"test-{uuid.uuid4().hex[:10]}"
    params = LoopInput(
        run_id=run_id,
        alias="test",
        request=RunRequest(
            **{"task": "Write a guide", "audit_probability": 0.0, "playbook": False, **request}
        ),
        created_at="2026-01-01T00:00:00+00:00",
        notify=notify,
    )
    return await harness.env.client.start_workflow(
        LoopWorkflow.run, params, id=run_id, task_queue=harness.task_queue
    )


def delivery(harness: LoopHarness, owner: str) -> WorkflowHandle[Any, DeliveryState]:
    """The latest execution of `owner`'s delivery workflow."""
    return harness.env.client.get_workflow_handle_for(
        NotificationWorkflow.run, delivery_workflow_id(owner)
    )


async def sent_by(harness: LoopHarness, owner: str) -> DeliveryState:
    """The latest delivery workflow's result, once it has sent or given up everything: a
    handle the test did not start skips no time while it waits, so the test skips it."""
    handle = delivery(harness, owner)
    for _ in range(int(GIVE_UP_S)):
        if (await handle.describe()).status != WorkflowExecutionStatus.RUNNING:
            return await handle.result()
        await harness.env.sleep(10)
    raise AssertionError(f"{handle.id} still sends")


def at(event: HistoryEvent) -> datetime:
    return event.event_time.ToDatetime(tzinfo=UTC)


def of_type(history: WorkflowHistory, kind: EventType.ValueType) -> list[HistoryEvent]:
    return [e for e in history.events if e.event_type == kind]


def scheduled(history: WorkflowHistory) -> list[str]:
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in of_type(history, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
    ]


def closed_after_last_step(history: WorkflowHistory) -> timedelta:
    """From the run's last activity's end to its workflow's close, on the workflow clock."""
    [closed] = of_type(history, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED)
    last_step = of_type(history, EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED)[-1]
    return at(closed) - at(last_step)


async def test_a_finished_run_closes_at_its_last_step_while_its_receiver_is_down(
    harness: LoopHarness, receiver: Receiver
) -> None:
    async with harness.worker(**settings_env(receiver)):
        run = await start_run(harness, plan(receiver, NotifyEvent.COMPLETED))
        result = await run.result()
        sending = delivery(harness, run.id)
        still_sending = (await sending.describe()).status
        sent = await sent_by(harness, run.id)
        history = await run.fetch_history()

    assert result.state.status == RunStatus.COMPLETED
    # The run closed within moments of its last step; its notification was not its own
    # activity, and was still being retried once it had closed.
    assert closed_after_last_step(history) < timedelta(seconds=5)
    assert "send_notification" not in scheduled(history)
    assert still_sending == WorkflowExecutionStatus.RUNNING
    [started] = of_type(history, EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED)
    child = started.start_child_workflow_execution_initiated_event_attributes
    assert child.workflow_type.name == NOTIFICATION_WORKFLOW
    assert child.workflow_id == f"notify/{run.id}"
    assert child.parent_close_policy == ParentClosePolicy.PARENT_CLOSE_POLICY_ABANDON
    # Given up after its retries, the run long closed: kept by the delivery workflow.
    [given_up] = sent.given_up
    assert given_up.failed.event == "completed" and given_up.failed.key == f"{run.id}:1:completed"
    assert given_up.failed.webhook == f"http://127.0.0.1:{receiver.port}/…"
    assert not given_up.recorded and sent.unrecorded() == [given_up]
    closed = at(of_type(history, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED)[0])
    assert datetime.fromisoformat(given_up.at) - closed > timedelta(seconds=GIVE_UP_S / 2)
    assert "notify_failed" not in names(result.log)


async def test_a_notification_given_up_while_the_run_waits_is_the_runs_event(
    harness: LoopHarness, receiver: Receiver
) -> None:
    """Its delivery workflow tells the open run, which records it as its own event; once
    that workflow has closed, the run's next transition starts it again."""
    notify = plan(receiver, NotifyEvent.AWAITING_APPROVAL, NotifyEvent.COMPLETED, give_up=30)
    async with harness.worker(**settings_env(receiver)):
        run = await start_run(harness, notify, mode="interactive")

        async def waiting() -> bool:
            return (await harness.status(run)).status == RunStatus.AWAITING_APPROVAL

        await wait_for(waiting)
        first = await sent_by(harness, run.id)  # given up: the receiver is still down
        receiver.up()
        await run.execute_update(LoopWorkflow.approve, Approval())
        result = await run.result()
        second = await sent_by(harness, run.id)
        history = await run.fetch_history()

    [given_up] = first.given_up
    assert given_up.recorded and given_up.failed.event == "awaiting_approval"
    [event] = [e for e in result.log if e.event.value == "notify_failed"]
    assert event.payload.model_dump() == given_up.failed.model_dump()
    assert event.status == "error"
    # Two executions under the one id: the second, for `completed`, delivered it.
    starts = of_type(history, EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED)
    ids = {e.start_child_workflow_execution_initiated_event_attributes.workflow_id for e in starts}
    assert len(starts) == 2 and ids == {f"notify/{run.id}"}
    assert [d.key for d in second.delivered] == [f"{run.id}:2:completed"]
    assert not second.given_up and receiver.events() == ["completed"]


async def test_a_transition_while_the_last_is_still_retried_joins_it_and_both_arrive_once(
    harness: LoopHarness, receiver: Receiver
) -> None:
    notify = plan(receiver, NotifyEvent.AWAITING_APPROVAL, NotifyEvent.COMPLETED)
    async with harness.worker(**settings_env(receiver)):
        run = await start_run(harness, notify, mode="interactive")

        async def waiting() -> bool:
            return (await harness.status(run)).status == RunStatus.AWAITING_APPROVAL

        await wait_for(waiting)
        await run.execute_update(LoopWorkflow.approve, Approval())
        await run.result()
        history = await run.fetch_history()
        sending = delivery(harness, run.id)
        assert (await sending.describe()).status == WorkflowExecutionStatus.RUNNING
        receiver.up()  # the receiver comes back: the next attempts get through
        sent = await sent_by(harness, run.id)
        delivery_history = await sending.fetch_history()

    assert closed_after_last_step(history) < timedelta(seconds=5)
    # `completed` found the first transition's delivery workflow still sending: it was
    # signalled to it, not started on its own.
    assert len(of_type(history, EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_FAILED)) == 1
    assert len(of_type(history, EventType.EVENT_TYPE_EXTERNAL_WORKFLOW_EXECUTION_SIGNALED)) == 1
    signals = of_type(delivery_history, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED)
    assert [s.workflow_execution_signaled_event_attributes.signal_name for s in signals] == [
        "deliver"
    ]
    assert sorted(d.key for d in sent.delivered) == [
        f"{run.id}:1:awaiting_approval",
        f"{run.id}:2:completed",
    ]
    assert receiver.events() == ["awaiting_approval", "completed"]  # once each


async def test_a_graph_learns_its_blocked_task_loops_end_at_once(
    harness: LoopHarness, receiver: Receiver
) -> None:
    """The task loop's `blocked` notification is still being retried when the block is
    cleared: the loop closes at its last step all the same, and the graph goes on."""
    script = {"custodiet": {"1": {"verdict": "BLOCK", "reason": "drift", "violations": []}}}
    async with harness.worker(script=script, **settings_env(receiver)):
        graph_id = f"graph-{uuid.uuid4().hex[:8]}"
        request = GraphRequest(
            goal="Write a guide", tasks=[task("T-001")], max_iterations=2, audit_probability=1.0
        )
        graph = await harness.env.client.start_workflow(
            TaskGraphWorkflow.run,
            GraphInput(
                graph_id=graph_id,
                request=request,
                created_at="2026-01-01T00:00:00+00:00",
                notify=plan(receiver, NotifyEvent.BLOCKED),
            ),
            id=graph_id,
            task_queue=harness.task_queue,
        )

        async def blocked() -> bool:
            state = await graph.query(TaskGraphWorkflow.status)
            runs = state.tasks[0].run_ids if state.tasks else []
            if not runs:
                return False
            loop = harness.env.client.get_workflow_handle_for(LoopWorkflow.run, runs[-1])
            return (await loop.query(LoopWorkflow.status)).status == RunStatus.BLOCKED

        await wait_for(blocked, timeout=60)
        await graph_handles.clear_block(harness.env.client, graph, "T-001", "scope confirmed")
        result = await graph.result()
        loop_id = result.state.tasks[0].run_ids[-1]
        loop_history = await harness.env.client.get_workflow_handle(loop_id).fetch_history()
        sent = await sent_by(harness, loop_id)

    assert result.state.status == GraphStatus.COMPLETED, result.state.message
    assert result.state.tasks[0].status == TaskStatus.COMPLETED
    assert closed_after_last_step(loop_history) < timedelta(seconds=5)
    assert "send_notification" not in scheduled(loop_history)
    [given_up] = sent.given_up
    assert given_up.failed.key == f"{loop_id}:1:blocked" and not given_up.recorded
    loop_closed = at(of_type(loop_history, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED)[0])
    assert datetime.fromisoformat(given_up.at) - loop_closed > timedelta(seconds=GIVE_UP_S / 2)


async def test_a_notification_given_up_while_the_graph_waits_is_in_its_status(
    harness: LoopHarness, receiver: Receiver
) -> None:
    async with harness.worker(**settings_env(receiver)):
        graph_id = f"graph-{uuid.uuid4().hex[:8]}"
        graph = await harness.env.client.start_workflow(
            TaskGraphWorkflow.run,
            GraphInput(
                graph_id=graph_id,
                request=GraphRequest(
                    goal="Write a guide", tasks=[task("T-001")], mode="interactive"
                ),
                created_at="2026-01-01T00:00:00+00:00",
                notify=plan(receiver, NotifyEvent.AWAITING_APPROVAL, give_up=30),
            ),
            id=graph_id,
            task_queue=harness.task_queue,
        )

        async def waiting() -> bool:
            state = await graph.query(TaskGraphWorkflow.status)
            return state.status == GraphStatus.AWAITING_APPROVAL

        await wait_for(waiting)
        sent = await sent_by(harness, graph_id)  # given up: the receiver is down
        state = await graph.query(TaskGraphWorkflow.status)
        await graph.signal(TaskGraphWorkflow.stop, "enough")
        result = await graph.result()

    [given_up] = sent.given_up
    assert given_up.recorded and given_up.failed.key == f"{graph_id}:1:awaiting_approval"
    assert state.notify_failed == [given_up.failed]
    assert result.state.status == GraphStatus.STOPPED
    assert result.state.notify_failed == [given_up.failed]
