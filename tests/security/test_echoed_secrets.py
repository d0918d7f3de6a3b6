"""Exploit: a client sends a secret where the API says it is wrong (a task too long, a
field it does not know): the 422 echoes part of what was sent, and must hold the secret
no more than any other answer does (docs/api.md#redaction)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import httpx
import pytest
from temporalio.client import Client

from loopworks.api.main import create_app
from loopworks.schemas.settings import Settings
from tests.api.test_validation import _NoTemporal

pytestmark = pytest.mark.unit

MODEL_KEY = "sk-ant-api03-" + "Qw4" * 16
URL_PASSWORD = "hunter2-" + "Pw9" * 6


@pytest.fixture
async def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[httpx.AsyncClient]:
    monkeypatch.setenv("ANTHROPIC_API_KEY", MODEL_KEY)
    app = create_app(Settings(LOOPS_DATA_DIR=tmp_path / "data"), client=cast(Client, _NoTemporal()))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        yield client


@pytest.mark.parametrize(
    "body",
    [
        # Too long: its first 300 characters come back.
        {"task": f"use {MODEL_KEY} and https://me:{URL_PASSWORD}@git.example/x.git " * 400},
        # A field no request has: its value comes back whole.
        {"task": "t", "credentials": f"{MODEL_KEY} https://me:{URL_PASSWORD}@git.example/x"},
    ],
)
async def test_a_422_echoes_no_secret(api: httpx.AsyncClient, body: dict[str, str]) -> None:
    response = await api.post("/runs", json=body)

    assert response.status_code == 422, response.text
    assert MODEL_KEY not in response.text
    assert URL_PASSWORD not in response.text
    assert "[REDACTED]" in response.text
