"""Notifications against real processes (docs/notifications.md): a worker and the API on
the dev server, and a webhook receiver on 127.0.0.1 answering as each test scripts it.

Every delivery's signature is checked as a receiver would check it; the idempotency key
tells attempts of one transition apart from transitions."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from loopworks.deploy.local import free_port
from loopworks.schemas.notify import delivery_workflow_id
from loopworks.schemas.run import TERMINAL_STATUSES
from tests.integration.stack import Stack
from tests.integration.test_temporal_cli import start_run, wait_for
from tests.integration.test_worker_loss import wait_until_polling

pytestmark = pytest.mark.integration

SECRET = "a-test-notify-secret-of-some-length"
INTERNAL_REPLY = b"internal-only: db password hunter2"
TERMINAL = {status.value for status in TERMINAL_STATUSES}
# Short retries, so a failing receiver is given up in seconds.
RETRY_S, GIVE_UP_S, ATTEMPT_S = 0.5, 6.0, 2.0


@dataclass
class Delivery:
    at: float
    headers: dict[str, str]
    body: bytes
    answered: int | None  # None: the connection was dropped, nothing answered

    @property
    def document(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.body)
        return loaded


@dataclass
class Receiver:
    """A webhook: `answer(n)` is the status for the nth request (0-based), None to hold
    the request until `release` is set and then drop it unanswered. It answers on any
    path; `url` is at `path`."""

    answer: Callable[[int], int | None]
    port: int = field(default_factory=free_port)
    deliveries: list[Delivery] = field(default_factory=list)
    holding: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    path: str = "/hook"
    # What each answer's body says (an internal service's reply, say).
    reply: bytes = b""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path}"

    def acknowledged(self) -> list[Delivery]:
        return [d for d in self.deliveries if d.answered == 200]

    def wait_for(self, count: int, timeout: float = 60) -> list[Delivery]:
        deadline = time.monotonic() + timeout
        while len(self.acknowledged()) < count:
            assert time.monotonic() < deadline, self.deliveries
            time.sleep(0.05)
        return self.acknowledged()

    def serve(self) -> ThreadingHTTPServer:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                n = len(receiver.deliveries)
                status = receiver.answer(n)
                delivery = Delivery(time.time(), dict(self.headers.items()), body, status)
                receiver.deliveries.append(delivery)
                if status is None:
                    receiver.holding.set()
                    receiver.release.wait(60)
                    self.close_connection = True
                    return
                self.send_response(status)
                self.send_header("Content-Length", str(len(receiver.reply)))
                self.end_headers()
                self.wfile.write(receiver.reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server


@pytest.fixture
def receivers() -> Iterator[Callable[[Callable[[int], int | None]], Receiver]]:
    servers: list[ThreadingHTTPServer] = []
    made: list[Receiver] = []

    def make(answer: Callable[[int], int | None]) -> Receiver:
        receiver = Receiver(answer)
        servers.append(receiver.serve())
        made.append(receiver)
        return receiver

    yield make
    for receiver in made:
        receiver.release.set()
    for server in servers:
        server.shutdown()
        server.server_close()


def notifying(stack: Stack, receiver: Receiver) -> None:
    """The stack's settings: the receiver's host and port allowed as an operator would
    allow a repository's host, over http; a secret; short retries."""
    stack.extra_env.update(
        LOOPS_ALLOWED_ORIGINS=f"127.0.0.1:{receiver.port}",
        LOOPS_ALLOWED_SCHEMES="https,ssh,file,http",
        LOOPS_NOTIFY_SECRET=SECRET,
        LOOPS_NOTIFY_RETRY_S=str(RETRY_S),
        LOOPS_NOTIFY_GIVE_UP_S=str(GIVE_UP_S),
        LOOPS_NOTIFY_ATTEMPT_S=str(ATTEMPT_S),
        LOOPS_TEMPORAL_UI_URL="http://127.0.0.1:8233",
    )


def signed(delivery: Delivery) -> bool:
    headers = {name.lower(): value for name, value in delivery.headers.items()}
    timestamp = headers["x-loops-timestamp"]
    assert abs(time.time() - int(timestamp)) < 300
    # As a receiver checks it (docs/notifications.md#verifying-a-notification).
    mac = hmac.new(SECRET.encode(), timestamp.encode() + b"." + delivery.body, hashlib.sha256)
    return hmac.compare_digest("v1=" + mac.hexdigest(), headers["x-loops-signature"])


def key(delivery: Delivery) -> str:
    return {n.lower(): v for n, v in delivery.headers.items()}["idempotency-key"]


def test_an_approved_run_sends_one_signed_notification_per_transition(
    stack: Stack, receivers: Callable[..., Receiver]
) -> None:
    receiver = receivers(lambda n: 200)
    notifying(stack, receiver)
    stack.start_worker()
    _, base_url = stack.start_api()
    with httpx.Client(base_url=base_url, timeout=30) as http:
        run_id = start_run(
            http,
            task="Write a short guide to reflex loops",
            mode="interactive",
            audit_probability=0,
            notify={"webhooks": [receiver.url]},
        )
        wait_for(http, run_id, lambda state: state["status"] == "awaiting_approval")
        assert len(receiver.wait_for(1)) == 1  # before anyone approved
        approved = http.post(f"/runs/{run_id}/approve", json={})
        assert approved.status_code == 200, approved.text
        final = wait_for(http, run_id, lambda state: state["status"] in TERMINAL)
        deliveries = receiver.wait_for(2)
        time.sleep(2 * RETRY_S)  # a second copy of either would have come by now

    assert final["status"] == "completed", final
    assert len(receiver.deliveries) == 2, receiver.deliveries
    assert all(signed(d) for d in deliveries)
    first, last = (d.document for d in deliveries)
    assert first["event"] == "awaiting_approval" and first["id"] == run_id
    assert first["next"] == {
        "command": f"loops approve {run_id}",
        "route": f"POST /runs/{run_id}/approve",
    }
    assert first["links"]["api"].endswith(f"/runs/{run_id}")
    assert first["links"]["temporal_ui"].endswith(f"/workflows/{run_id}")
    assert last["event"] == "completed" and last["status"] == "completed"
    assert last["score"] == final["last_score"]
    assert key(deliveries[0]) != key(deliveries[1])
    assert all(key(d).startswith(f"{run_id}:") for d in deliveries)


def test_a_failing_receiver_gets_it_once_late_and_the_run_does_not_wait(
    stack: Stack, receivers: Callable[..., Receiver]
) -> None:
    receiver = receivers(lambda n: 500 if n < 3 else 200)
    notifying(stack, receiver)
    stack.start_worker()
    _, base_url = stack.start_api()
    with httpx.Client(base_url=base_url, timeout=30) as http:
        body = {"webhooks": [receiver.url], "events": ["completed"]}
        run_id = start_run(http, task="Write a short guide", audit_probability=0, notify=body)
        final = wait_for(http, run_id, lambda state: state["status"] in TERMINAL)
        finished_at = time.time()
        (delivered,) = receiver.wait_for(1)
        time.sleep(2 * RETRY_S)

    assert final["status"] == "completed", final
    attempts = receiver.deliveries
    assert [d.answered for d in attempts] == [500, 500, 500, 200]
    assert len({key(d) for d in attempts}) == 1  # four attempts of one transition
    assert all(signed(d) for d in attempts)
    # The run was completed before the notification got through, which took its backoff.
    assert delivered.at > finished_at
    assert delivered.at - attempts[0].at >= RETRY_S * (1 + 2 + 4) * 0.9


async def test_a_receiver_that_always_fails_leaves_an_event_and_a_completed_run(
    stack: Stack, receivers: Callable[..., Receiver]
) -> None:
    """...and its status, never its reply: an allow-listed internal host answering a
    POST must not become readable through the run's events or its history."""
    receiver = receivers(lambda n: 500)
    receiver.reply = INTERNAL_REPLY
    notifying(stack, receiver)
    stack.start_worker()
    _, base_url = stack.start_api()
    with httpx.Client(base_url=base_url, timeout=30) as http:
        body = {"webhooks": [receiver.url], "events": ["completed"]}
        run_id = start_run(http, task="Write a short guide", audit_probability=0, notify=body)
        final = wait_for(http, run_id, lambda state: state["status"] in TERMINAL)
        deadline = time.monotonic() + GIVE_UP_S + 30
        while True:
            events = http.get(f"/runs/{run_id}/events").json()
            failed = [e for e in events if e["event"] == "notify_failed"]
            if failed or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        after = http.get(f"/runs/{run_id}").json()

    assert final["status"] == "completed" and after["status"] == "completed"
    (event,) = failed
    assert event["status"] == "error"
    assert event["payload"]["event"] == "completed"
    assert event["payload"]["webhook"] == f"http://127.0.0.1:{receiver.port}/…"
    assert event["payload"]["key"] == key(receiver.deliveries[0])
    assert "answered 500" in event["payload"]["error"]
    assert len(receiver.deliveries) >= 2 and not receiver.acknowledged()
    assert INTERNAL_REPLY.decode() not in json.dumps(events)
    client = await Client.connect(stack.server.address, namespace=stack.namespace)
    history = await client.get_workflow_handle(run_id).fetch_history()
    assert INTERNAL_REPLY.decode() not in history.to_json()


def test_a_worker_killed_while_sending_leaves_one_delivery(
    stack: Stack, receivers: Callable[..., Receiver], tmp_path: Path
) -> None:
    # The first attempt is held, and dropped once its worker is dead; then 200.
    receiver = receivers(lambda n: None if n == 0 else 200)
    notifying(stack, receiver)
    # Long enough for the dead worker's attempt to time out and another to follow.
    stack.extra_env["LOOPS_NOTIFY_GIVE_UP_S"] = "120"
    first = stack.start_worker()
    _, base_url = stack.start_api()
    with httpx.Client(base_url=base_url, timeout=30) as http:
        body = {"webhooks": [receiver.url], "events": ["completed"]}
        run_id = start_run(http, task="Write a short guide", audit_probability=0, notify=body)
        assert receiver.holding.wait(90), first.output()
        first.kill()
        receiver.release.set()
        second = stack.start_worker()
        wait_until_polling(second)
        (delivered,) = receiver.wait_for(1, timeout=90)
        time.sleep(2 * RETRY_S)
        final = http.get(f"/runs/{run_id}").json()

    assert final["status"] == "completed", final
    assert [d.answered for d in receiver.deliveries] == [None, 200]
    assert key(receiver.deliveries[0]) == key(delivered)
    assert signed(delivered) and delivered.document["event"] == "completed"


def execution_status(stack: Stack, workflow_id: str) -> WorkflowExecutionStatus | None:
    """The Temporal status of `workflow_id`'s latest execution, as the UI shows it."""

    async def describe() -> WorkflowExecutionStatus | None:
        client = await Client.connect(stack.server.address, namespace=stack.namespace)
        return (await client.get_workflow_handle(workflow_id).describe()).status

    return asyncio.run(describe())


def test_a_run_whose_receiver_is_down_closes_at_once_and_is_notified_once_it_is_back(
    stack: Stack,
) -> None:
    """The run's workflow closes within seconds of its last step and no longer counts
    against LOOPS_MAX_RUNS, while its delivery workflow retries; the worker is killed
    meanwhile, the receiver comes back, and the notification arrives once."""
    receiver = Receiver(lambda n: 200)  # not serving yet: the receiver is down
    notifying(stack, receiver)
    stack.extra_env.update(LOOPS_NOTIFY_GIVE_UP_S="180", LOOPS_MAX_RUNS="1")
    first = stack.start_worker()
    _, base_url = stack.start_api()
    with httpx.Client(base_url=base_url, timeout=30) as http:
        body = {"webhooks": [receiver.url], "events": ["completed"]}
        run_id = start_run(http, task="Write a short guide", audit_probability=0, notify=body)
        final = wait_for(http, run_id, lambda state: state["status"] in TERMINAL)
        finished_at = time.monotonic()
        while execution_status(stack, run_id) == WorkflowExecutionStatus.RUNNING:
            assert time.monotonic() - finished_at < 10, "the run's workflow is still open"
            time.sleep(0.2)
        closed_after = time.monotonic() - finished_at
        # Counted free at once (visibility lags a close by a moment): another run starts.
        while (
            second := http.post("/runs", json={"task": "Write another guide"})
        ).status_code == 429:
            assert time.monotonic() - finished_at < 15, second.text
            time.sleep(0.3)
        delivering = execution_status(stack, delivery_workflow_id(run_id))
        assert not receiver.deliveries
        first.kill()
        servers = [receiver.serve()]
        try:
            second_worker = stack.start_worker()
            wait_until_polling(second_worker)
            (delivered,) = receiver.wait_for(1, timeout=120)
            time.sleep(4 * RETRY_S)  # a second copy would have come by now
        finally:
            for server in servers:
                server.shutdown()
                server.server_close()
        events = http.get(f"/runs/{run_id}/events").json()

    assert final["status"] == "completed", final
    assert closed_after < 10 and second.status_code == 201, second.text
    assert delivering == WorkflowExecutionStatus.RUNNING
    assert [d.answered for d in receiver.deliveries] == [200]
    assert key(delivered) == f"{run_id}:1:completed"
    assert signed(delivered) and delivered.document["event"] == "completed"
    assert not any(event["event"] == "notify_failed" for event in events)


@pytest.mark.parametrize(
    ("url", "setting"),
    [
        ("http://127.0.0.1:1/hook", "LOOPS_ALLOWED_ORIGINS"),  # another port
        ("http://internal.example:8080/hook", "LOOPS_ALLOWED_ORIGINS"),
        ("ftp://127.0.0.1/hook", None),
    ],
)
def test_a_webhook_outside_the_allowed_hosts_is_422(
    stack: Stack, receivers: Callable[..., Receiver], url: str, setting: str | None
) -> None:
    receiver = receivers(lambda n: 200)
    notifying(stack, receiver)
    _, base_url = stack.start_api()
    notify = {"webhooks": [{"url": url, "format": "slack"}]}
    with httpx.Client(base_url=base_url, timeout=30) as http:
        run = http.post("/runs", json={"task": "Write a guide", "notify": notify})
        graph = http.post("/graphs", json={"goal": "Write a guide", "notify": notify})
    assert not receiver.deliveries
    for response in (run, graph):
        assert response.status_code == 422, response.text
        text = response.text
        assert "webhook not allowed" in text or "http or https" in text, text
        if setting:
            assert setting in text, text
        assert "notify" in text, text


def test_a_graph_notifies_its_waits_and_its_end(
    stack: Stack, receivers: Callable[..., Receiver]
) -> None:
    receiver = receivers(lambda n: 200)
    notifying(stack, receiver)
    stack.start_worker()
    _, base_url = stack.start_api()
    with httpx.Client(base_url=base_url, timeout=30) as http:
        body = {"goal": "Write a guide to caching", "mode": "interactive"}
        created = http.post("/graphs", json={**body, "notify": {"webhooks": [receiver.url]}})
        assert created.status_code == 201, created.text
        graph_id = created.json()["graph_id"]
        receiver.wait_for(1, timeout=120)
        assert http.post(f"/graphs/{graph_id}/pause", json={}).status_code == 200
        receiver.wait_for(2)
        assert http.post(f"/graphs/{graph_id}/stop", json={}).status_code == 202
        deliveries = receiver.wait_for(3)
        time.sleep(2 * RETRY_S)
        state = http.get(f"/graphs/{graph_id}").json()

    assert state["status"] == "stopped", state
    assert len(receiver.deliveries) == 3 and all(signed(d) for d in deliveries)
    documents = [d.document for d in deliveries]
    assert [d["event"] for d in documents] == ["awaiting_approval", "paused", "stopped"]
    assert {d["kind"] for d in documents} == {"graph"} and documents[0]["id"] == graph_id
    assert documents[0]["next"]["command"] == f"loops graph approve {graph_id}"
    assert documents[0]["links"]["api"].endswith(f"/graphs/{graph_id}")
    assert state["notify_failed"] == []


def test_a_graphs_notification_given_up_after_it_closed_is_in_its_state(
    stack: Stack, receivers: Callable[..., Receiver]
) -> None:
    """The graph's workflow closed before its `stopped` notification was given up: its
    delivery workflow keeps the failure, and the graph's state shows it."""
    receiver = receivers(lambda n: 500)
    notifying(stack, receiver)
    stack.start_worker()
    _, base_url = stack.start_api()
    with httpx.Client(base_url=base_url, timeout=30) as http:
        notify = {"webhooks": [receiver.url], "events": ["stopped"]}
        body = {"goal": "Write a guide to caching", "mode": "interactive", "notify": notify}
        created = http.post("/graphs", json=body)
        assert created.status_code == 201, created.text
        graph_id = created.json()["graph_id"]
        deadline = time.monotonic() + 120
        while http.get(f"/graphs/{graph_id}").json()["status"] != "awaiting_approval":
            assert time.monotonic() < deadline
            time.sleep(0.3)
        assert http.post(f"/graphs/{graph_id}/stop", json={}).status_code == 202
        deadline = time.monotonic() + GIVE_UP_S + 30
        while not (state := http.get(f"/graphs/{graph_id}").json())["notify_failed"]:
            assert time.monotonic() < deadline, "the notification was never given up"
            time.sleep(0.3)
        closed = execution_status(stack, graph_id)

    assert state["status"] == "stopped" and closed == WorkflowExecutionStatus.COMPLETED
    (failed,) = state["notify_failed"]
    assert failed["event"] == "stopped" and failed["key"] == key(receiver.deliveries[0])
    assert failed["webhook"] == f"http://127.0.0.1:{receiver.port}/…"
    assert "500" in failed["error"]


def test_a_graphs_blocked_task_loop_is_notified_with_the_graphs_command(
    stack: Stack, receivers: Callable[..., Receiver], tmp_path: Path
) -> None:
    """A task loop the custodiet blocks waits for a person: the graph's webhooks hear it
    once, as graph G's task T, with the command that clears it through the graph; the
    task loop's own ending is not theirs to hear, the graph's is."""
    receiver = receivers(lambda n: 200)
    notifying(stack, receiver)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"custodiet": {"1": {"verdict": "BLOCK", "reason": "drift"}}}))
    stack.extra_env["LOOPS_OFFLINE_SCRIPT"] = str(script)
    stack.start_worker()
    _, base_url = stack.start_api()
    task = {
        "id": "T-001",
        "title": "Write the guide",
        "description": "Write a short guide to caching",
        "acceptance_criteria": ["the guide exists"],
        "verification_command": "true",
    }
    with httpx.Client(base_url=base_url, timeout=30) as http:
        created = http.post(
            "/graphs",
            json={
                "goal": "Write a guide to caching",
                "tasks": [task],
                "audit_probability": 1,
                "notify": {"webhooks": [receiver.url]},
            },
        )
        assert created.status_code == 201, created.text
        graph_id = created.json()["graph_id"]
        (blocked,) = receiver.wait_for(1, timeout=120)
        document = blocked.document
        loop = http.get(f"/runs/{document['id']}").json()
        cleared = http.post(
            document["next"]["route"].removeprefix("POST "),
            json={"task": "T-001", "note": "scope confirmed"},
        )
        assert cleared.status_code == 200, cleared.text
        assert http.post(f"/graphs/{graph_id}/stop", json={}).status_code == 202
        deliveries = receiver.wait_for(2)
        time.sleep(2 * RETRY_S)
        state = http.get(f"/graphs/{graph_id}").json()

    assert signed(blocked) and loop["status"] == "blocked", loop
    assert document["event"] == "blocked" and document["kind"] == "run"
    assert document["id"] == f"{graph_id}/T-001/1" and document["alias"] == "T-001"
    assert document["graph"] == {"id": graph_id, "task": "T-001"}
    assert document["message"] == "drift"
    assert document["next"] == {
        "command": f"loops graph clear-block {graph_id} --task T-001 --note '...'",
        "route": f"POST /graphs/{graph_id}/clear-block",
    }
    assert document["links"]["api"].endswith(f"/runs/{graph_id}/T-001/1")
    assert key(blocked) == f"{graph_id}/T-001/1:1:blocked"
    # Then only the graph's own end: the task loop's stop is not sent.
    assert state["status"] == "stopped", state
    assert len(receiver.deliveries) == 2, [d.document for d in receiver.deliveries]
    last = deliveries[1].document
    assert (last["kind"], last["id"], last["event"]) == ("graph", graph_id, "stopped")


# What a Slack incoming webhook's path looks like: the path is the credential.
SLACK_PATH = "/services/T0SECRET1/B0SECRET2/xoxSecretPathToken123"
HOSTILE_REASON = "ping <!channel> & see <http://evil.example|docs>"


def test_a_stop_reason_reaches_slack_as_text_not_as_a_ping_or_a_link(
    stack: Stack, receivers: Callable[..., Receiver]
) -> None:
    """`loops stop R --reason 'ping <!channel> & see <http://evil.example|docs>'` once reached
    Slack as an @channel ping and a link disguised as `docs`: now Slack is sent its
    escaped form, which it shows as written, and the only links are the notification's."""
    receiver = receivers(lambda n: 200)
    receiver.path = SLACK_PATH
    notifying(stack, receiver)
    stack.start_worker()
    _, base_url = stack.start_api()
    with httpx.Client(base_url=base_url, timeout=30) as http:
        notify = {"webhooks": [{"url": receiver.url, "format": "slack"}], "events": ["stopped"]}
        run_id = start_run(
            http, task="Write a short guide", mode="interactive", audit_probability=0, notify=notify
        )
        wait_for(http, run_id, lambda state: state["status"] == "awaiting_approval")
        stopped = http.post(f"/runs/{run_id}/stop", json={"reason": HOSTILE_REASON})
        assert stopped.status_code == 202, stopped.text
        (delivery,) = receiver.wait_for(1)

    assert signed(delivery)
    text = delivery.document["text"]
    assert list(delivery.document) == ["text"]
    assert "ping &lt;!channel&gt; &amp; see &lt;http://evil.example|docs&gt;" in text, text
    assert "<!channel>" not in text and "<http://evil.example" not in text
    links = re.findall(r"<([^>]*)>", text)
    assert [link.rsplit("|", 1)[1] for link in links] == ["api", "temporal_ui"], links
    assert links[0].endswith(f"/runs/{run_id}|api"), links


def test_no_webhook_path_reaches_the_worker_log_and_a_failed_attempt_is_one_line(
    stack: Stack, receivers: Callable[..., Receiver]
) -> None:
    """httpx logs every request's whole URL, and Temporal every failed attempt with a
    traceback: with a receiver that always fails, the worker's log holds the webhook's
    host and port and never its path, and one line of ours per attempt."""
    receiver = receivers(lambda n: 500)
    receiver.path = SLACK_PATH
    notifying(stack, receiver)
    worker = stack.start_worker()
    api, base_url = stack.start_api()
    with httpx.Client(base_url=base_url, timeout=30) as http:
        notify = {"webhooks": [{"url": receiver.url, "format": "slack"}], "events": ["completed"]}
        run_id = start_run(http, task="Write a short guide", audit_probability=0, notify=notify)
        wait_for(http, run_id, lambda state: state["status"] in TERMINAL)
        deadline = time.monotonic() + GIVE_UP_S + 30
        while not any(
            e["event"] == "notify_failed" for e in http.get(f"/runs/{run_id}/events").json()
        ):
            assert time.monotonic() < deadline, "the notification was never given up"
            time.sleep(0.3)
    worker.stop()
    api.stop()

    attempts = len(receiver.deliveries)
    assert attempts >= 2, receiver.deliveries
    logs = {"worker": worker.output(), "api": api.output()}
    secret_parts = [SLACK_PATH, *SLACK_PATH.strip("/").split("/")]
    for name, log in logs.items():
        for part in secret_parts:
            assert part not in log, f"{part!r} in the {name} log:\n{log}"
    worker_log = logs["worker"]
    assert "Traceback" not in worker_log, worker_log
    assert "HTTP Request: POST" not in worker_log, worker_log
    ours = [line for line in worker_log.splitlines() if f"notification {run_id}:" in line]
    failed = [line for line in ours if "not sent" in line]
    assert len(failed) == attempts, ours
    assert all(f"http://127.0.0.1:{receiver.port}/…" in line for line in failed), failed
