"""LOOPS_API_TOKENS: every run route needs a bearer token; health and docs never do."""

from __future__ import annotations

import hmac
import logging
from collections.abc import AsyncIterator
from typing import Any, cast

import httpx
import pytest
from temporalio.client import Client

import loopworks.api.__main__ as api_main
from loopworks.api import tokens
from loopworks.api.main import create_app
from loopworks.api.security import exposed_without_tokens, is_loopback
from loopworks.schemas.settings import Settings
from tests.api.fake_temporal import FakeClient, event

pytestmark = pytest.mark.unit

TOKENS = ("s3cret-one-0123456789", "s3cret-two-0123456789")
# A token as long as a token must be (api/tokens.py, MIN_TOKEN_CHARS).
LONG = "t-0123456789abcdef"
RUN = "fake-20250101-000000-abcdef"
FINISHED = "done-20250101-000000-abcdef"

# Routes under /runs with a request each serves when the token is right. Refusals are
# checked on every declared route (DECLARED below), not only on these.
ROUTES: list[tuple[str, str, dict[str, Any] | None, int]] = [
    ("POST", "/runs", {"task": "t", "audit_probability": 0}, 201),
    ("GET", "/runs", None, 200),
    ("GET", f"/runs/{RUN}", None, 200),
    ("GET", f"/runs/{RUN}/events", None, 200),
    ("GET", f"/runs/{FINISHED}/events?follow=1", None, 200),
    ("GET", f"/runs/{RUN}/artifact", None, 404),  # served: "no artifact yet"
    ("GET", f"/runs/{RUN}/trajectory", None, 404),  # served: "no trajectory yet"
    ("POST", f"/runs/{RUN}/stop", {"reason": "r"}, 202),
    ("POST", f"/runs/{RUN}/clear-block", {"note": "n"}, 200),
    ("POST", f"/runs/{RUN}/pause", {}, 200),
    ("POST", f"/runs/{RUN}/resume", {}, 200),
    ("POST", f"/runs/{RUN}/approve", {"max_iterations": 2}, 200),
]
ROUTE_IDS = [f"{method} {path}" for method, path, _, _ in ROUTES]
# Listed above while another change adds it; skipped where it does not exist yet.
TOLERATED = {("GET", "/runs/{run_id}/trajectory")}


class _NoTemporal:
    """Fails the test if a refused request got as far as Temporal."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"an unauthenticated request reached Temporal ({name})")


def _app(client: Any, tokens: str | None = ",".join(TOKENS)) -> Any:
    settings = Settings(LOOPS_API_TOKENS=tokens) if tokens is not None else Settings()
    return create_app(settings, client=cast(Client, client))


async def _http(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        yield client


@pytest.fixture
async def refusing() -> AsyncIterator[httpx.AsyncClient]:
    async for client in _http(_app(_NoTemporal())):
        yield client


@pytest.fixture
def fake() -> FakeClient:
    client = FakeClient()
    finished = client.handle(FINISHED)
    finished.events = [event(FINISHED, 1), event(FINISHED, 2)]
    finished.open_for = 0
    return client


@pytest.fixture
async def serving(fake: FakeClient) -> AsyncIterator[httpx.AsyncClient]:
    async for client in _http(_app(fake)):
        yield client


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _declared_run_routes() -> list[tuple[str, str]]:
    """Every route under /runs the app has (the schema lists them however routers are
    mounted), so a route added later is checked without touching this file."""
    paths = create_app(Settings()).openapi()["paths"]
    return sorted(
        (method.upper(), path.replace("{run_id}", RUN))
        for path, operations in paths.items()
        if path.startswith("/runs")
        for method in operations
    )


DECLARED = _declared_run_routes()
DECLARED_IDS = [f"{method} {path}" for method, path in DECLARED]


def _template(path: str) -> str:
    return path.split("?")[0].replace(RUN, "{run_id}").replace(FINISHED, "{run_id}")


def test_the_served_matrix_is_real() -> None:
    declared = {(method, _template(path)) for method, path in DECLARED}
    assert {(m, _template(p)) for m, p, _, _ in ROUTES} <= declared | TOLERATED
    assert ("POST", "/runs/{run_id}/approve") in declared


@pytest.mark.parametrize(("method", "path"), DECLARED, ids=DECLARED_IDS)
async def test_no_token_is_401(refusing: httpx.AsyncClient, method: str, path: str) -> None:
    body: dict[str, Any] | None = {} if method == "POST" else None
    response = await refusing.request(method, path, json=body)
    assert response.status_code == 401, response.text
    assert response.headers["www-authenticate"] == "Bearer"
    assert "Authorization: Bearer" in response.json()["detail"]


@pytest.mark.parametrize(
    "authorization",
    [
        "Bearer wrong",
        f"Bearer {TOKENS[0]}x",
        f"Bearer {TOKENS[0][:-1]}",
        f"Bearer {TOKENS[0]},{TOKENS[1]}",
        f"Basic {TOKENS[0]}",
        f"{TOKENS[0]}",
        "Bearer ",
        "Bearer élan",
    ],
    ids=["wrong", "longer", "prefix", "the-list", "basic", "no-scheme", "empty", "non-ascii"],
)
@pytest.mark.parametrize(("method", "path"), DECLARED, ids=DECLARED_IDS)
async def test_wrong_token_is_401(
    refusing: httpx.AsyncClient, method: str, path: str, authorization: str
) -> None:
    # Raw bytes: a non-ASCII token must be a 401, not an encoding error.
    headers = {b"Authorization": authorization.encode("utf-8")}
    body: dict[str, Any] | None = {} if method == "POST" else None
    response = await refusing.request(method, path, json=body, headers=headers)
    assert response.status_code == 401, response.text
    assert response.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize("token", TOKENS)
@pytest.mark.parametrize(("method", "path", "body", "served"), ROUTES, ids=ROUTE_IDS)
async def test_right_token_is_served(
    serving: httpx.AsyncClient, method: str, path: str, body: Any, served: int, token: str
) -> None:
    if (method, _template(path)) in TOLERATED - {(m, _template(p)) for m, p in DECLARED}:
        pytest.skip(f"{method} {_template(path)} is not in this build")
    response = await serving.request(method, path, json=body, headers=_bearer(token))
    assert response.status_code == served, response.text


async def test_followed_stream_with_a_token(serving: httpx.AsyncClient) -> None:
    response = await serving.get(
        f"/runs/{FINISHED}/events", params={"follow": 1}, headers=_bearer(TOKENS[1])
    )
    assert response.headers["content-type"].startswith("text/event-stream")
    assert "id: 1" in response.text and "id: 2" in response.text


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/runs", {"task": "t", "max_iterations": 0}, "body.max_iterations"),
        (f"/runs/{RUN}/approve", {"max_iterations": 0}, "body.max_iterations"),
        (f"/runs/{RUN}/clear-block", {"note": " "}, "body.note"),
    ],
)
async def test_right_token_bad_input_is_422(
    serving: httpx.AsyncClient, path: str, body: Any, field: str
) -> None:
    response = await serving.post(path, json=body, headers=_bearer(TOKENS[0]))
    assert response.status_code == 422, response.text
    assert field in response.json()["message"]


@pytest.mark.parametrize("path", ["/healthz", "/docs", "/openapi.json", "/redoc"])
async def test_health_and_docs_need_no_token(refusing: httpx.AsyncClient, path: str) -> None:
    response = await refusing.get(path)
    assert response.status_code == 200, response.text


async def test_readiness_needs_no_token(fake: FakeClient) -> None:
    async for http in _http(_app(fake)):
        # The fake has no gRPC service, so "not ready"; the point is: not 401.
        assert (await http.get("/readyz")).status_code == 503


async def test_without_tokens_every_route_is_open(fake: FakeClient) -> None:
    async for http in _http(_app(fake, tokens=None)):
        assert (await http.get("/runs")).status_code == 200
        assert (await http.post(f"/runs/{RUN}/pause", json={})).status_code == 200


async def test_blank_tokens_setting_means_open(fake: FakeClient) -> None:
    assert tokens.load(Settings(LOOPS_API_TOKENS=" , ")) == ()
    loaded = tokens.load(Settings(LOOPS_API_TOKENS=" a-0123456789abcdef ,,b-0123456789abcdef "))
    assert [token.secret for token in loaded] == ["a-0123456789abcdef", "b-0123456789abcdef"]
    async for http in _http(_app(fake, tokens=" , ")):
        assert (await http.get("/runs")).status_code == 200


async def test_openapi_declares_the_bearer_scheme(refusing: httpx.AsyncClient) -> None:
    spec = (await refusing.get("/openapi.json")).json()
    schemes = spec["components"]["securitySchemes"]
    assert [scheme["scheme"] for scheme in schemes.values()] == ["bearer"]
    for path, operations in spec["paths"].items():
        for operation in operations.values():
            if path.startswith(("/runs", "/graphs", "/playbooks", "/codec", "/gc")):
                assert operation["security"], path
                assert "401" in operation["responses"], path
            else:
                assert "security" not in operation, path


async def test_tokens_are_compared_in_constant_time(
    refusing: httpx.AsyncClient, fake: FakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(tokens.hmac, "compare_digest", spy)
    await refusing.get("/runs", headers=_bearer("guess"))
    assert calls == [(b"guess", token.encode()) for token in TOKENS]

    calls.clear()
    async for http in _http(_app(fake)):
        assert (await http.get("/runs", headers=_bearer(TOKENS[0]))).status_code == 200
    # No early exit on a match: the time taken does not say which token matched.
    assert calls == [(TOKENS[0].encode(), token.encode()) for token in TOKENS]


def test_token_matches() -> None:
    table = tokens.checked(
        [
            tokens.ApiToken("x", "a-0123456789abcdef"),
            tokens.ApiToken("y", "b-0123456789abcdef"),
            tokens.ApiToken("z", "ünï-0123456789abcdef"),
        ]
    )
    assert tokens.match("b-0123456789abcdef", table) == table[1]
    assert tokens.match("c-0123456789abcdef", table) is None
    assert tokens.match("", table) is None
    assert tokens.match("ünï-0123456789abcdef", table) == table[2]


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.5", False),
        ("api.example.com", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_exposed_without_tokens() -> None:
    assert exposed_without_tokens(Settings(LOOPS_API_HOST="0.0.0.0"))
    assert not exposed_without_tokens(Settings(LOOPS_API_HOST="0.0.0.0", LOOPS_API_TOKENS=LONG))
    assert not exposed_without_tokens(Settings(LOOPS_API_HOST="127.0.0.1"))


@pytest.mark.parametrize(
    ("env", "refused"),
    [
        ({"LOOPS_API_HOST": "0.0.0.0"}, True),
        ({"LOOPS_API_HOST": "0.0.0.0", "LOOPS_API_TOKENS": LONG}, False),
        ({"LOOPS_API_HOST": "127.0.0.1"}, False),
    ],
)
def test_start_refuses_when_exposed_without_tokens(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    env: dict[str, str],
    refused: bool,
) -> None:
    monkeypatch.delenv("LOOPS_API_TOKENS", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    served: list[str] = []
    monkeypatch.setattr(api_main.uvicorn, "run", lambda app, host, **_: served.append(host))
    with caplog.at_level(logging.WARNING, logger="loopworks.api"):
        code = api_main.main()
    assert (code, served) == ((2, []) if refused else (0, [env["LOOPS_API_HOST"]]))
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert bool(errors) is refused, errors
    if refused:
        assert errors[0].startswith("cannot start:") and "LOOPS_API_TOKENS" in errors[0]
