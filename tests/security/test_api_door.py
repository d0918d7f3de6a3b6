"""Exploits against the API's door, over HTTP against the app with a stand-in Temporal:
a rebinding page's Host, a read-only token trying to change things, a run whose starter
goes unrecorded, and a client going past the operator's caps."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError, RPCStatusCode

from loopworks.api.main import create_app
from loopworks.schemas.loop import LoopInput
from loopworks.schemas.settings import Settings
from tests.api.fake_temporal import FakeClient, event

# Spelled out rather than imported, so the test also runs (and fails) on code without it.
LOOP_STARTED_BY = SearchAttributeKey.for_keyword("LoopStartedBy")

pytestmark = pytest.mark.unit

RUN = "fake-20250101-000000-abcdef"
FINISHED = "done-20250101-000000-abcdef"
WRITER, READER = "w-0123456789abcdef", "r-0123456789abcdef"
TOKENS = {"LOOPS_API_TOKENS": f"ci:{WRITER}", "LOOPS_API_READ_TOKENS": f"dash:{READER}"}


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def fake() -> FakeClient:
    client = FakeClient()
    finished = client.handle(FINISHED)
    finished.events = [event(FINISHED, 1), event(FINISHED, 2)]
    finished.open_for = 0
    return client


async def _http(
    fake: FakeClient, host: str = "localhost", **settings: Any
) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(Settings(**settings), client=fake.as_client())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=f"http://{host}") as client:
        yield client


# --- DNS rebinding: a page's own name as Host ------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/runs"), ("GET", "/runs"), ("GET", f"/runs/{RUN}"), ("POST", "/graphs")],
)
async def test_a_foreign_host_is_refused_before_anything_runs(
    fake: FakeClient, method: str, path: str
) -> None:
    """A page at evil.example, its name rebound to 127.0.0.1, talks to an open `loops up`
    API from the developer's browser: same origin for the browser, so only Host tells."""
    async for http in _http(fake):
        body = {"task": "t", "goal": "g"} if method == "POST" else None
        response = await http.request(
            method, path, json=body, headers={"Host": "evil.example:8000"}
        )
    assert response.status_code == 400, response.text
    assert "LOOPS_API_ALLOWED_HOSTS" in response.json()["detail"]
    assert fake.starts == [] and fake.counted == []


@pytest.mark.parametrize("host", ["localhost:8000", "127.0.0.1:8000", "[::1]:8000", "127.9.9.9"])
async def test_loopback_hosts_are_served(fake: FakeClient, host: str) -> None:
    async for http in _http(fake):
        response = await http.get("/runs", headers={"Host": host})
    assert response.status_code == 200, response.text


async def test_named_hosts_are_served(fake: FakeClient) -> None:
    async for http in _http(fake, host="api", LOOPS_API_ALLOWED_HOSTS="api,*.corp.example"):
        assert (await http.get("/runs")).status_code == 200
        assert (await http.get("/runs", headers={"Host": "loops.corp.example"})).status_code == 200
        assert (await http.get("/runs", headers={"Host": "corp.example.evil"})).status_code == 400


# --- read-only tokens ------------------------------------------------------------------

WRITES: list[tuple[str, str, dict[str, Any] | None]] = [
    ("POST", "/runs", {"task": "t"}),
    ("POST", f"/runs/{RUN}/stop", {"reason": "r"}),
    ("POST", f"/runs/{RUN}/pause", {}),
    ("POST", f"/runs/{RUN}/approve", {}),
    ("POST", f"/runs/{RUN}/clear-block", {"note": "n"}),
    ("DELETE", f"/runs/{FINISHED}/workspace", None),
    ("POST", "/graphs", {"goal": "g"}),
    ("POST", "/graphs/graph-x-20250101-000000-abcdef/stop", {}),
    ("POST", "/playbooks/p/rollback", {"version": 1}),
]


@pytest.mark.parametrize(("method", "path", "body"), WRITES, ids=[f"{m} {p}" for m, p, _ in WRITES])
async def test_a_read_only_token_cannot_change_anything(
    fake: FakeClient, method: str, path: str, body: dict[str, Any] | None
) -> None:
    async for http in _http(fake, **TOKENS):
        response = await http.request(method, path, json=body, headers=_bearer(READER))
    assert response.status_code == 403, response.text
    assert "read-only" in response.json()["detail"] and "'dash'" in response.json()["detail"]
    assert fake.starts == [] and fake.handle(RUN).updates == []


async def test_a_read_only_token_reads_and_follows(fake: FakeClient) -> None:
    async for http in _http(fake, **TOKENS):
        assert (await http.get("/runs", headers=_bearer(READER))).status_code == 200
        assert (await http.get(f"/runs/{RUN}", headers=_bearer(READER))).status_code == 200
        streamed = await http.get(
            f"/runs/{FINISHED}/events", params={"follow": 1}, headers=_bearer(READER)
        )
        assert streamed.headers["content-type"].startswith("text/event-stream")
        # The writer still writes.
        created = await http.post("/runs", json={"task": "t"}, headers=_bearer(WRITER))
        assert created.status_code == 201, created.text


# --- started_by --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "token", "name"),
    [
        (TOKENS, WRITER, "ci"),
        ({"LOOPS_API_TOKENS": "bare-0123456789abcdef"}, "bare-0123456789abcdef", "token-1"),
        ({}, None, "local"),
    ],
    ids=["named", "bare", "open"],
)
async def test_a_run_records_who_started_it(
    fake: FakeClient, settings: dict[str, str], token: str | None, name: str
) -> None:
    async for http in _http(fake, **settings):
        headers = _bearer(token) if token else {}
        assert (await http.post("/runs", json={"task": "t"}, headers=headers)).status_code == 201
        graph = await http.post("/graphs", json={"goal": "g"}, headers=headers)
        assert graph.status_code == 201, graph.text
    run, graph_start = fake.starts
    params: LoopInput = run["params"]
    assert params.started_by == name and params.first_memory().state.started_by == name
    assert run["search_attributes"].get(LOOP_STARTED_BY) == name
    assert graph_start["params"].started_by == name
    assert graph_start["params"].first_memory().state.started_by == name
    assert graph_start["search_attributes"].get(LOOP_STARTED_BY) == name


# --- quotas --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "counts", "setting"),
    [
        ("/runs", {"task": "t"}, {'LoopStartedBy = "ci"': 20}, "LOOPS_MAX_RUNS_PER_CLIENT"),
        ("/runs", {"task": "t"}, {"LoopWorkflow": 100}, "LOOPS_MAX_RUNS"),
        ("/graphs", {"goal": "g"}, {'LoopStartedBy = "ci"': 5}, "LOOPS_MAX_GRAPHS_PER_CLIENT"),
        ("/graphs", {"goal": "g"}, {"TaskGraphWorkflow": 20}, "LOOPS_MAX_GRAPHS"),
    ],
)
async def test_past_a_cap_is_429_naming_it(
    fake: FakeClient, path: str, body: dict[str, Any], counts: dict[str, int], setting: str
) -> None:
    fake.counts = counts
    async for http in _http(fake, **TOKENS):
        response = await http.post(path, json=body, headers=_bearer(WRITER))
    assert response.status_code == 429, response.text
    assert int(response.headers["retry-after"]) > 0
    assert setting in response.json()["detail"]
    assert fake.starts == []


async def test_under_the_caps_the_counts_are_asked_and_it_starts(fake: FakeClient) -> None:
    fake.counts = {'LoopStartedBy = "ci"': 19}
    async for http in _http(fake, **TOKENS):
        response = await http.post("/runs", json={"task": "t"}, headers=_bearer(WRITER))
    assert response.status_code == 201, response.text
    mine, everyone = fake.counted
    assert 'LoopStartedBy = "ci"' in mine and "LoopGraph IS NULL" in mine
    assert "LoopStartedBy" not in everyone and 'ExecutionStatus = "Running"' in everyone


async def test_too_many_rules_is_422_naming_the_setting(fake: FakeClient) -> None:
    rules = [{"id": f"r{n}", "description": f"rule {n}", "check": "it holds"} for n in range(3)]
    async for http in _http(fake, LOOPS_MAX_RULES="2"):
        response = await http.post("/runs", json={"task": "t", "rules": rules})
        approved = await http.post(f"/runs/{RUN}/approve", json={"rules": rules})
    for answer in (response, approved):
        assert answer.status_code == 422, answer.text
        assert "LOOPS_MAX_RULES" in answer.json()["message"]
    assert fake.starts == [] and fake.handle(RUN).updates == []


async def test_a_run_gets_the_default_budget_and_may_not_ask_for_more(fake: FakeClient) -> None:
    limits = {"LOOPS_RUN_BUDGET_TOKENS": "1000", "LOOPS_RUN_BUDGET_USD": "2"}
    async for http in _http(fake, **limits):
        assert (await http.post("/runs", json={"task": "t"})).status_code == 201
        less = {"task": "t", "budget": {"max_tokens": 500}}
        assert (await http.post("/runs", json=less)).status_code == 201
        more = await http.post("/runs", json={"task": "t", "budget": {"max_cost_usd": 3}})
        graph = await http.post("/graphs", json={"goal": "g"})
    assert more.status_code == 422 and "LOOPS_RUN_BUDGET_USD" in more.json()["message"]
    assert graph.status_code == 201
    default, smaller, graph_start = (start["params"].request.budget for start in fake.starts)
    assert (default.max_tokens, default.max_cost_usd) == (1000, 2.0)
    assert (smaller.max_tokens, smaller.max_cost_usd) == (500, 2.0)
    assert (graph_start.max_tokens, graph_start.max_cost_usd) == (1000, 2.0)


async def test_too_many_open_streams_is_429_naming_the_setting(fake: FakeClient) -> None:
    """A client holding streams open: each is a poll loop on the API and the worker."""
    fake.handle(RUN).events = [event(RUN, 1)]
    app = create_app(Settings(LOOPS_MAX_STREAMS_PER_CLIENT="1", **TOKENS), client=fake.as_client())
    slot = app.state.streams.take("ci")  # one stream of ci's already open
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://localhost"
    ) as http:
        refused = await http.get(
            f"/runs/{FINISHED}/events", params={"follow": 1}, headers=_bearer(WRITER)
        )
        other = await http.get(
            f"/runs/{FINISHED}/events", params={"follow": 1}, headers=_bearer(READER)
        )
        slot.release()
        again = await http.get(
            f"/runs/{FINISHED}/events", params={"follow": 1}, headers=_bearer(WRITER)
        )
    assert refused.status_code == 429, refused.text
    assert "LOOPS_MAX_STREAMS_PER_CLIENT" in refused.json()["detail"]
    assert int(refused.headers["retry-after"]) > 0
    assert other.status_code == 200 and again.status_code == 200
    # Every stream that ended gave its slot back.
    assert app.state.streams.open == {}


class CannotCount(FakeClient):
    async def count_workflows(self, query: str, **_: Any) -> Any:
        raise RPCError("unimplemented", RPCStatusCode.UNIMPLEMENTED, b"")


async def test_a_server_that_cannot_count_names_the_caps_to_turn_off() -> None:
    """Caps that cannot be counted do not silently stop holding."""
    fake = CannotCount()
    async for http in _http(fake):
        response = await http.post("/runs", json={"task": "t"})
    assert response.status_code == 502, response.text
    assert "LOOPS_MAX_RUNS_PER_CLIENT" in response.json()["detail"]
    assert fake.starts == []
