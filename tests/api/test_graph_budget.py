"""A graph's total budget at the door (docs/graphs.md#budget): the operator's applies when
a request names none, a request may ask for less, never more (a 422 naming the field and
the setting), and 0 is no limit; the graph's input carries what applies."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from loopworks.api.main import create_app
from loopworks.schemas.graph import GraphRequest
from loopworks.schemas.settings import Settings
from tests.api.fake_temporal import FakeClient

pytestmark = pytest.mark.unit

LIMITS = {
    "LOOPS_GRAPH_BUDGET_TOKENS": "100000",
    "LOOPS_GRAPH_BUDGET_USD": "20",
    "LOOPS_RUN_BUDGET_TOKENS": "5000",
    "LOOPS_RUN_BUDGET_USD": "2",
}


async def _http(fake: FakeClient, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(Settings(**settings), client=fake.as_client())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        yield client


def started(fake: FakeClient) -> list[GraphRequest]:
    return [start["params"].request for start in fake.starts]


async def test_a_graph_gets_the_operators_total_budget_and_may_ask_for_less() -> None:
    fake = FakeClient()
    async for http in _http(fake, **LIMITS):
        assert (await http.post("/graphs", json={"goal": "g"})).status_code == 201
        less = {"goal": "g", "total_budget": {"max_tokens": 30000}}
        assert (await http.post("/graphs", json=less)).status_code == 201
    default, smaller = started(fake)
    assert default.total_budget is not None and smaller.total_budget is not None
    assert default.total_budget.max_tokens == 100000
    assert default.total_budget.max_cost_usd == 20.0
    assert (smaller.total_budget.max_tokens, smaller.total_budget.max_cost_usd) == (30000, 20.0)
    # Each task loop's budget is still the run budget's, apart from the total.
    assert default.budget is not None and default.budget.max_tokens == 5000


@pytest.mark.parametrize(
    ("asked", "field", "setting"),
    [
        ({"max_tokens": 100001}, "total_budget.max_tokens", "LOOPS_GRAPH_BUDGET_TOKENS"),
        ({"max_cost_usd": 20.5}, "total_budget.max_cost_usd", "LOOPS_GRAPH_BUDGET_USD"),
    ],
)
async def test_a_total_budget_above_the_operators_is_refused_naming_the_setting(
    asked: dict[str, Any], field: str, setting: str
) -> None:
    fake = FakeClient()
    async for http in _http(fake, **LIMITS):
        answer = await http.post("/graphs", json={"goal": "g", "total_budget": asked})
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert setting in body["message"] and field in body["message"]
    assert fake.starts == []


async def test_no_operator_total_leaves_a_graph_unbounded_unless_it_asks() -> None:
    fake = FakeClient()
    unlimited = {"LOOPS_GRAPH_BUDGET_TOKENS": "0", "LOOPS_GRAPH_BUDGET_USD": "0"}
    async for http in _http(fake, **unlimited):
        assert (await http.post("/graphs", json={"goal": "g"})).status_code == 201
        asked = {"goal": "g", "total_budget": {"max_cost_usd": 1000}}
        assert (await http.post("/graphs", json=asked)).status_code == 201
    unbounded, chosen = started(fake)
    assert unbounded.total_budget is None
    assert chosen.total_budget is not None and chosen.total_budget.max_cost_usd == 1000
    assert chosen.total_budget.max_tokens is None
