"""Recording a run that notifies (docs/notifications.md): interactive, approved, with one
webhook that answers 500 once and then 200, and one that never answers (a closed port),
whose notification is given up as a `notify_failed` event."""

from __future__ import annotations

import asyncio
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from temporalio.client import Client, WorkflowHistory

from loopworks.deploy.local import free_port
from loopworks.llm.offline.model import OfflineModels
from loopworks.schemas.loop import LoopInput
from loopworks.schemas.notify import NotifyPlan, NotifyTiming, Webhook
from loopworks.schemas.run import Approval, RunRequest, RunStatus
from loopworks.schemas.settings import Settings
from loopworks.worker.build import build_worker
from loopworks.workflows.loop import LoopWorkflow


class _Once500(BaseHTTPRequestHandler):
    answered = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        _Once500.answered += 1
        self.send_response(500 if _Once500.answered == 1 else 200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


async def record_notified_run(client: Client, settings: Settings) -> WorkflowHistory:
    port, closed = free_port(), free_port()
    server = ThreadingHTTPServer(("127.0.0.1", port), _Once500)
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
        timing=NotifyTiming(attempt_seconds=2, retry_seconds=1, give_up_seconds=30),
    )
    params = LoopInput(
        run_id="recorded-notified-run",
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
            result = await handle.result()
            assert any(e.event == "notify_failed" for e in result.log), result.log
            return await handle.fetch_history()
    finally:
        server.shutdown()
        server.server_close()
