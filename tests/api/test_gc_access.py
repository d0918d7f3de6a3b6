"""Who may run the gc (`POST /gc`): an admin token's (LOOPS_API_ADMIN_TOKENS, or a
`name:token:admin` line of the tokens file), or anyone where access is open (loopback, no
tokens: the operator's own); never a run token's or a read token's, refused before
Temporal is asked. Pins take a token that may write."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from temporalio.client import Client

from loopworks.api import tokens
from loopworks.api.main import create_app
from loopworks.schemas.retention import GcReport, RetentionInput, RetentionPolicy
from loopworks.schemas.settings import Settings

pytestmark = pytest.mark.unit

RUNS = "alice:alice-token-0123456789"
READS = "watcher:watch-token-0123456789"
ADMINS = "ops:ops-token-0123456789ab"


class GcOnly:
    """A Temporal client that can start the gc's workflow and nothing else."""

    def __init__(self) -> None:
        self.started: list[tuple[Any, dict[str, Any]]] = []

    async def start_workflow(self, _run: Any, params: Any, **options: Any) -> Any:
        self.started.append((params, options))
        report = GcReport(dry_run=params.dry_run, policy=RetentionPolicy(days=0))

        class Handle:
            async def result(self) -> GcReport:
                return report

        return Handle()

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the gc route asked Temporal for {name}")


def _settings(**values: Any) -> Settings:
    return Settings(**values)


async def _client(settings: Settings, fake: GcOnly) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings, client=cast(Client, fake))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        yield client


@pytest.fixture
def fake() -> GcOnly:
    return GcOnly()


@pytest.fixture
async def api(fake: GcOnly) -> AsyncIterator[httpx.AsyncClient]:
    settings = _settings(
        LOOPS_API_TOKENS=RUNS, LOOPS_API_READ_TOKENS=READS, LOOPS_API_ADMIN_TOKENS=ADMINS
    )
    async for client in _client(settings, fake):
        yield client


def _bearer(entry: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {entry.split(':', 1)[1]}"}


@pytest.mark.parametrize("entry", [RUNS, READS], ids=["run-token", "read-token"])
async def test_only_an_admin_token_runs_the_gc(
    api: httpx.AsyncClient, fake: GcOnly, entry: str
) -> None:
    refused = await api.post("/gc", json={"dry_run": True}, headers=_bearer(entry))
    assert refused.status_code == 403, refused.text
    assert fake.started == []
    assert (await api.post("/gc", json={"dry_run": True})).status_code == 401

    served = await api.post("/gc", json={"dry_run": True}, headers=_bearer(ADMINS))
    assert served.status_code == 200, served.text
    assert GcReport.model_validate(served.json()).dry_run
    [(params, options)] = fake.started
    assert params == RetentionInput(dry_run=True)
    assert options["id"].startswith("retention/loopworks/")
    assert "asked by ops" in options["static_summary"]


async def test_an_admin_token_may_do_what_a_run_token_does(api: httpx.AsyncClient) -> None:
    """Admin adds to a token; it takes nothing away (here: past the token check of a
    change, to the request's own validation)."""
    response = await api.post("/runs", json={}, headers=_bearer(ADMINS))
    assert response.status_code == 422, response.text


async def test_open_access_is_the_operators_and_may_run_the_gc(fake: GcOnly) -> None:
    async for client in _client(_settings(), fake):
        served = await client.post("/gc", json={"dry_run": False, "branches": True})
        assert served.status_code == 200, served.text
    [(params, _)] = fake.started
    assert params == RetentionInput(dry_run=False, branches=True)


async def test_a_gc_request_names_only_what_it_may(api: httpx.AsyncClient) -> None:
    response = await api.post("/gc", json={"dry_run": True, "days": 0}, headers=_bearer(ADMINS))
    assert response.status_code == 422, response.text


def test_admin_tokens_come_from_their_variable_and_the_file(tmp_path: Path) -> None:
    listed = tmp_path / "tokens"
    listed.write_text(
        "carol:carol-token-0123456789:admin\ndave:dave-token-0123456789:read\n"
        "erin:erin-token-0123456789\n"
    )
    settings = _settings(
        LOOPS_API_ADMIN_TOKENS="ops:ops-token-0123456789ab,bare-admin-token-0123",
        LOOPS_API_TOKENS_FILE=listed,
    )
    found = {token.name: (token.read_only, token.admin) for token in tokens.load(settings)}
    assert found == {
        "ops": (False, True),
        "admin-token-2": (False, True),
        "carol": (False, True),
        "dave": (True, False),
        "erin": (False, False),
    }
