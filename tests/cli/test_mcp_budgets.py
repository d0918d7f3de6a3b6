"""`loops mcp` and budgets (docs/mcp.md#budgets): start_run and start_graph pass a run's,
each task loop's and the whole graph's budget to the real API app (over a fake Temporal),
a budget above the operator's cap is the API's 422 as the tool's error, and run_status /
graph_status show what was spent of what may be spent."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from fastapi.testclient import TestClient
from temporalio.client import Client as TemporalClient

from loopworks.api.main import create_app
from loopworks.cli.mcp.views import graph_view
from loopworks.schemas.graph import GraphState, GraphStatus
from loopworks.schemas.loop import LoopInput
from loopworks.schemas.run import Budget, RunRequest, RunState, TokenUsage
from loopworks.schemas.settings import Settings
from tests.api import fake_temporal
from tests.api.fake_temporal import FakeClient
from tests.cli.test_mcp_server import RUN_ID, Bridge, call, error, tools

pytestmark = pytest.mark.unit

USAGE = TokenUsage(input_tokens=1200, output_tokens=345, calls=7, cost_usd=0.0421)


@pytest.fixture
def capped(fake: FakeClient, tmp_path: Path) -> Iterator[Bridge]:
    """The app of a deployment whose operator caps runs and graphs."""
    settings = Settings(
        LOOPS_DATA_DIR=tmp_path / "data",
        LOOPS_RUN_BUDGET_TOKENS=1000,
        LOOPS_RUN_BUDGET_USD=2.0,
        LOOPS_GRAPH_BUDGET_TOKENS=5000,
        LOOPS_GRAPH_BUDGET_USD=10.0,
    )
    app = create_app(settings, client=cast(TemporalClient, fake))
    with TestClient(app, base_url="http://localhost") as http:
        yield Bridge(http)


@pytest.fixture
def fake() -> FakeClient:
    return FakeClient()


async def test_start_run_asks_for_a_budget(fake: FakeClient, capped: Bridge) -> None:
    async with tools(capped) as mcp:
        await call(mcp, "start_run", task="Write a guide", budget={"max_cost_usd": 0.5})
        refused = await error(mcp, "start_run", task="x", budget={"max_tokens": 1001})
    _, path, body = capped.requests[0]
    assert path == "/runs" and body["budget"] == {"max_cost_usd": 0.5}
    # The limit not asked for is the operator's.
    assert fake.starts[0]["params"].request.budget == Budget(max_tokens=1000, max_cost_usd=0.5)
    assert "HTTP 422" in refused and "budget.max_tokens" in refused, refused
    assert "LOOPS_RUN_BUDGET_TOKENS" in refused, refused
    assert len(fake.starts) == 1


async def test_start_graph_asks_for_each_loops_and_the_total_budget(
    fake: FakeClient, capped: Bridge
) -> None:
    async with tools(capped) as mcp:
        # Its answer (the graph's state) is more than the fake Temporal can give.
        await mcp.call_tool(
            "start_graph",
            {
                "goal": "A goal",
                "budget": {"max_tokens": 900},
                "total_budget": {"max_tokens": 4000, "max_cost_usd": 7.25},
            },
        )
        refused = await error(mcp, "start_graph", goal="g", total_budget={"max_cost_usd": 11})
    _, path, body = capped.requests[0]
    assert path == "/graphs"
    assert body["budget"] == {"max_tokens": 900}
    assert body["total_budget"] == {"max_tokens": 4000, "max_cost_usd": 7.25}
    request = fake.starts[0]["params"].request
    assert request.budget == Budget(max_tokens=900, max_cost_usd=2.0)
    assert request.total_budget == Budget(max_tokens=4000, max_cost_usd=7.25)
    assert "HTTP 422" in refused and "total_budget.max_cost_usd" in refused, refused
    assert "LOOPS_GRAPH_BUDGET_USD" in refused, refused
    assert len(fake.starts) == 1


async def test_a_budget_outside_the_schema_is_refused_before_the_api(capped: Bridge) -> None:
    async with tools(capped) as mcp:
        for budget in ({"max_tokens": 0}, {"max_cost_usd": -1}, {"tokens": 5}):
            answer = await error(mcp, "start_run", task="x", budget=budget)
            assert "budget" in answer, answer
    assert capped.requests == []


async def test_run_status_shows_usage_and_budget(
    capped: Bridge, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = fake_temporal.run_state

    def spending(run_id: str) -> RunState:
        budget = Budget(max_tokens=5000, max_cost_usd=1.0)
        return plain(run_id).model_copy(update={"usage": USAGE, "budget": budget})

    monkeypatch.setattr(fake_temporal, "run_state", spending)
    async with tools(capped) as mcp:
        view = await call(mcp, "run_status", run_id=RUN_ID)
    assert view["usage"] == {"total_tokens": 1545, "cost_usd": 0.0421, "calls": 7}
    assert view["budget"] == {"max_tokens": 5000, "max_cost_usd": 1.0}


def test_a_run_started_with_a_budget_carries_it_in_its_state() -> None:
    budget = Budget(max_tokens=800, max_cost_usd=1.5)
    params = LoopInput(
        run_id="r-20250101-000000-abcdef",
        alias="r",
        request=RunRequest(task="t", budget=budget),
        created_at="2025-01-01T00:00:00+00:00",
    )
    assert params.first_memory().state.budget == budget


def test_graph_status_shows_what_the_graph_spent_of_its_total() -> None:
    state = GraphState(
        graph_id="graph-g-20250101-000000-abcdef",
        goal="A goal",
        status=GraphStatus.RUNNING,
        total_budget=Budget(max_tokens=50_000, max_cost_usd=2.0),
        usage=USAGE,
    )
    view = graph_view(state, set()).model_dump(mode="json")
    assert view["usage"] == {"total_tokens": 1545, "cost_usd": 0.0421, "calls": 7}
    assert view["total_budget"] == {"max_tokens": 50_000, "max_cost_usd": 2.0}
    unlimited = graph_view(state.model_copy(update={"total_budget": None}), set())
    assert unlimited.total_budget is None
