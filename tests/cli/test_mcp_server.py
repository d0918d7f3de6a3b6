"""`loops mcp`'s tools against the real API app over a fake Temporal: what each tool asks
the API, what it answers, and the API's own message as the tool's error (docs/mcp.md)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from fastapi.testclient import TestClient
from mcp import Client
from mcp.types import TextContent
from temporalio.client import Client as TemporalClient

from loopworks.api.main import create_app
from loopworks.cli.client import ApiClient
from loopworks.cli.config import CliConfig
from loopworks.cli.mcp.server import build_server
from loopworks.schemas.events import EventName
from loopworks.schemas.run import Mode
from loopworks.schemas.settings import Settings
from tests.api.fake_temporal import CarryingHandle, FakeClient, event

pytestmark = pytest.mark.unit

RUN_ID = "fake-20250101-000000-abcdef"


class Bridge:
    """httpx requests from the tools' ApiClient, handed to the app's test client."""

    def __init__(self, http: TestClient) -> None:
        self.http = http
        self.requests: list[tuple[str, str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        content = request.read()
        self.requests.append(
            (request.method, request.url.path, json.loads(content) if content else None)
        )
        answer = self.http.request(
            request.method,
            request.url.raw_path.decode(),
            headers={k: v for k, v in request.headers.items() if k.lower() != "host"},
            content=content,
        )
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)


@pytest.fixture
def fake() -> FakeClient:
    return FakeClient()


@pytest.fixture
def bridge(fake: FakeClient, tmp_path: Path) -> Iterator[Bridge]:
    app = create_app(Settings(LOOPS_DATA_DIR=tmp_path / "data"), client=cast(TemporalClient, fake))
    with TestClient(app, base_url="http://localhost") as http:
        yield Bridge(http)


@asynccontextmanager
async def tools(bridge: Bridge) -> AsyncIterator[Client]:
    """The MCP server in-process, its ApiClient speaking to the app. Entered inside each
    test: the client's task group must open and close in one task."""
    api = ApiClient(CliConfig("http://localhost", None), transport=httpx.MockTransport(bridge))
    try:
        async with Client(build_server(api)) as client:
            yield client
    finally:
        api.close()


async def call(client: Client, tool: str, **arguments: Any) -> Any:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    return result.structured_content


async def error(client: Client, tool: str, **arguments: Any) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    return " ".join(p.text for p in result.content if isinstance(p, TextContent))


async def test_start_run_sends_the_request_and_answers_the_runs_view(
    fake: FakeClient, bridge: Bridge
) -> None:
    async with tools(bridge) as mcp:
        view = await call(
            mcp,
            "start_run",
            task="Write a guide",
            mode="interactive",
            max_iterations=2,
            template="minor-edit",
            audit_probability=0,
        )
        method, path, body = bridge.requests[0]
        assert (method, path) == ("POST", "/runs")
        assert body == {
            "task": "Write a guide",
            "mode": "interactive",
            "max_iterations": 2,
            "audit_probability": 0,
            "template": "minor-edit",
        }
        request = fake.starts[0]["params"].request
        assert (request.mode, request.max_iterations, request.template) == (
            Mode.INTERACTIVE,
            2,
            "minor-edit",
        )
        assert view["run_id"] == fake.starts[0]["id"] and view["status"] == "running"
        assert view["gate"] is None and "later" in view["next_action"]


@pytest.mark.parametrize(("tool", "field"), [("start_run", "task"), ("start_graph", "goal")])
async def test_start_tools_leave_the_iteration_limit_to_the_api_unless_given(
    fake: FakeClient, bridge: Bridge, tool: str, field: str
) -> None:
    """Unset, the API takes a prep package's limit when it plans from one (else 4): a
    limit the tool filled in would override the package's."""
    async with tools(bridge) as mcp:
        # A graph's answer (its state) is more than the fake Temporal can give.
        await mcp.call_tool(tool, {field: "Fix calc"})
        await mcp.call_tool(tool, {field: "Fix calc", "max_iterations": 7})
    unset, given = [body for method, _, body in bridge.requests if method == "POST"]
    assert "max_iterations" not in unset, unset
    assert given["max_iterations"] == 7, given
    assert [start["params"].request.max_iterations for start in fake.starts] == [None, 7]


async def test_events_are_read_in_pages_after_a_cursor(fake: FakeClient, bridge: Bridge) -> None:
    async with tools(bridge) as mcp:
        fake.handle(RUN_ID).events = [event(RUN_ID, seq) for seq in range(1, 6)]
        page = await call(mcp, "run_events", run_id=RUN_ID, after=1, limit=2)
        assert [e["seq"] for e in page["events"]] == [2, 3]
        assert (page["next_cursor"], page["more"]) == (3, True)
        assert page["events"][0]["event"] == EventName.PAUSED
        last = await call(mcp, "run_events", run_id=RUN_ID, after=3, limit=50)
        assert [e["seq"] for e in last["events"]] == [4, 5] and last["more"] is False
        empty = await call(mcp, "run_events", run_id=RUN_ID, after=5)
        assert (empty["events"], empty["next_cursor"], empty["more"]) == ([], 5, False)


async def test_approve_run_sends_the_edits(fake: FakeClient, bridge: Bridge) -> None:
    async with tools(bridge) as mcp:
        rule = {"id": "usage", "description": "Has a usage section", "check": "a ## Usage heading"}
        await call(
            mcp,
            "approve_run",
            run_id=RUN_ID,
            max_iterations=3,
            rules=[rule],
            thresholds={"A": 0.7, "B": 0.8},
            note="go",
        )
        method, path, body = bridge.requests[-1]
        assert (method, path) == ("POST", f"/runs/{RUN_ID}/approve")
        assert body["max_iterations"] == 3 and body["note"] == "go"
        assert body["thresholds"] == {"A": 0.7, "B": 0.8}
        assert [r["id"] for r in body["rules"]] == ["usage"]
        assert fake.handle(RUN_ID).updates == ["approve"]


async def test_steering_tools_call_their_routes(bridge: Bridge) -> None:
    async with tools(bridge) as mcp:
        await call(mcp, "clear_block", run_id=RUN_ID, note="scope confirmed")
        await call(mcp, "pause_run", run_id=RUN_ID)
        await call(mcp, "resume_run", run_id=RUN_ID)
        await call(mcp, "stop_run", run_id=RUN_ID, reason="enough")
        assert [(m, p, b) for m, p, b in bridge.requests] == [
            ("POST", f"/runs/{RUN_ID}/clear-block", {"note": "scope confirmed"}),
            ("POST", f"/runs/{RUN_ID}/pause", {}),
            ("POST", f"/runs/{RUN_ID}/resume", {}),
            ("POST", f"/runs/{RUN_ID}/stop", {"reason": "enough"}),
        ]


async def test_a_refused_request_is_a_tool_error_with_the_apis_message(bridge: Bridge) -> None:
    async with tools(bridge) as mcp:
        relative = await error(mcp, "start_run", task="x", repo="relative/repo")
        assert relative.startswith("Error executing tool start_run: HTTP 422: "), relative
        assert "absolute" in relative
        blank = await error(mcp, "clear_block", run_id=RUN_ID, note="   ")
        assert "HTTP 422" in blank and "note must not be blank" in blank, blank


async def test_arguments_outside_the_schema_are_refused_before_the_api(bridge: Bridge) -> None:
    async with tools(bridge) as mcp:
        answer = await error(mcp, "start_run", task="x", mode="sometimes")
        assert "mode" in answer
        answer = await error(mcp, "start_run", task="x", max_iterations=21)
        assert "max_iterations" in answer
        # A misspelt argument would have started the run without it.
        answer = await error(mcp, "start_run", task="x", budjet={"max_cost_usd": 1})
        assert "budjet" in answer and "Extra inputs are not permitted" in answer, answer
        answer = await error(mcp, "pause_run", run_id=RUN_ID, reason="lunch")
        assert "reason" in answer, answer
        assert bridge.requests == []


async def test_approve_graph_refuses_a_task_field_the_api_does_not_know(bridge: Bridge) -> None:
    """As the API does (`RequestedTask`): a mistyped `depends_on` (for `requires`) would
    otherwise be dropped, and the edited graph approved without the dependency."""
    task = {
        "id": "T-002",
        "title": "Export",
        "description": "Add the CSV export",
        "acceptance_criteria": ["exports"],
        "verification_command": "true",
        "depends_on": ["T-001"],
    }
    graph_id = "graph-add-export-20250101-000000-abcdef"
    direct = bridge.http.post(f"/graphs/{graph_id}/approve", json={"tasks": [task]})
    assert direct.status_code == 422 and "depends_on" in direct.text, direct.text
    async with tools(bridge) as mcp:
        answer = await error(mcp, "approve_graph", graph_id=graph_id, tasks=[task])
    assert "depends_on" in answer and "Extra inputs are not permitted" in answer, answer
    assert bridge.requests == []


async def test_run_trajectory_reads_the_records_and_leaves_other_lines_out(
    fake: FakeClient, bridge: Bridge
) -> None:
    """The route serves a repository's own file under .loops/trajectory/ as it is; one
    line of it (not JSON, or JSON of another shape) failed the tool for the whole run."""
    plan = {
        "run_id": RUN_ID,
        "step": "plan",
        "role": "planner",
        "iteration": 1,
        "turn": 1,
        "kind": "assistant",
        "output": "the plan",
        "model": "m",
        "usage": {"input_tokens": 12, "output_tokens": 3},
        "ts": "2025-01-01T00:00:00Z",
    }
    produce = {**plan, "step": "produce", "kind": "tool_call", "tool": "write_file"}
    produce.update(input={"path": "a.md"}, output=None, ts="2025-01-01T00:01:00Z")
    notes = "our own notes, not JSON\n" + '["a list"]\n' + json.dumps({"turn": "one"})
    fake.handles[RUN_ID] = CarryingHandle(
        RUN_ID,
        carried={
            "01-plan": json.dumps(plan) + "\n",
            "notes": notes + "\n",
            "01-produce": json.dumps(produce) + "\n",
        },
    )
    async with tools(bridge) as mcp:
        page = await call(mcp, "run_trajectory", run_id=RUN_ID)
        produced = await call(mcp, "run_trajectory", run_id=RUN_ID, step="produce")
    assert [(line["n"], line["step"], line["kind"]) for line in page["lines"]] == [
        (1, "plan", "assistant"),
        (2, "produce", "tool_call"),
    ]
    first = page["lines"][0]
    assert (first["role"], first["text"], first["input_tokens"], first["output_tokens"]) == (
        "planner",
        "the plan",
        12,
        3,
    )
    assert page["lines"][1]["text"] == '{"path": "a.md"}'
    assert (page["next_cursor"], page["more"]) == (2, False)
    assert [line["n"] for line in produced["lines"]] == [2]


async def test_a_password_in_the_api_url_does_not_reach_the_model() -> None:
    """A tool's error quotes where the API could not be reached, without the password
    LOOPS_API_URL may carry (a proxy's basic auth)."""
    api = ApiClient(CliConfig("http://loops:hunter2-secret@127.0.0.1:9", None))
    try:
        async with Client(build_server(api)) as mcp:
            answer = await error(mcp, "list_runs")
    finally:
        api.close()
    assert "cannot reach the API at http://***@127.0.0.1:9" in answer, answer
    assert "hunter2-secret" not in answer, answer


@pytest.fixture
def notifying_bridge(fake: FakeClient, tmp_path: Path) -> Iterator[Bridge]:
    """The app of a deployment that signs notifications and admits one webhook host."""
    settings = Settings(
        LOOPS_DATA_DIR=tmp_path / "data",
        LOOPS_NOTIFY_SECRET="a-secret",
        LOOPS_ALLOWED_ORIGINS="hooks.example.com",
    )
    app = create_app(settings, client=cast(TemporalClient, fake))
    with TestClient(app, base_url="http://localhost") as http:
        yield Bridge(http)


@pytest.mark.parametrize(("tool", "field"), [("start_run", "task"), ("start_graph", "goal")])
async def test_start_tools_ask_for_notifications(
    fake: FakeClient, notifying_bridge: Bridge, tool: str, field: str
) -> None:
    hook, slack = "https://hooks.example.com/a", "https://hooks.example.com/services/T/B/X"
    notify = {
        "webhooks": [{"url": hook}, {"url": slack, "format": "slack"}],
        "events": ["blocked", "completed"],
    }
    async with tools(notifying_bridge) as mcp:
        result = await mcp.call_tool(tool, {field: "Write a guide", "notify": notify})
        refused = await error(
            mcp, tool, **{field: "x", "notify": {"webhooks": ["https://internal.example/h"]}}
        )
    _, path, body = notifying_bridge.requests[0]
    assert path in ("/runs", "/graphs"), result.content
    assert body["notify"] == {
        "webhooks": [{"url": hook, "format": "json"}, {"url": slack, "format": "slack"}],
        "events": ["blocked", "completed"],
    }
    plan = fake.starts[0]["params"].notify
    assert [w.format.value for w in plan.webhooks] == ["json", "slack"]
    assert [e.value for e in plan.events] == ["blocked", "completed"]
    assert "HTTP 422" in refused and "LOOPS_ALLOWED_ORIGINS" in refused, refused
    assert len(fake.starts) == 1
