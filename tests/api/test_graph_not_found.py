"""A graph's routes say "graph" of an id that is no graph of theirs: a malformed id, or
one whose workflow is of another kind (here the fake's, a loop's)."""

from __future__ import annotations

from typing import cast

import httpx
import pytest
from temporalio.client import Client

from loopworks.api.main import create_app
from loopworks.schemas.settings import Settings
from tests.api.fake_temporal import FakeClient

pytestmark = pytest.mark.unit

A_RUN = "fake-20250101-000000-abcdef"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", f"/graphs/{A_RUN}"),
        ("GET", f"/graphs/{A_RUN}/ledger"),
        ("POST", f"/graphs/{A_RUN}/pause"),
        ("POST", f"/graphs/{A_RUN}/stop"),
        ("GET", "/graphs/no..such"),
    ],
)
async def test_a_graph_route_answers_404_naming_a_graph(method: str, path: str) -> None:
    app = create_app(Settings(), client=cast(Client, FakeClient()))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        response = await http.request(method, path, json={} if method == "POST" else None)
    assert response.status_code == 404, response.text
    detail = response.json()["detail"]
    assert detail.startswith("graph ") and detail.endswith(" not found"), detail
    assert "run" not in detail.split()[0]
