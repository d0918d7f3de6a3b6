"""Finding: any web page could steer a `loops up` API. A cross-site, body-less `POST
/runs/{id}/pause` (a form, or `fetch` in `no-cors` mode: a *simple* request, which the
browser sends without asking) answered 200, and `POST /runs/{id}/stop` 202: the run went
from `awaiting_approval` to `stopped`.

Now every change refuses `Sec-Fetch-Site: cross-site` and an `Origin` other than the API's
own (or LOOPS_API_TRUSTED_ORIGINS'), and takes JSON only, which no browser sends to another
origin without a preflight the API never grants (api/same_origin.py)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from temporalio.client import Client

from loopworks.api.main import create_app
from loopworks.api.same_origin import own_origin, refusal
from loopworks.schemas.settings import Settings
from tests.api.fake_temporal import FakeClient
from tests.integration.stack import Stack, bare_remote

RUN = "fake-20250101-000000-abcdef"
GRAPH = "graph-x-20250101-000000-abcdef"
# What a browser adds to a request a page of evil.example sends to the API.
CROSS_SITE = {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}
# The bodies a page can send without a preflight: none, text, a form, multipart.
SIMPLE_BODIES: list[dict[str, Any]] = [
    {},
    {"content": b'{"reason": "x"}', "headers": {"Content-Type": "text/plain"}},
    {"content": b"reason=x", "headers": {"Content-Type": "application/x-www-form-urlencoded"}},
    {"files": {"reason": ("r", b"x")}},
]


class _NoTemporal:
    """Fails the test if a refused request got as far as Temporal."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"a refused request reached Temporal ({name})")


def _writes() -> list[tuple[str, str]]:
    """Every route that may change something, its path parameters filled in."""
    paths = create_app(Settings()).openapi()["paths"]
    found = []
    for path, operations in paths.items():
        for method in operations:
            if method.upper() not in ("GET", "HEAD", "OPTIONS"):
                filled = (
                    path.replace("{run_id}", RUN)
                    .replace("{graph_id}", GRAPH)
                    .replace("{name}", "notes")
                )
                found.append((method.upper(), filled))
    return sorted(found)


WRITES = _writes()
IDS = [f"{method} {path}" for method, path in WRITES]


async def _http(client: Any, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(Settings(**settings), client=cast(Client, client))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost:8000") as http:
        yield http


@pytest.mark.unit
def test_every_kind_of_change_is_covered() -> None:
    """The routes the finding named, and the rest, are all in the list checked below."""
    for route in ("pause", "resume", "stop", "approve", "clear-block"):
        assert ("POST", f"/runs/{RUN}/{route}") in WRITES
        assert ("POST", f"/graphs/{GRAPH}/{route}") in WRITES
    assert {("POST", "/runs"), ("POST", "/graphs"), ("DELETE", f"/runs/{RUN}/workspace")} <= set(
        WRITES
    )


@pytest.mark.unit
@pytest.mark.parametrize(("method", "path"), WRITES, ids=IDS)
@pytest.mark.parametrize(
    "headers",
    [
        CROSS_SITE,
        # An older browser: no Sec-Fetch-Site, only the page's Origin.
        {"Origin": "http://evil.example"},
        # A same-site page on another port (Sec-Fetch-Site ignores ports).
        {"Origin": "http://localhost:3000", "Sec-Fetch-Site": "same-site"},
        # A sandboxed iframe, a file:// page, a cross-origin redirect.
        {"Origin": "null"},
        # Sec-Fetch-Site alone says it all, whatever else is sent.
        {"Origin": "http://localhost:8000", "Sec-Fetch-Site": "cross-site"},
    ],
    ids=["cross-site", "origin", "same-site-other-port", "null-origin", "fetch-site-only"],
)
async def test_a_change_from_another_page_is_refused_before_anything_runs(
    method: str, path: str, headers: dict[str, str]
) -> None:
    async for http in _http(_NoTemporal()):
        response = await http.request(method, path, json={}, headers=headers)
    assert response.status_code == 403, response.text
    assert "may not change anything here" in response.json()["detail"]


@pytest.mark.unit
@pytest.mark.parametrize(
    ("method", "path"),
    [write for write in WRITES if write[0] == "POST"],
    ids=[f"{method} {path}" for method, path in WRITES if method == "POST"],
)
@pytest.mark.parametrize("simple", SIMPLE_BODIES, ids=["none", "text", "form", "multipart"])
async def test_a_simple_request_is_refused_even_without_origin_headers(
    method: str, path: str, simple: dict[str, Any]
) -> None:
    """A page sends these without a preflight; some browsers and proxies drop the
    Origin header, so the content type is refused on its own."""
    async for http in _http(_NoTemporal()):
        response = await http.request(method, path, **simple)
    assert response.status_code == 415, response.text
    assert "Content-Type: application/json" in response.json()["detail"]


@pytest.mark.unit
async def test_the_apis_own_pages_and_clients_without_a_browser_are_served() -> None:
    fake = FakeClient()
    async for http in _http(fake):
        # The CLI, curl, the MCP server: no Origin, no Sec-Fetch-Site, JSON.
        assert (await http.post(f"/runs/{RUN}/pause", json={})).status_code == 200
        # A page the API serves itself, sending fetch() with JSON.
        own = {"Origin": "http://localhost:8000", "Sec-Fetch-Site": "same-origin"}
        assert (await http.post(f"/runs/{RUN}/resume", json={}, headers=own)).status_code == 200
        charset = {"Content-Type": "application/json; charset=utf-8"}
        answer = await http.post(f"/runs/{RUN}/stop", content=b"{}", headers=charset)
        assert answer.status_code == 202, answer.text
        # Reads are not changes: a cross-site GET is answered (the page cannot read it).
        assert (await http.get("/runs", headers=CROSS_SITE)).status_code == 200
    assert fake.handle(RUN).updates == ["pause", "resume"]


@pytest.mark.unit
async def test_a_trusted_origin_may_send_changes_and_only_it() -> None:
    """A proxy serving the API's pages at https://loops.example.com hands the API another
    Host; the operator names that origin."""
    fake = FakeClient()
    trusted = {"LOOPS_API_TRUSTED_ORIGINS": "https://loops.example.com"}
    async for http in _http(fake, **trusted):
        proxied = {"Origin": "https://Loops.Example.com", "Sec-Fetch-Site": "same-origin"}
        assert (await http.post(f"/runs/{RUN}/pause", json={}, headers=proxied)).status_code == 200
        other = {"Origin": "https://other.example.com"}
        assert (await http.post(f"/runs/{RUN}/pause", json={}, headers=other)).status_code == 403
    assert fake.handle(RUN).updates == ["pause"]


@pytest.mark.unit
@pytest.mark.parametrize(("method", "path"), WRITES, ids=IDS)
async def test_no_preflight_is_ever_granted(method: str, path: str) -> None:
    """What a page must ask before it may send JSON, or DELETE, to another origin."""
    async for http in _http(_NoTemporal()):
        response = await http.options(
            path,
            headers={
                "Origin": "http://evil.example",
                "Access-Control-Request-Method": method,
                "Access-Control-Request-Headers": "content-type",
            },
        )
    assert response.status_code >= 400, response.text
    assert not [name for name in response.headers if name.lower().startswith("access-control-")]


@pytest.mark.unit
@pytest.mark.parametrize(
    ("origin", "host", "own"),
    [
        ("http://localhost:8000", "localhost:8000", True),
        ("http://127.0.0.1:8000", "127.0.0.1:8000", True),
        ("http://[::1]:8000", "[::1]:8000", True),
        ("https://loops.example.com", "loops.example.com", True),
        ("https://loops.example.com", "loops.example.com:443", True),
        ("http://loops.example.com:80", "loops.example.com", True),
        ("http://localhost:3000", "localhost:8000", False),
        ("http://localhost", "localhost:8000", False),
        ("https://localhost:8000", "localhost:80", False),
        ("http://evil.example:8000", "localhost:8000", False),
        ("http://localhost.evil.example:8000", "localhost:8000", False),
        ("null", "localhost:8000", False),
        ("file://", "localhost:8000", False),
        ("http://localhost:8000/path", "localhost:8000", False),
        ("http://localhost:notaport", "localhost:8000", False),
    ],
)
def test_own_origin(origin: str, host: str, own: bool) -> None:
    assert own_origin(origin, host) is own


@pytest.mark.unit
def test_reads_are_never_refused_and_delete_needs_no_body() -> None:
    for method in ("GET", "HEAD", "OPTIONS"):
        assert refusal(method, {"sec-fetch-site": "cross-site"}) is None
    assert refusal("DELETE", {"host": "localhost:8000"}) is None
    assert refusal("POST", {"host": "localhost:8000"}) is not None


@pytest.mark.unit
@pytest.mark.parametrize(
    "value",
    ["loops.example.com", "ftp://loops.example.com", "https://x.example/path", "https://"],
)
def test_a_trusted_origin_must_be_a_web_origin(value: str) -> None:
    with pytest.raises(ValueError, match="LOOPS_API_TRUSTED_ORIGINS"):
        Settings(LOOPS_API_TRUSTED_ORIGINS=value)


# --- against the real processes --------------------------------------------------------


def _wait(check: Any, what: str, timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.25)
    raise AssertionError(f"{what} never happened")


@pytest.mark.integration
def test_a_page_of_another_site_cannot_steer_a_local_run(stack: Stack, tmp_path: Path) -> None:
    """The finding, as it was found: a `loops up`-like API (loopback, no tokens), a run
    awaiting approval, and what a page's forms and no-cors fetches send."""
    remote = bare_remote(tmp_path)
    stack.start_worker()
    _, base = stack.start_api()
    with httpx.Client(base_url=base, timeout=60) as http:
        body = {"task": "Write a haiku", "repo": str(remote), "mode": "interactive"}
        created = http.post("/runs", json={**body, "audit_probability": 0})
        assert created.status_code == 201, created.text
        run_id = created.json()["run_id"]
        _wait(
            lambda: http.get(f"/runs/{run_id}").json()["status"] == "awaiting_approval",
            "the run awaiting approval",
        )
        before = http.get(f"/runs/{run_id}/events").json()

        for action in ("pause", "stop", "approve", "clear-block", "resume"):
            for simple in SIMPLE_BODIES:
                headers = {**CROSS_SITE, **simple.get("headers", {})}
                sent = {**simple, "headers": headers}
                refused = http.post(f"/runs/{run_id}/{action}", **sent)
                assert refused.status_code == 403, (action, refused.text)
                # Some browsers and proxies drop Origin: the content type alone refuses it.
                bare = http.post(f"/runs/{run_id}/{action}", **simple)
                assert bare.status_code == 415, (action, bare.text)
            # JSON, were a page to get it through: the page's origin still refuses it.
            forged = http.post(f"/runs/{run_id}/{action}", json={}, headers=CROSS_SITE)
            assert forged.status_code == 403, (action, forged.text)

        state = http.get(f"/runs/{run_id}").json()
        assert state["status"] == "awaiting_approval", state
        assert http.get(f"/runs/{run_id}/events").json() == before

        # The user's own client still steers it.
        stopped = http.post(f"/runs/{run_id}/stop", json={"reason": "done looking"})
        assert stopped.status_code == 202, stopped.text
