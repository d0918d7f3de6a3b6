"""A task graph's loops are runs too, with ids of three segments
(`<graph id>/<task id>/<attempt>`): every run route takes them whole, and no run route
is shadowed by another that takes more of the path."""

from __future__ import annotations

import re
from typing import Any, cast

import httpx
import pytest
from temporalio.client import Client

from loopworks.api.deps import RUN_ID, RunIdConvertor
from loopworks.api.main import create_app
from loopworks.schemas.graph import task_loop_id
from loopworks.schemas.settings import Settings
from tests.api.fake_temporal import FakeClient

pytestmark = pytest.mark.unit

TASK_LOOP = task_loop_id("graph-fix-add-20260101-000000-abcdef", "T-001-fix-1", 2)
BODIES: dict[str, Any] = {"clear-block": {"note": "reviewed"}}


def _run_routes() -> list[tuple[str, str]]:
    paths = create_app(Settings()).openapi()["paths"]
    return sorted(
        (method.upper(), path)
        for path, operations in paths.items()
        if path.startswith("/runs/{run_id}")
        for method in operations
    )


@pytest.mark.parametrize(("method", "path"), _run_routes(), ids=lambda x: str(x))
async def test_every_run_route_takes_a_task_loops_id(method: str, path: str) -> None:
    fake = FakeClient()
    app = create_app(Settings(), client=cast(Client, fake))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        url = path.replace("{run_id}", TASK_LOOP)
        body = BODIES.get(path.rsplit("/", 1)[-1], {} if method == "POST" else None)
        response = await http.request(method, url, json=body)
    assert response.json() != {"detail": "Not Found"}, url  # the router found the route
    assert list(fake.handles) == [TASK_LOOP], response.text  # and asked for the whole id


@pytest.mark.parametrize(
    "run_id",
    ["fake-20250101-000000-abcdef", TASK_LOOP, task_loop_id("g", "T-123", 10)],
)
def test_run_ids_and_task_loop_ids_are_run_ids(run_id: str) -> None:
    assert RUN_ID.fullmatch(run_id)


@pytest.mark.parametrize(
    "path",
    ["a/events", "a/b/c", "g/T-001", "g/T-001/0", "g/T-1/1", "g/T-001/1/x", "g/../T-001/1"],
)
def test_no_other_path_is_a_run_id(path: str) -> None:
    assert not RUN_ID.fullmatch(path)


@pytest.mark.parametrize("path", ["a/events", "a/workspace", "g/T-001/1/stop", "a/b/c"])
def test_a_route_with_more_path_is_not_shadowed(path: str) -> None:
    """`GET /runs/{run_id}` must not take `/runs/a/events` as run `a/events`."""
    assert not re.fullmatch(RunIdConvertor.regex, path)
