"""With Temporal down the process stays up: liveness 200, readiness and run routes 503;
with Temporal turning requests away, 429 to try again."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from temporalio.service import RPCError, RPCStatusCode

from loopworks.api.main import create_app
from loopworks.schemas.settings import Settings
from tests.api.fake_temporal import FakeClient, FakeHandle

pytestmark = pytest.mark.unit


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def api() -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(Settings(TEMPORAL_ADDRESS=f"127.0.0.1:{_closed_port()}"))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        yield client


async def test_liveness_and_readiness(api: httpx.AsyncClient) -> None:
    assert (await api.get("/healthz")).status_code == 200
    ready = await api.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["detail"] == "Temporal is unreachable"


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/runs"), ("GET", "/runs"), ("GET", "/runs/some-run-20250101-000000-abcdef")],
)
async def test_run_routes_are_503(api: httpx.AsyncClient, method: str, path: str) -> None:
    response = await api.request(method, path, json={"task": "t"} if method == "POST" else None)
    assert response.status_code == 503, response.text
    assert response.json() == {"detail": "Temporal is unreachable"}


async def test_bad_input_is_still_422(api: httpx.AsyncClient) -> None:
    response = await api.post("/runs", json={"task": "t", "max_iterations": 0})
    assert response.status_code == 422


# Temporal up but turning requests away (RESOURCE_EXHAUSTED): a run's query buffer full
# while it works through a task, or a namespace's rate limit. A 429 to try again soon,
# not a 503 asking whether a worker is running.
BUSY = RPCError("consistent query buffer is full", RPCStatusCode.RESOURCE_EXHAUSTED, b"")
RUN = "busy-20250101-000000-abcdef"


class BusyHandle(FakeHandle):
    async def query(self, query: Any, *args: Any, **_: Any) -> Any:
        raise BUSY


class BusyClient(FakeClient):
    async def start_workflow(self, *_: Any, **__: Any) -> None:
        raise BUSY


@pytest.fixture
async def busy() -> AsyncIterator[httpx.AsyncClient]:
    fake = BusyClient()
    fake.handles[RUN] = BusyHandle(RUN)
    app = create_app(Settings(), client=fake.as_client())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        yield client


@pytest.mark.parametrize(
    ("path", "query"), [(f"/runs/{RUN}", "status"), (f"/runs/{RUN}/events", "events")]
)
async def test_a_query_turned_away_is_429_to_retry(
    busy: httpx.AsyncClient, path: str, query: str
) -> None:
    response = await busy.get(path)
    assert response.status_code == 429, response.text
    assert response.headers["retry-after"] == "1"
    detail = response.json()["detail"]
    assert f"the {query} query of run {RUN}" in detail and "try again" in detail
    assert "worker" not in detail


async def test_a_start_turned_away_is_429_to_retry(busy: httpx.AsyncClient) -> None:
    response = await busy.post("/runs", json={"task": "t"})
    assert response.status_code == 429, response.text
    assert response.headers["retry-after"] == "1"
