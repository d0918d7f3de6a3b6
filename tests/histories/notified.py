"""Recording a run that notifies (docs/notifications.md): interactive, approved, with one
webhook that answers 500 once and then 200, and one that never answers (a closed port),
whose notifications are given up.

`notified_run` was recorded before notifications were handed to a workflow of their own:
the run sent each as an activity of its own and waited for the last to be given up, as a
`notify_failed` event. The code now records the same scenario as `handed_over_run` (the
run hands each transition to its delivery workflow, starting it, then signalling it while
it still sends, and closes) and `notification_deliveries` (that delivery workflow: both
transitions sent, the closed port's given up after the run had closed). Re-record
`notified_run` only once the `notifications-handed-over` patch is deprecated
(docs/operations.md, "Upgrading with runs in flight").
"""

from __future__ import annotations

import asyncio
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHistory

from loopworks.deploy.local import free_port
from loopworks.llm.offline.model import OfflineModels
from loopworks.schemas.loop import LoopInput
from loopworks.schemas.notify import NotifyPlan, NotifyTiming, Webhook, delivery_workflow_id
from loopworks.schemas.run import Approval, RunRequest, RunStatus
from loopworks.schemas.settings import Settings
from loopworks.worker.build import build_worker
from loopworks.workflows.loop import LoopWorkflow
from loopworks.workflows.notifications import NotificationWorkflow


def _once_500() -> type[BaseHTTPRequestHandler]:
    """A receiver that answers 500 to its first request and 200 to every later one."""
    answered = 0

    class Once500(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            nonlocal answered
            self.rfile.read(int(self.headers["Content-Length"]))
            answered += 1
            self.send_response(500 if answered == 1 else 200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Once500


async def _record_notifying_run(
    client: Client, settings: Settings, run_id: str, give_up_seconds: float
) -> tuple[WorkflowHistory, WorkflowHistory | None]:
    """The run's history, and its delivery workflow's once that has closed (None for a
    run that sent its own notifications)."""
    port, closed = free_port(), free_port()
    server = ThreadingHTTPServer(("127.0.0.1", port), _once_500())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings = settings.model_copy(
        update={
            "notify_secret": "recorded-secret",
            "allowed_origins": f"127.0.0.1:{port},127.0.0.1:{closed}",
            "allowed_schemes": "https,http",
        }
    )
    plan = NotifyPlan(
        webhooks=[
            Webhook(url=f"http://127.0.0.1:{port}/hook"),
            Webhook(url=f"http://127.0.0.1:{closed}/hook", format="slack"),
        ],
        timing=NotifyTiming(attempt_seconds=2, retry_seconds=1, give_up_seconds=give_up_seconds),
    )
    params = LoopInput(
        run_id=run_id,
        alias="recorded",
        request=RunRequest(task="Write a guide", mode="interactive", audit_probability=0.0),
        created_at="2026-01-01T00:00:00+00:00",
        notify=plan,
    )
    try:
        async with build_worker(client, settings, models=OfflineModels()):
            handle = await client.start_workflow(
                LoopWorkflow.run, params, id=params.run_id, task_queue=settings.task_queue
            )
            while (await handle.query(LoopWorkflow.status)).status != RunStatus.AWAITING_APPROVAL:
                await asyncio.sleep(0.1)
            await handle.execute_update(LoopWorkflow.approve, Approval())
            await handle.result()
            run = await handle.fetch_history()
            if not any(
                e.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED
                for e in run.events
            ):
                return run, None
            # `completed` found the delivery workflow still sending (the closed port's
            # `awaiting_approval`), and was signalled to it.
            assert any(
                e.event_type == EventType.EVENT_TYPE_EXTERNAL_WORKFLOW_EXECUTION_SIGNALED
                for e in run.events
            ), "the delivery workflow had closed before `completed`: record again"
            delivery = client.get_workflow_handle_for(
                NotificationWorkflow.run, delivery_workflow_id(run_id)
            )
            # Time skipping stops once a workflow has signalled another on the test server
            # (temporalio/sdk-java#1618): the closed port is given up in real time.
            while (await delivery.describe()).status == WorkflowExecutionStatus.RUNNING:
                await asyncio.sleep(0.5)
            sent = await delivery.result()
            assert len(sent.delivered) == 2 and len(sent.given_up) == 2, sent
            return run, await delivery.fetch_history()
    finally:
        server.shutdown()
        server.server_close()


async def record_notified_run(client: Client, settings: Settings) -> WorkflowHistory:
    run, delivery = await _record_notifying_run(client, settings, "recorded-notified-run", 30)
    assert delivery is None, "the code now hands notifications over: keep notified_run.json"
    return run


async def record_handed_over_run(client: Client, settings: Settings) -> WorkflowHistory:
    # The run's id is its history's name: the replay test replays a history under its
    # name, and the run names its delivery workflow by its own id.
    run, _ = await _record_notifying_run(client, settings, "handed_over_run", 20)
    return run


async def record_notification_deliveries(client: Client, settings: Settings) -> WorkflowHistory:
    _, delivery = await _record_notifying_run(client, settings, "recorded-deliveries", 20)
    assert delivery is not None
    return delivery
