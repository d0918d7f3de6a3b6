"""Notifications' plain parts: which event a status is, the body and what moves a run on,
Slack's shape, the signature as docs/notifications.md's receiver checks it, the settings
and which webhook URLs are admitted."""

from __future__ import annotations

import base64
import json
import logging
import re
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from temporalio import workflow
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.workflow import ParentClosePolicy

from loopworks.activities.notification import (
    _QUIET,
    _delivering,
    _reason,
    encoded,
    links,
    quiet_deliveries,
    signature,
    verify,
    where,
)
from loopworks.schemas.graph import GraphState, GraphStatus
from loopworks.schemas.notify import (
    DEFAULT_EVENTS,
    REPORT_CHARS,
    NotificationBatch,
    NotifyEvent,
    NotifyPlan,
    NotifyRequest,
    Webhook,
    WebhookFormat,
    notify_key,
)
from loopworks.schemas.origin_rules import OriginRules, rules_from
from loopworks.schemas.run import RunState, RunStatus, StopReason, Thresholds
from loopworks.schemas.settings import Settings
from loopworks.workflows.notifying import (
    WAITING,
    graph_body,
    graph_event,
    hand_over,
    run_body,
    run_event,
)
from loopworks.workspace.origin_access import webhook_verdict

DOCS = Path(__file__).resolve().parents[2] / "docs" / "notifications.md"


def state(status: RunStatus, reason: StopReason | None = None, **fields: object) -> RunState:
    return RunState(
        run_id="r-1",
        alias="guide",
        status=status,
        task="t",
        max_iterations=4,
        thresholds=Thresholds(),
        branch="loops/r-1",
        origin="",
        stop_reason=reason,
        **fields,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("status", "reason", "event"),
    [
        (RunStatus.AWAITING_APPROVAL, None, NotifyEvent.AWAITING_APPROVAL),
        (RunStatus.BLOCKED, None, NotifyEvent.BLOCKED),
        (RunStatus.PAUSED, None, NotifyEvent.PAUSED),
        (RunStatus.COMPLETED, StopReason.THRESHOLD_REACHED, NotifyEvent.COMPLETED),
        (RunStatus.STOPPED, StopReason.USER_STOP, NotifyEvent.STOPPED),
        (RunStatus.STOPPED, StopReason.QA_REJECTED, NotifyEvent.QA_REJECTED),
        (RunStatus.HALTED, StopReason.CRITIC_HALT, NotifyEvent.HALTED),
        (RunStatus.FAILED, None, NotifyEvent.FAILED),
        (RunStatus.RUNNING, None, None),
    ],
)
def test_each_status_is_its_event(
    status: RunStatus, reason: StopReason | None, event: NotifyEvent | None
) -> None:
    assert run_event(state(status, reason)) == event


def test_a_waiting_run_says_what_moves_it_on() -> None:
    blocked = state(RunStatus.BLOCKED, iteration=2, last_score=0.5)
    blocked.block.reason = "edits outside the declared files"
    body = run_body(blocked, NotifyEvent.BLOCKED, "2026-01-01T00:00:00+00:00")
    assert body.next is not None
    assert body.next.command == "loops clear-block r-1 --note '...'"
    assert body.next.route == "POST /runs/r-1/clear-block"
    assert body.message == "edits outside the declared files" and body.score == 0.5
    done = run_body(state(RunStatus.COMPLETED), NotifyEvent.COMPLETED, "t")
    assert done.next is None and done.score is None  # it never iterated


def test_a_block_is_sent_with_its_write_up_and_is_a_default_waiting_event() -> None:
    blocked = state(RunStatus.BLOCKED)
    blocked.block.reason = "ran curl"
    blocked.block.report = "# Blocked by the custodiet at iteration 1\n" + "x" * 9000
    body = run_body(blocked, NotifyEvent.BLOCKED, "t")
    assert body.report is not None and body.report.startswith("# Blocked by the custodiet")
    assert len(body.report) == REPORT_CHARS
    slack = json.loads(encoded(body, Webhook(url="https://x", format=WebhookFormat.SLACK)))
    assert "# Blocked by the custodiet at iteration 1" in slack["text"]
    # Only a block carries one: no other body has the key at all.
    done = run_body(state(RunStatus.COMPLETED), NotifyEvent.COMPLETED, "t")
    assert "report" not in json.loads(encoded(done, Webhook(url="https://x")))
    # A request that names no events, and the deployment's default, hear of blocks.
    assert NotifyEvent.BLOCKED in DEFAULT_EVENTS and NotifyEvent.BLOCKED in WAITING
    plan = NotifyPlan(webhooks=[Webhook(url="https://x")], deployment_webhooks=1)
    assert len(plan.targets(NotifyEvent.BLOCKED)) == 2


def test_a_graph_notifies_its_own_transitions() -> None:
    graph = GraphState(graph_id="graph-g-1", goal="Write a guide", status=GraphStatus.PAUSED)
    assert graph_event(graph) == NotifyEvent.PAUSED
    body = graph_body(graph, NotifyEvent.PAUSED, "t")
    assert body.kind == "graph" and body.next is not None
    assert body.next.command == "loops graph resume graph-g-1"
    assert graph_event(graph.model_copy(update={"status": GraphStatus.RUNNING})) is None


def test_a_graphs_task_loop_says_its_graph_and_task_and_the_graphs_command() -> None:
    loop = state(RunStatus.BLOCKED).model_copy(
        update={"run_id": "graph-g-1/T-002/1", "alias": "T-002"}
    )
    loop.block.reason = "drift"
    body = run_body(loop, NotifyEvent.BLOCKED, "t", graph_id="graph-g-1")
    assert body.kind == "run" and body.id == "graph-g-1/T-002/1"
    assert body.graph is not None and (body.graph.id, body.graph.task) == ("graph-g-1", "T-002")
    assert body.next is not None
    assert body.next.command == "loops graph clear-block graph-g-1 --task T-002 --note '...'"
    assert body.next.route == "POST /graphs/graph-g-1/clear-block"
    slack = json.loads(encoded(body, Webhook(url="https://x", format=WebhookFormat.SLACK)))
    assert "task T-002 of graph `graph-g-1`" in slack["text"]
    assert "loops graph clear-block graph-g-1 --task T-002" in slack["text"]
    # A run of its own says no graph.
    assert "graph" not in json.loads(
        encoded(run_body(loop, NotifyEvent.BLOCKED, "t"), Webhook(url="https://x"))
    )


def test_a_graph_hands_its_task_loops_its_webhooks_for_blocks_only() -> None:
    hook = Webhook(url="https://hooks.example/h")
    plan = NotifyPlan(webhooks=[hook], deployment_webhooks=1)
    loops = plan.for_task_loops()
    assert loops is not None
    assert (loops.events, loops.deployment_events) == ([NotifyEvent.BLOCKED], [NotifyEvent.BLOCKED])
    assert len(loops.targets(NotifyEvent.BLOCKED)) == 2
    assert all(not loops.targets(event) for event in NotifyEvent if event != NotifyEvent.BLOCKED)
    # The request's events decide for its webhooks, the deployment's for the deployment's.
    only_end = NotifyPlan(webhooks=[hook], events=[NotifyEvent.COMPLETED])
    assert only_end.for_task_loops() is None
    mixed = only_end.model_copy(update={"deployment_webhooks": 1})
    assert mixed.for_task_loops() is not None
    assert [t.deployment for t in mixed.for_task_loops().targets(NotifyEvent.BLOCKED)] == [0]  # type: ignore[union-attr]


def test_slack_gets_its_own_shape_and_json_the_body() -> None:
    body = run_body(state(RunStatus.AWAITING_APPROVAL), NotifyEvent.AWAITING_APPROVAL, "t")
    body = body.model_copy(update={"links": {"api": "http://api/runs/r-1"}})
    slack = json.loads(encoded(body, Webhook(url="https://x", format=WebhookFormat.SLACK)))
    assert list(slack) == ["text"]
    assert "awaiting approval" in slack["text"] and "loops approve r-1" in slack["text"]
    assert "<http://api/runs/r-1|api>" in slack["text"]
    plain = json.loads(encoded(body, Webhook(url="https://x")))
    assert plain["event"] == "awaiting_approval" and plain["id"] == "r-1"


HOSTILE = "ping <!channel> & see <http://evil.example|docs> <@U0123> <#C0123>"


def test_slack_shows_every_text_literally_and_links_only_ours() -> None:
    """A stop's reason (whoever stopped the run), a block's (the custodiet model's), a
    graph's goal: none of them becomes a mention or a link in Slack."""
    stopped = state(RunStatus.STOPPED, StopReason.USER_STOP)
    stopped.stop.message = HOSTILE
    blocked = state(RunStatus.BLOCKED)
    blocked.block.reason = HOSTILE
    graph = GraphState(
        graph_id="graph-1", goal=f"Write a guide {HOSTILE}", status=GraphStatus.STOPPED
    )
    bodies = [
        run_body(stopped, NotifyEvent.STOPPED, "t"),
        run_body(blocked, NotifyEvent.BLOCKED, "t"),
        graph_body(graph, NotifyEvent.STOPPED, "t"),
    ]
    ours = {"api": "http://api.example:8000/runs/r-1?a=1&b=2", "temporal_ui": "http://ui/x|y z"}
    for body in bodies:
        body = body.model_copy(update={"links": ours})
        text = json.loads(encoded(body, Webhook(url="https://x", format=WebhookFormat.SLACK)))[
            "text"
        ]
        assert "ping &lt;!channel&gt; &amp; see &lt;http://evil.example|docs&gt;" in text, text
        assert "&lt;@U0123&gt; &lt;#C0123&gt;" in text
        # Every control sequence Slack reads is one of our two links, whole.
        assert re.findall(r"<([^>]*)>", text) == [
            "http://api.example:8000/runs/r-1?a=1&amp;b=2|api",
            "http://ui/x%7Cy%20z|temporal_ui",
        ]
        # No `&` but an entity's: Slack reads nothing else into it.
        assert not re.search(r"&(?!amp;|lt;|gt;)", text), text
    # The JSON body is the receiver's to escape: it keeps the text as it was.
    plain = json.loads(encoded(bodies[0], Webhook(url="https://x")))
    assert plain["message"] == HOSTILE


def test_the_documented_receiver_verifies_a_signature_and_refuses_a_replay() -> None:
    code = re.search(r"```python\n(.*?)```", DOCS.read_text(), re.S)
    assert code is not None
    namespace: dict[str, object] = {}
    exec(code.group(1), namespace)  # the receiver docs/notifications.md shows
    verified = namespace["verified"]
    body, timestamp = b'{"id":"r-1"}', str(int(time.time()))
    headers = {
        "X-Loops-Timestamp": timestamp,
        "X-Loops-Signature": signature("s3cret", timestamp, body),
        "Idempotency-Key": notify_key("r-1", 1, NotifyEvent.COMPLETED),
    }
    seen: set[str] = set()
    assert verified("s3cret", headers, body, seen)  # type: ignore[operator]
    assert not verified("s3cret", headers, body, seen)  # type: ignore[operator]
    assert not verified("other", headers, body, set())  # type: ignore[operator]
    assert not verified("s3cret", headers, body + b" ", set())  # type: ignore[operator]
    assert verify("s3cret", timestamp, body, headers["X-Loops-Signature"])


def test_settings_make_the_plan_and_keep_the_deployment_webhooks_to_themselves() -> None:
    settings = Settings(
        LOOPS_NOTIFY_WEBHOOKS="https://a.example/h, slack:https://hooks.slack.com/s/T/B/X",
        LOOPS_NOTIFY_EVENTS="blocked,failed",
        LOOPS_NOTIFY_RETRY_S=0.5,
    )
    assert [w.format for w in settings.deployment_webhooks()] == ["json", "slack"]
    plan = settings.notify_plan(None)
    assert plan is not None and plan.deployment_webhooks == 2 and not plan.webhooks
    assert "hooks.slack.com" not in plan.model_dump_json()
    assert plan.timing.retry_seconds == 0.5
    assert [t.deployment for t in plan.targets(NotifyEvent.BLOCKED)] == [0, 1]
    assert plan.targets(NotifyEvent.COMPLETED) == []
    assert Settings().notify_plan(None) is None
    asked = NotifyRequest.model_validate({"webhooks": ["https://b.example/h"]})
    assert asked.events == list(DEFAULT_EVENTS)
    with pytest.raises(ValueError, match="LOOPS_NOTIFY_EVENTS"):
        Settings(LOOPS_NOTIFY_EVENTS="done")


def test_links_follow_the_public_urls() -> None:
    body = run_body(state(RunStatus.PAUSED), NotifyEvent.PAUSED, "t")
    assert links(Settings(), body, "default") == {"api": "http://127.0.0.1:8000/runs/r-1"}
    found = links(
        Settings(LOOPS_PUBLIC_API_URL="https://loops.example/", LOOPS_TEMPORAL_UI_URL="http://ui"),
        body,
        "ns",
    )
    assert found == {
        "api": "https://loops.example/runs/r-1",
        "temporal_ui": "http://ui/namespaces/ns/workflows/r-1",
    }
    # The image listens on every address: `http://0.0.0.0:8000/...` was no link anyone
    # could follow, so there is none until the public URL is set.
    for wildcard in ("0.0.0.0", "::"):
        assert links(Settings(LOOPS_API_HOST=wildcard), body, "default") == {}
    assert links(Settings(LOOPS_API_HOST="::1"), body, "default") == {
        "api": "http://[::1]:8000/runs/r-1"
    }


def _rules(allowed: str | None = None, schemes: str = "https,ssh") -> OriginRules:
    return rules_from(allowed=allowed, schemes=schemes, local_roots="/tmp", own=(), private_dirs=())


@pytest.mark.parametrize(
    ("url", "allowed", "schemes", "admitted"),
    [
        ("https://hooks.example/x", None, "https,ssh", True),
        ("http://hooks.example/x", None, "https,ssh", False),  # http only when named
        ("https://10.1.2.3/x", None, "https,ssh", False),  # a private address
        ("http://127.0.0.1:9000/x", "127.0.0.1:9000", "https,http", True),
        ("http://127.0.0.1:9001/x", "127.0.0.1:9000", "https,http", False),
        ("ssh://hooks.example/x", None, "https,ssh", False),
        ("/tmp/hook", None, "https,ssh,file", False),
        ("https://user:pw@hooks.example/x", None, "https,ssh", False),
    ],
)
def test_webhooks_are_admitted_like_repositories(
    url: str, allowed: str | None, schemes: str, admitted: bool
) -> None:
    def resolver(host: str, port: int | None) -> tuple[str, ...]:
        return ("10.1.2.3",) if host == "10.1.2.3" else ("93.184.215.14",)

    rules = _rules(allowed, schemes)
    assert bool(webhook_verdict(url, rules, resolver)) is admitted


def test_an_attempts_error_never_quotes_the_webhooks_path() -> None:
    url = "https://hooks.slack.com/services/T0/B0/SECRET?token=x1"
    quoting = httpx.UnsupportedProtocol(f"cannot send to {url} (nor to /services/T0/B0/SECRET)")
    reason = _reason(quoting, url)
    assert "SECRET" not in reason and "token=x1" not in reason
    assert reason.startswith("UnsupportedProtocol: cannot send to")
    assert _reason(httpx.ReadTimeout(""), url) == "ReadTimeout"
    assert len(_reason(httpx.ConnectError("x" * 1000), url)) <= 200


def test_httpx_request_lines_are_dropped_while_a_delivery_is_made_only() -> None:
    quiet_deliveries()
    quiet_deliveries()  # idempotent
    httpx_log = logging.getLogger("httpx")
    assert httpx_log.filters.count(_QUIET) == 1
    record = logging.LogRecord("httpx", logging.INFO, "", 0, "HTTP Request: POST %s", ("u",), None)
    assert httpx_log.filter(record)  # a model API request keeps its line
    token = _delivering.set(True)
    try:
        assert not httpx_log.filter(record)
    finally:
        _delivering.reset(token)


def test_a_webhook_is_named_without_its_path() -> None:
    assert where("https://hooks.slack.com:8443/services/T/B/SECRET?x=1") == (
        "https://hooks.slack.com:8443/…"
    )


@pytest.mark.parametrize(
    ("history", "given_up"),
    [("notified_run", True), ("handed_over_run", False), ("notification_deliveries", True)],
)
def test_the_signing_secret_never_enters_a_notifying_runs_history(
    history: str, given_up: bool
) -> None:
    """tests/histories/ has notifying runs recorded with LOOPS_NOTIFY_SECRET set on their
    worker (tests/histories/notified.py): no payload of the runs' histories, nor of the
    delivery workflow's, holds the secret; a notification given up is there (the old
    run's event, the delivery workflow's), or not (a run that closed before it was)."""
    path = DOCS.parents[1] / "tests/histories" / f"{history}.json"
    payloads: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for name, value in node.items():
                if name == "data" and isinstance(value, str):
                    payloads.append(base64.b64decode(value).decode("utf-8", "replace"))
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(json.loads(path.read_text()))
    text = "\n".join(payloads)
    assert ("notify_failed" in text or '"given_up":[{' in text) == given_up
    assert "recorded-secret" not in text


async def test_a_hand_over_that_meets_its_delivery_workflow_closing_starts_it_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The race no recorded run can stage: the delivery workflow still sends when the run
    starts it (so the start is refused), and has closed when the run signals it (so the
    signal fails). The transition is started again, not dropped. Temporal's three calls
    answer here as the server would."""
    calls: list[tuple[Any, ...]] = []
    refusals = iter([WorkflowAlreadyStartedError("notify/r-1", "NotificationWorkflow")])

    async def start_child_workflow(run: Any, arg: Any, *, id: str, **options: Any) -> None:
        calls.append(("start", id, options["parent_close_policy"], arg.batches))
        if refused := next(refusals, None):
            raise refused

    class Closed:
        async def signal(self, name: str, arg: Any) -> None:
            calls.append(("signal", name, arg))
            raise ApplicationError("Unable to signal external workflow because it was not found")

    monkeypatch.setattr(workflow, "start_child_workflow", start_child_workflow)
    monkeypatch.setattr(workflow, "get_external_workflow_handle", lambda workflow_id: Closed())
    monkeypatch.setattr(workflow, "info", lambda: SimpleNamespace(workflow_id="r-1"))
    batch = NotificationBatch(notifications=[])

    await hand_over(batch)

    start = ("start", "notify/r-1", ParentClosePolicy.ABANDON, [batch])
    assert calls == [start, ("signal", "deliver", batch), start]
