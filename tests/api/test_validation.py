"""Bad input is a 422 naming the field, decided before the API touches Temporal."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from temporalio.client import Client

from loopworks.api.launch import new_run_id
from loopworks.api.main import create_app
from loopworks.prompts.catalog import template_ids
from loopworks.schemas.settings import Settings
from tests.integration.stack import bare_remote

pytestmark = pytest.mark.unit


class _NoTemporal:
    """Stands in for the Temporal client and fails the test if anything uses it."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the API used Temporal ({name}) while validating input")


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(LOOPS_DATA_DIR=tmp_path / "data")
    app = create_app(settings, client=cast(Client, _NoTemporal()))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        yield client


def _assert_names(response: httpx.Response, field: str) -> dict[str, Any]:
    assert response.status_code == 422, response.text
    body = response.json()
    dotted = [".".join(str(part) for part in error["loc"]) for error in body["detail"]]
    assert any(loc.startswith(field) for loc in dotted), (field, dotted)
    assert field in body["message"], body["message"]
    return cast(dict[str, Any], body)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        pytest.param({}, "body.task", id="missing-task"),
        pytest.param({"task": "   \n"}, "body.task", id="blank-task"),
        pytest.param({"task": "t", "max_iterations": 0}, "body.max_iterations", id="iterations-0"),
        pytest.param(
            {"task": "t", "max_iterations": 21}, "body.max_iterations", id="iterations-21"
        ),
        pytest.param(
            {"task": "t", "thresholds": {"A": 2.0}}, "body.thresholds.A", id="threshold-2"
        ),
        pytest.param({"task": "t", "thresholds": {"B": 0}}, "body.thresholds.B", id="threshold-0"),
        pytest.param({"task": "t", "thresholds": 0}, "body.thresholds", id="thresholds-not-object"),
        pytest.param({"task": "t", "template": "nope"}, "body.template", id="unknown-template"),
        pytest.param({"task": "t", "audit_probability": 1.5}, "body.audit_probability", id="audit"),
        pytest.param(
            {"task": "t", "tool_audit_probability": -0.1},
            "body.tool_audit_probability",
            id="tool-audit",
        ),
        pytest.param(
            {"task": "t", "audit_probability": "often"},
            "body.audit_probability",
            id="audit-not-number",
        ),
        pytest.param({"task": "t", "colour": "red"}, "body.colour", id="unknown-field"),
        pytest.param({"task": "t", "mode": "turbo"}, "body.mode", id="unknown-mode"),
    ],
)
async def test_bad_run_request_names_the_field(
    api: httpx.AsyncClient, body: dict[str, Any], field: str
) -> None:
    _assert_names(await api.post("/runs", json=body), field)


async def test_readable_message(api: httpx.AsyncClient) -> None:
    body = _assert_names(await api.post("/runs", json={"task": "t", "max_iterations": 0}), "body")
    assert body["message"] == ("body.max_iterations: Input should be greater than or equal to 1")


async def test_unknown_template_lists_the_valid_ids(api: httpx.AsyncClient) -> None:
    body = _assert_names(await api.post("/runs", json={"task": "t", "template": "nope"}), "body")
    for template in template_ids():
        assert template in body["message"]


async def test_malformed_json(api: httpx.AsyncClient) -> None:
    response = await api.post(
        "/runs", content=b'{"task": "t",', headers={"content-type": "application/json"}
    )
    body = _assert_names(response, "body")
    assert "malformed JSON" in body["message"]


async def test_wrong_content_type(api: httpx.AsyncClient) -> None:
    """A form a web page could post cross-site without asking: refused before it is read
    (api/same_origin.py)."""
    response = await api.post("/runs", content=b"task=t", headers={"content-type": "text/plain"})
    assert response.status_code == 415, response.text
    assert "Content-Type: application/json" in response.json()["detail"]
    assert "'text/plain'" in response.json()["detail"]


async def test_no_body(api: httpx.AsyncClient) -> None:
    json_body = {"Content-Type": "application/json"}
    _assert_names(await api.post("/runs", headers=json_body), "body")
    assert (await api.post("/runs")).status_code == 415


async def test_missing_local_repo(api: httpx.AsyncClient, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-repo"
    body = _assert_names(
        await api.post("/runs", json={"task": "t", "repo": str(missing)}), "body.repo"
    )
    assert str(missing) in body["message"]


@pytest.mark.parametrize("path", ["/runs", "/graphs"])
async def test_a_repo_in_an_unknown_users_home(api: httpx.AsyncClient, path: str) -> None:
    repo = "~no-such-user-0f3a/repo"
    body = {"task": "t", "repo": repo} if path == "/runs" else {"goal": "g", "repo": repo}
    checked = _assert_names(await api.post(path, json=body), "body.repo")
    assert repo in checked["message"]


@pytest.mark.parametrize("path", ["/runs", "/graphs"])
@pytest.mark.parametrize("branch", ["../main", "a..b", "has space", "x.lock", "x~1", "x:y"])
async def test_a_base_branch_git_would_refuse(
    api: httpx.AsyncClient, path: str, branch: str
) -> None:
    """Refused here, not inside the run after its git step's retries (about 15 s)."""
    base = {"task": "t"} if path == "/runs" else {"goal": "g"}
    checked = _assert_names(await api.post(path, json={**base, "base_branch": branch}), "body")
    assert f"{branch!r} is not a valid git branch name" in checked["message"]


@pytest.mark.parametrize("path", ["/runs", "/graphs", "/playbooks"])
async def test_a_relative_repo_path_is_refused_even_where_it_exists(
    api: httpx.AsyncClient, path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by hand: a relative path was resolved from the API's working directory, so
    `loops new --repo .` ran on the API's checkout (and pushed its branch there)."""
    bare_remote(tmp_path)  # tmp_path/remote.git, a real repository
    monkeypatch.chdir(tmp_path)  # the API's directory, where the path would resolve
    if path == "/playbooks":  # hand-written deltas for a playbook nobody wrote yet
        deltas = {"batch_id": "b-1", "source": "a person", "deltas": []}
        response = await api.post(
            "/playbooks/origin-0/deltas", params={"repo": "remote.git"}, json=deltas
        )
        field = "query.repo"
    else:
        base = {"task": "t"} if path == "/runs" else {"goal": "g"}
        response = await api.post(path, json={**base, "repo": "remote.git"})
        field = "body.repo"
    checked = _assert_names(response, field)
    assert "must be an absolute path, not 'remote.git'" in checked["message"]


@pytest.mark.parametrize("path", ["/runs", "/graphs"])
async def test_a_base_branch_a_local_repo_lacks(
    api: httpx.AsyncClient, path: str, tmp_path: Path
) -> None:
    origin = str(bare_remote(tmp_path))  # its one branch: main
    base = {"task": "t"} if path == "/runs" else {"goal": "g"}
    body = {**base, "repo": origin, "base_branch": "no-such"}
    checked = _assert_names(await api.post(path, json=body), "body.base_branch")
    assert f"branch 'no-such' does not exist in {origin}" in checked["message"]
    # The branch it has passes (to Temporal, which this API must not reach).
    with pytest.raises(AssertionError, match="used Temporal"):
        await api.post(path, json={**body, "base_branch": "refs/heads/main"})


async def test_local_repo_that_is_not_git(api: httpx.AsyncClient, tmp_path: Path) -> None:
    body = _assert_names(
        await api.post("/runs", json={"task": "t", "repo": str(tmp_path)}), "body.repo"
    )
    assert "not a git repository" in body["message"]


@pytest.mark.parametrize("limit", ["0", "501", "many"])
async def test_list_limit(api: httpx.AsyncClient, limit: str) -> None:
    _assert_names(await api.get("/runs", params={"limit": limit}), "query.limit")


async def test_list_status_must_be_a_run_status(api: httpx.AsyncClient) -> None:
    _assert_names(await api.get("/runs", params={"status": "sleepy"}), "query.status")


@pytest.mark.parametrize(
    "path",
    [
        "/runs/bad%20id",
        "/runs/-leading-dash",
        "/runs/has..dots",
        "/runs/" + "x" * 200,
        "/runs/%C3%A9t%C3%A9/events",
        "/runs/semi;colon/artifact",
    ],
)
async def test_impossible_run_ids_are_404(api: httpx.AsyncClient, path: str) -> None:
    response = await api.get(path)
    assert response.status_code == 404, response.text
    assert response.json()["detail"].startswith("run ")
    assert response.json()["detail"].endswith(" not found")
    stop = await api.post(path.split("/events")[0].split("/artifact")[0] + "/stop", json={})
    assert stop.status_code == 404


def test_run_id_shape() -> None:
    from datetime import UTC, datetime

    run_id = new_run_id("fix-the-docs", datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC))
    assert re.fullmatch(r"fix-the-docs-20250304-050607-[0-9a-f]{6}", run_id)


async def test_healthz_needs_no_temporal(api: httpx.AsyncClient) -> None:
    response = await api.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.fixture
async def small_api(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(LOOPS_DATA_DIR=tmp_path / "data", LOOPS_API_MAX_BODY_BYTES=65536)
    app = create_app(settings, client=cast(Client, _NoTemporal()))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        yield client


def _assert_too_large(response: httpx.Response) -> None:
    """Starlette's answer, as text or as FastAPI's JSON depending on when it is known."""
    assert response.status_code == 413, response.text
    assert "Content Too Large" in response.text


async def test_a_body_declared_too_large_is_413(small_api: httpx.AsyncClient) -> None:
    """FastAPI reads a JSON body whole before validating it, and uvicorn sets no limit:
    without one, a client could make the API hold any amount of memory."""
    body = b'{"task": "' + b"x" * 70_000 + b'"}'
    _assert_too_large(await small_api.post("/runs", content=body))


async def test_a_body_streamed_past_the_limit_is_413(small_api: httpx.AsyncClient) -> None:
    """Chunked, with no Content-Length to read: the bytes are counted as they come."""

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"goal": "'
        for _ in range(20):
            yield b"x" * 4096

    response = await small_api.post(
        "/graphs", content=chunks(), headers={"Content-Type": "application/json"}
    )
    _assert_too_large(response)


async def test_a_body_within_the_limit_is_validated_as_ever(small_api: httpx.AsyncClient) -> None:
    response = await small_api.post("/runs", json={"task": "x" * 60_000})
    _assert_names(response, "body.task")


async def test_a_422_does_not_echo_a_large_value_whole(api: httpx.AsyncClient) -> None:
    response = await api.post("/runs", json={"task": "x" * 100_000})
    body = _assert_names(response, "body.task")
    assert len(response.content) < 2000
    [error] = body["detail"]
    assert error["input"] == "x" * 300 + "… (100000 characters in all)"
    # Small values are echoed as they were.
    small = await api.post("/runs", json={"task": "t", "max_iterations": 21})
    assert small.json()["detail"][0]["input"] == 21


def _rule(rule_id: str, weight: str) -> str:
    return (
        f'{{"id": "{rule_id}", "description": "has a title", "weight": {weight},'
        ' "check": {"kind": "pattern", "file": "artifact.md", "pattern": "#"}}'
    )


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        pytest.param("/runs", '{"task": "t", "thresholds": {"A": NaN}}', "body.thresholds.A"),
        pytest.param("/runs", '{"task": "t", "thresholds": {"A": Infinity}}', "body.thresholds.A"),
        pytest.param("/runs", '{"task": "t", "audit_probability": -Infinity}', "body.audit"),
        pytest.param("/graphs", '{"goal": "g", "audit_probability": NaN}', "body.audit"),
        # Two rules of the largest weights would score inf / inf: a run stuck for good.
        pytest.param(
            "/runs",
            f'{{"task": "t", "rules": [{_rule("a", "1e308")}, {_rule("b", "1e308")}]}}',
            "body.rules",
        ),
        pytest.param(
            "/runs", f'{{"task": "t", "rules": [{_rule("a", "Infinity")}]}}', "body.rules"
        ),
    ],
)
async def test_numbers_json_has_not_or_no_score_can_hold_are_a_422(
    api: httpx.AsyncClient, path: str, body: str, field: str
) -> None:
    """NaN and Infinity are no JSON, though Python's parser reads them: a 422 that echoes
    them as sent, never a 500 for a response that cannot hold them."""
    response = await api.post(path, content=body, headers={"Content-Type": "application/json"})
    _assert_names(response, field)


GRAPH_TASK = {
    "id": "T-001",
    "title": "Write part one",
    "description": "Write part one of the guide.",
    "acceptance_criteria": ["Part one is written"],
    "verification_command": "test -f artifact.md",
}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        # Mistyped, a limit the client set would be the operator's default instead.
        pytest.param({"goal": "g", "totl_budget": {"max_cost_usd": 5}}, "body.totl_budget"),
        pytest.param(
            {"goal": "g", "tasks": [{**GRAPH_TASK, "verfy": "true"}]}, "body.tasks.0.verfy"
        ),
    ],
)
async def test_a_graph_request_with_a_field_it_does_not_know_is_422(
    api: httpx.AsyncClient, body: dict[str, Any], field: str
) -> None:
    _assert_names(await api.post("/graphs", json=body), field)
