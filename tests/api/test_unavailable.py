"""With Temporal down the process stays up: liveness 200, readiness and run routes 503."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import httpx
import pytest

from loopworks.api.main import create_app
from loopworks.schemas.settings import Settings

pytestmark = pytest.mark.unit


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def api() -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(Settings(TEMPORAL_ADDRESS=f"127.0.0.1:{_closed_port()}"))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api.test") as client:
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
