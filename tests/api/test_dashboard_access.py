"""The dashboard's access (docs/dashboard.md#access): sign-in exchanges a token for a
session cookie that never holds it; the JSON routes take that cookie, and a change sent
with it only with the session's CSRF header; a read-only session reads; pages carry a
Content-Security-Policy that runs no inline script. Against the app with a fake Temporal.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any, cast

import httpx
import pytest
from temporalio.client import Client

from loopworks.api import sessions, tokens
from loopworks.api.dashboard import render
from loopworks.api.dashboard.access import local_path
from loopworks.api.main import create_app
from loopworks.schemas.settings import Settings
from tests.api.fake_temporal import FakeClient

pytestmark = pytest.mark.unit

WRITER = "writer-s3cret-0123456789"
READER = "reader-s3cret-0123456789"
RUN = "fake-20250101-000000-abcdef"
BASE = "http://localhost"


def _app(client: FakeClient, writer: str = WRITER) -> Any:
    settings = Settings(LOOPS_API_TOKENS=f"alice:{writer}", LOOPS_API_READ_TOKENS=f"bob:{READER}")
    return create_app(settings, client=cast(Client, client))


async def _http(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=BASE) as client:
        yield client


@pytest.fixture
def fake() -> FakeClient:
    return FakeClient()


@pytest.fixture
async def http(fake: FakeClient) -> AsyncIterator[httpx.AsyncClient]:
    async for client in _http(_app(fake)):
        yield client


async def sign_in(http: httpx.AsyncClient, token: str) -> str:
    response = await http.post("/ui/session", json={"token": token})
    assert response.status_code == 204, response.text
    cookie = http.cookies[sessions.COOKIE]
    assert isinstance(cookie, str)
    return cookie


def csrf_of(cookie: str, secret: str, name: str) -> str:
    return sessions.Session(tokens.ApiToken(name, secret), cookie).csrf


async def test_a_page_without_a_session_sends_the_browser_to_sign_in(
    http: httpx.AsyncClient,
) -> None:
    response = await http.get("/ui/runs?status=running")
    assert response.status_code == 303
    assert response.headers["location"] == "/ui/sign-in?next=/ui/runs%3Fstatus%3Drunning"
    page = await http.get("/ui/sign-in", params={"next": "/ui/runs"})
    assert page.status_code == 200 and "API token" in page.text


async def test_sign_in_sets_a_strict_http_only_cookie_that_does_not_hold_the_token(
    http: httpx.AsyncClient,
) -> None:
    response = await http.post("/ui/session", json={"token": WRITER})
    assert response.status_code == 204, response.text
    header = response.headers["set-cookie"]
    assert "HttpOnly" in header and "SameSite=strict" in header and "Path=/" in header
    assert WRITER not in header
    assert f"Max-Age={sessions.LIFETIME_SECONDS}" in header
    page = await http.get("/ui/runs")
    assert page.status_code == 200, page.text
    assert "alice" in page.text and 'name="loops-csrf" content="' in page.text


async def test_a_wrong_token_signs_nobody_in(http: httpx.AsyncClient) -> None:
    response = await http.post("/ui/session", json={"token": WRITER + "x"})
    assert response.status_code == 401
    assert sessions.COOKIE not in http.cookies
    # Its answer is for the sign-in page's script, which shows `detail` (it showed an
    # error page's HTML), with the challenge a 401 carries.
    assert response.json()["detail"] == "that is not a token of this API"
    assert response.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize(
    "headers",
    [{"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"}, {"Origin": "https://evil"}],
    ids=["cross-site", "same-site", "foreign-origin"],
)
async def test_another_site_cannot_sign_a_browser_in(
    http: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    response = await http.post("/ui/session", json={"token": WRITER}, headers=headers)
    assert response.status_code == 403, response.text
    assert sessions.COOKIE not in http.cookies


@pytest.mark.parametrize(
    ("host", "origin", "trusted"),
    [
        ("loops.example.com", "https://loops.example.com", None),  # a proxy ends TLS
        ("api:8000", "https://loops.example.com", "https://loops.example.com"),  # and Host
    ],
    ids=["tls-ended-at-a-proxy", "host-rewritten-origin-trusted"],
)
async def test_sign_in_works_behind_a_proxy_as_every_change_does(
    fake: FakeClient, host: str, origin: str, trusted: str | None
) -> None:
    """Signing in compared Origin with the URL the API saw (http://api:8000): behind the
    proxy SECURITY.md recommends, nobody could sign in, while every other change passed."""
    settings = Settings(
        LOOPS_API_TOKENS=f"alice:{WRITER}",
        LOOPS_API_ALLOWED_HOSTS=host.split(":")[0],
        LOOPS_API_TRUSTED_ORIGINS=trusted,
    )
    app = create_app(settings, client=cast(Client, fake))
    async for http in _http(app):
        response = await http.post(
            "/ui/session", json={"token": WRITER}, headers={"Host": host, "Origin": origin}
        )
        assert response.status_code == 204, response.text
        # The page was https, though the API saw http: the cookie only goes back there.
        assert "secure" in response.headers["set-cookie"].lower()
        foreign = await http.post(
            "/ui/session", json={"token": WRITER}, headers={"Host": host, "Origin": "https://evil"}
        )
        assert foreign.status_code == 403, foreign.text


async def test_the_sign_in_form_never_sends_the_token_in_a_url(http: httpx.AsyncClient) -> None:
    """Submitted before its script ran (or with scripts off) the form fell back to GET,
    and the token went into the address bar, the history and the access log."""
    page = await http.get("/ui/sign-in")
    form = re.search(r"<form[^>]*data-sign-in[^>]*>", page.text)
    assert form is not None, page.text
    assert 'method="post"' in form.group(0)


async def test_a_change_with_the_session_needs_its_csrf_header(
    http: httpx.AsyncClient, fake: FakeClient
) -> None:
    cookie = await sign_in(http, WRITER)
    assert (await http.get("/runs")).status_code == 200
    refused = await http.post(f"/runs/{RUN}/pause", json={})
    assert refused.status_code == 403, refused.text
    assert sessions.CSRF_HEADER in refused.json()["detail"]
    wrong = await http.post(f"/runs/{RUN}/pause", json={}, headers={sessions.CSRF_HEADER: "0" * 64})
    assert wrong.status_code == 403
    assert fake.handle(RUN).updates == []
    csrf = csrf_of(cookie, WRITER, "alice")
    served = await http.post(f"/runs/{RUN}/pause", json={}, headers={sessions.CSRF_HEADER: csrf})
    assert served.status_code == 200, served.text


async def test_a_read_only_session_reads_and_may_change_nothing(
    http: httpx.AsyncClient, fake: FakeClient
) -> None:
    cookie = await sign_in(http, READER)
    page = await http.get("/ui/runs")
    assert "bob (read only)" in page.text and "data-start-run" not in page.text
    csrf = csrf_of(cookie, READER, "bob")
    for path in (f"/runs/{RUN}/pause", f"/runs/{RUN}/approve", "/runs"):
        body = {"task": "t"} if path == "/runs" else {}
        refused = await http.post(path, json=body, headers={sessions.CSRF_HEADER: csrf})
        assert refused.status_code == 403, (path, refused.text)
        assert "read-only" in refused.json()["detail"]
    assert fake.handle(RUN).updates == [] and fake.starts == []


@pytest.mark.parametrize("tamper", ["name", "expiry", "mac"])
async def test_a_tampered_session_is_no_session(http: httpx.AsyncClient, tamper: str) -> None:
    cookie = await sign_in(http, READER)
    name, expires, mac = cookie.rsplit(".", 2)
    forged = {
        "name": f"alice.{expires}.{mac}",
        "expiry": f"{name}.{int(expires) + 3600}.{mac}",
        "mac": f"{name}.{expires}.{'0' * len(mac)}",
    }[tamper]
    http.cookies.set(sessions.COOKIE, forged)
    assert (await http.get("/runs")).status_code == 401
    assert (await http.get("/ui/runs")).status_code == 303


def test_a_session_ends_when_it_expires() -> None:
    token = tokens.ApiToken("alice", WRITER)
    cookie = sessions.issue(token, now=1_000)
    assert sessions.verify(cookie, [token], now=1_000 + sessions.LIFETIME_SECONDS - 1)
    assert sessions.verify(cookie, [token], now=1_000 + sessions.LIFETIME_SECONDS) is None


async def test_a_session_ends_when_its_token_is_removed(fake: FakeClient) -> None:
    async for before in _http(_app(fake)):
        cookie = await sign_in(before, WRITER)
    async for after in _http(_app(fake, writer="a-new-s3cret-0123456789")):
        after.cookies.set(sessions.COOKIE, cookie)
        assert (await after.get("/runs")).status_code == 401
        assert (await after.get("/ui/runs")).status_code == 303


async def test_pages_forbid_inline_scripts_and_frames(http: httpx.AsyncClient) -> None:
    await sign_in(http, WRITER)
    response = await http.get("/ui/runs")
    policy = response.headers["content-security-policy"]
    directives = dict(part.strip().split(" ", 1) for part in policy.split(";"))
    assert directives["script-src"] == "'self'" and directives["style-src"] == "'self'"
    assert directives["default-src"] == "'none'" and directives["frame-ancestors"] == "'none'"
    assert "unsafe" not in policy
    assert response.headers["cache-control"] == "no-store"
    # The one script is ours, by URL; no element carries a handler.
    assert re.findall(r"<script[^>]*>", response.text) == [
        f'<script src="{render.ENVIRONMENT.globals["static"]["script"]}" defer>'
    ]
    assert not re.search(r"\son[a-z]+\s*=", response.text)


async def test_the_script_and_stylesheet_are_served_and_nothing_else(
    http: httpx.AsyncClient,
) -> None:
    script = await http.get("/ui/static/dashboard.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith(
        "text/javascript"
    )
    assert (await http.get("/ui/static/dashboard.css")).status_code == 200
    for name in ("../render.py", "render.py", "%2e%2e%2fsessions.py"):
        assert (await http.get(f"/ui/static/{name}")).status_code == 404


async def test_an_unknown_run_is_a_page_saying_so(http: httpx.AsyncClient) -> None:
    await sign_in(http, WRITER)
    response = await http.get("/ui/runs/no..such-run")
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("text/html")
    assert "run no..such-run not found" in response.text


async def test_an_error_page_quotes_no_secret(http: httpx.AsyncClient) -> None:
    """The page quotes the id asked for, as the JSON error does; both are redacted."""
    await sign_in(http, WRITER)
    response = await http.get(f"/ui/runs/x..{READER}")
    assert response.status_code == 404
    assert READER not in response.text and "[REDACTED]" in response.text


@pytest.mark.parametrize(
    ("asked", "sent_to"),
    [
        ("/ui/runs/x", "/ui/runs/x"),
        ("//evil.example/ui/", "/ui/runs"),
        ("https://evil.example/ui/runs", "/ui/runs"),
        ("/docs", "/ui/runs"),
        ("/ui/\\evil", "/ui/runs"),
    ],
)
def test_sign_in_sends_a_browser_on_only_to_a_dashboard_page(asked: str, sent_to: str) -> None:
    path, _, query = asked.partition("?")
    assert local_path(path, query) == sent_to


async def test_with_no_tokens_pages_are_open_as_the_routes_are(fake: FakeClient) -> None:
    async for http in _http(create_app(Settings(), client=cast(Client, fake))):
        page = await http.get("/ui/runs")
        assert page.status_code == 200, page.text
        assert "open access (loopback)" in page.text and "data-start-run" in page.text
        assert (await http.get("/ui/sign-in")).headers["location"] == "/ui/runs"
