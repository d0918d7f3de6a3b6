"""The real processes: an API bound beyond loopback without tokens does not serve, and
who starts a run or a graph is recorded in its state, in Temporal's search attributes and
in `loops list`; the caps and the read-only token hold against the dev server."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from typing import Any

import httpx
import pytest
from temporalio.client import Client
from temporalio.common import SearchAttributeKey

from loopworks.deploy.local import free_port
from tests.integration.stack import ROOT, Stack, bare_remote

# Spelled out rather than imported, so the test also runs (and fails) on code without it.
LOOP_STARTED_BY = SearchAttributeKey.for_keyword("LoopStartedBy")

pytestmark = pytest.mark.integration

WRITER, READER = "alice-0123456789abcdef", "dash-0123456789abcdef"


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize(
    "command",
    [["-m", "loopworks.api"], ["-m", "loopworks.cli", "up"]],
    ids=["python -m loopworks.api", "loops up"],
)
def test_an_exposed_api_without_tokens_does_not_serve(stack: Stack, command: list[str]) -> None:
    port = free_port()
    env = stack.env(LOOPS_API_HOST="0.0.0.0", LOOPS_API_PORT=str(port))
    env.pop("LOOPS_API_TOKENS", None)
    process = subprocess.Popen(
        [sys.executable, *command],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # Whatever it does, nothing may answer on the port meanwhile.
        deadline = time.monotonic() + 30
        while process.poll() is None and time.monotonic() < deadline:
            assert not _listening(port), "the API served without tokens"
            time.sleep(0.05)
        output = process.communicate(timeout=30)[0]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    assert process.returncode == 2, output
    assert "cannot start" in output and "LOOPS_API_TOKENS=" in output, output
    assert not _listening(port)


CREDENTIALS = json.dumps({"github.com": {"username": "x-access-token", "token": "ghp_" + "k" * 36}})


@pytest.mark.parametrize(
    ("variables", "says"),
    [
        # A token a person would type: guessed over the network in no time.
        ({"LOOPS_API_TOKENS": "alice:x"}, "'alice' has 1 characters, fewer than the 16"),
        ({"LOOPS_API_READ_TOKENS": "dash:twelve-chars"}, "'dash' has 12 characters"),
        # Shared (tokens) with the operator's git credential and no allow-list: any token
        # holder could have a run use it on any repository of github.com.
        (
            {"LOOPS_API_TOKENS": f"alice:{WRITER}", "LOOPS_GIT_CREDENTIALS": CREDENTIALS},
            "LOOPS_ALLOWED_ORIGINS is unset",
        ),
    ],
    ids=["short token", "short read token", "credentials without allowed origins"],
)
def test_an_api_configured_to_be_guessed_or_to_lend_credentials_does_not_start(
    stack: Stack, variables: dict[str, str], says: str
) -> None:
    port = free_port()
    env = stack.env(LOOPS_API_HOST="127.0.0.1", LOOPS_API_PORT=str(port), **variables)
    env.pop("LOOPS_ALLOWED_ORIGINS", None)
    process = subprocess.run(
        [sys.executable, "-m", "loopworks.api"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=60,
    )
    assert process.returncode == 2, process.stdout
    assert "cannot start" in process.stdout and says in process.stdout, process.stdout
    assert "ghp_" not in process.stdout and ":x" not in process.stdout
    assert not _listening(port)


def test_a_shared_api_with_credentials_and_allowed_origins_starts(stack: Stack) -> None:
    _, base = stack.start_api(
        LOOPS_API_TOKENS=f"alice:{WRITER}",
        LOOPS_GIT_CREDENTIALS=CREDENTIALS,
        LOOPS_ALLOWED_ORIGINS="https://github.com/acme/",
    )
    assert httpx.get(f"{base}/healthz", timeout=10).status_code == 200


def _get(http: httpx.Client, path: str, token: str = WRITER) -> Any:
    response = http.get(path, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text
    return response.json()


def _post(http: httpx.Client, path: str, body: Any, token: str = WRITER) -> httpx.Response:
    return http.post(path, json=body, headers={"Authorization": f"Bearer {token}"})


async def _started_by(stack: Stack, workflow_id: str) -> str | None:
    client = await Client.connect(stack.server.address, namespace=stack.namespace)
    description = await client.get_workflow_handle(workflow_id).describe()
    return description.typed_search_attributes.get(LOOP_STARTED_BY)


def _wait(check: Any, what: str, timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.25)
    raise AssertionError(f"{what} never happened")


async def test_who_started_a_run_and_a_graph_is_recorded_and_capped(
    stack: Stack, tmp_path: Any
) -> None:
    remote = bare_remote(tmp_path)
    stack.start_worker(LOOPS_OFFLINE_LATENCY_MS="50")
    _, base = stack.start_api(
        LOOPS_API_TOKENS=f"alice:{WRITER}",
        LOOPS_API_READ_TOKENS=f"dash:{READER}",
        LOOPS_MAX_RUNS_PER_CLIENT="1",
    )
    with httpx.Client(base_url=base, timeout=30) as http:
        # A read-only token reads, and cannot start anything.
        refused = _post(http, "/runs", {"task": "t"}, token=READER)
        assert refused.status_code == 403, refused.text
        # (Other tests' runs on the shared dev server may be listed: none is dash's.)
        assert [r for r in _get(http, "/runs", token=READER) if r["started_by"] == "dash"] == []

        # An interactive run stays open (awaiting approval): alice's one run in progress.
        body = {"task": "Write a haiku", "repo": str(remote), "mode": "interactive"}
        created = _post(http, "/runs", {**body, "audit_probability": 0})
        assert created.status_code == 201, created.text
        run_id = created.json()["run_id"]
        state = _wait(
            lambda: (s := _get(http, f"/runs/{run_id}"))["status"] == "awaiting_approval" and s,
            "the run awaiting approval",
        )
        assert state["started_by"] == "alice"
        assert await _started_by(stack, run_id) == "alice"

        # Visibility counts it: a second run is past alice's cap.
        over = _post(http, "/runs", {"task": "another", "audit_probability": 0})
        assert over.status_code == 429, over.text
        assert "LOOPS_MAX_RUNS_PER_CLIENT" in over.json()["detail"]
        assert int(over.headers["retry-after"]) > 0

        # A graph's task loop is the graph's: recorded as alice's, not counted as a run.
        task = {
            "id": "T-001",
            "title": "Write notes",
            "description": "Write notes.md",
            "acceptance_criteria": ["notes.md exists"],
            "verification_command": "true",
        }
        graph = _post(http, "/graphs", {"goal": "notes", "repo": str(remote), "tasks": [task]})
        assert graph.status_code == 201, graph.text
        graph_id = graph.json()["graph_id"]
        graph_state = _wait(
            lambda: (
                (g := _get(http, f"/graphs/{graph_id}"))["tasks"] and g["tasks"][0]["run_ids"] and g
            ),
            "the graph's first task loop",
        )
        assert graph_state["started_by"] == "alice"
        assert await _started_by(stack, graph_id) == "alice"
        loop_id = graph_state["tasks"][0]["run_ids"][0]
        assert await _started_by(stack, loop_id) == "alice"
        assert _get(http, f"/runs/{loop_id}")["started_by"] == "alice"
        listed = _get(http, "/graphs")
        assert [(g["graph_id"], g["started_by"]) for g in listed if g["graph_id"] == graph_id] == [
            (graph_id, "alice")
        ]

    # `loops list` says who.
    shown = subprocess.run(
        [sys.executable, "-m", "loopworks.cli", "list", "--json"],
        cwd=ROOT,
        env=stack.env(LOOPS_API_URL=base, LOOPS_API_TOKEN=READER),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    by_id = {run["run_id"]: run["started_by"] for run in json.loads(shown.stdout)}
    assert by_id[run_id] == "alice" and by_id[loop_id] == "alice"
    table = subprocess.run(
        [sys.executable, "-m", "loopworks.cli", "list"],
        cwd=ROOT,
        # Wide enough that no id is cut.
        env=stack.env(LOOPS_API_URL=base, LOOPS_API_TOKEN=READER, COLUMNS="400"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert table.stdout.splitlines()[0].split()[-1] == "BY"
    # The dev server is the module's to share: other tests' runs may be listed too.
    ours = [line for line in table.stdout.splitlines()[1:] if run_id in line or loop_id in line]
    assert len(ours) == 2 and all(line.split()[-1] == "alice" for line in ours), table.stdout
