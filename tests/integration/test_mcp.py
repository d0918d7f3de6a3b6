"""`loops mcp` against a real stack: the MCP SDK's own client launches
`python -m loopworks.cli mcp` over stdio, as an assistant would, and drives runs only
through its tools (docs/mcp.md).

One worker serves three runs at once: one in auto mode, one interactive (approved through
the tool), one whose first custodiet audit blocks (cleared through the tool); the offline
model answers, scripted only for that block.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, TextContent

from loopworks.deploy.local import free_port
from loopworks.schemas.run import TERMINAL_STATUSES
from tests.integration.stack import ROOT, Stack, wait_for_port
from tests.integration.test_graphs import make_remote

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

TERMINAL = {status.value for status in TERMINAL_STATUSES}
TOOLS = {
    "list_runs",
    "start_run",
    "run_status",
    "run_events",
    "run_artifact",
    "approve_run",
    "clear_block",
    "pause_run",
    "resume_run",
    "stop_run",
    "start_graph",
    "graph_status",
    "approve_graph",
    "clear_graph_block",
    "pause_graph",
    "resume_graph",
    "stop_graph",
    "list_graphs",
    "wait_for_run",
    "run_trajectory",
    "playbook",
}


def text(result: CallToolResult) -> str:
    return " ".join(part.text for part in result.content if isinstance(part, TextContent))


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, f"{tool}: {text(result)}"
    assert isinstance(result.structured_content, dict), result
    return result.structured_content


async def refused(client: Client, tool: str, **arguments: Any) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, f"{tool} was not refused: {result.structured_content}"
    return text(result)


async def wait_for(
    client: Client, run_id: str, field: str, values: set[Any], timeout: float = 180
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    view: dict[str, Any] = {}
    while time.monotonic() < deadline:
        view = await call(client, "run_status", run_id=run_id)
        if view[field] in values:
            return view
        await anyio.sleep(0.3)
    raise AssertionError(f"run {run_id} never had {field} in {values}: {view}")


def server(stack: Stack, base_url: str) -> StdioServerParameters:
    env = stack.env(LOOPS_API_URL=base_url)
    return StdioServerParameters(
        command=sys.executable, args=["-m", "loopworks.cli", "mcp"], env=env, cwd=str(ROOT)
    )


async def test_an_mcp_client_starts_watches_approves_and_clears_runs(
    stack: Stack, tmp_path: Path
) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"custodiet": {"1": {"verdict": "BLOCK", "reason": "x"}}}))
    stack.start_worker(LOOPS_OFFLINE_LATENCY_MS="100", LOOPS_OFFLINE_SCRIPT=str(script))
    _, base_url = stack.start_api()

    async with Client(server(stack, base_url), read_timeout_seconds=120) as client:
        listed = {tool.name for tool in (await client.list_tools()).tools}
        assert listed == TOOLS

        task = "Write a short guide to reflex loops"
        auto = await call(client, "start_run", task=task, audit_probability=0)
        interactive = await call(
            client, "start_run", task=task, mode="interactive", audit_probability=0
        )
        blocking = await call(client, "start_run", task=task, audit_probability=1)
        assert auto["status"] == "running" and auto["gate"] is None, auto

        # Interactive: it waits at the approval gate until approve_run, with edits.
        waiting = await wait_for(client, interactive["run_id"], "gate", {"approval"})
        assert waiting["status"] == "awaiting_approval"
        assert "approve_run" in waiting["next_action"]
        approved = await call(
            client,
            "approve_run",
            run_id=interactive["run_id"],
            max_iterations=2,
            note="approved from an assistant",
        )
        assert approved["status"] != "awaiting_approval" and approved["max_iterations"] == 2
        again = await refused(client, "approve_run", run_id=interactive["run_id"])
        assert "HTTP 409" in again, again

        # The custodiet blocks: the gate says so, with the reason; clear_block releases it.
        blocked = await wait_for(client, blocking["run_id"], "gate", {"block"})
        assert (blocked["status"], blocked["message"]) == ("blocked", "x"), blocked
        assert "clear_block" in blocked["next_action"]
        cleared = await call(
            client, "clear_block", run_id=blocking["run_id"], note="scope confirmed"
        )
        assert cleared["status"] != "blocked" and cleared["gate"] is None, cleared

        # All three complete; status is read until they do.
        for run in (auto, interactive, blocking):
            done = await wait_for(client, run["run_id"], "status", TERMINAL)
            assert done["status"] == "completed", done
            assert done["gate"] is None and "ended" in done["next_action"]

        # Events after a cursor: pages that join up, with the approval and the clearing.
        first = await call(client, "run_events", run_id=blocking["run_id"], limit=3)
        assert [e["seq"] for e in first["events"]] == [1, 2, 3] and first["more"] is True
        rest = await call(
            client, "run_events", run_id=blocking["run_id"], after=first["next_cursor"], limit=500
        )
        assert rest["events"][0]["seq"] == 4 and rest["more"] is False
        names = [e["event"] for e in rest["events"]]
        assert "block_cleared" in names and names[-1] == "pushed", names
        interactive_events = await call(
            client, "run_events", run_id=interactive["run_id"], limit=500
        )
        assert "approved" in [e["event"] for e in interactive_events["events"]]

        artifact = await call(client, "run_artifact", run_id=auto["run_id"])
        assert artifact["final"] is True and artifact["markdown"].strip(), artifact

        rows = await call(client, "list_runs", limit=10)
        listed_ids = {row["run_id"] for row in rows["result"]}
        assert {auto["run_id"], interactive["run_id"], blocking["run_id"]} <= listed_ids

        # The API's own words come back as the tool's error.
        unknown = await refused(client, "run_status", run_id="no-such-run-20250101-000000-abcdef")
        assert "HTTP 404" in unknown, unknown
        finished = await refused(client, "clear_block", run_id=blocking["run_id"], note="again")
        assert "HTTP 409" in finished, finished


async def test_an_mcp_client_waits_with_progress_takes_aliases_and_reads_what_runs_left(
    stack: Stack,
) -> None:
    """wait_for_run answers at the approval gate, then at the end, with progress
    notifications on the way; every run tool takes the alias; list_graphs lists a graph;
    run_trajectory and playbook read what the run left."""
    stack.start_worker(LOOPS_OFFLINE_LATENCY_MS="150")
    _, base_url = stack.start_api()
    task = {
        "id": "T-001",
        "title": "Write it",
        "description": "Write a guide",
        "acceptance_criteria": ["it exists"],
        "verification_command": "true",
    }
    graph = httpx.post(
        f"{base_url}/graphs",
        json={"goal": "Write a guide", "tasks": [task], "mode": "interactive"},
        timeout=30,
    )
    assert graph.status_code == 201, graph.text

    async with Client(server(stack, base_url), read_timeout_seconds=180) as client:
        graphs = await call(client, "list_graphs")
        assert graph.json()["graph_id"] in {row["graph_id"] for row in graphs["result"]}

        started = await call(
            client,
            "start_run",
            task="Write a guide to backoff",
            mode="interactive",
            audit_probability=0,
        )
        alias = started["alias"]
        heard: list[tuple[float, float | None, str | None]] = []

        async def progress(done: float, total: float | None, message: str | None) -> None:
            heard.append((done, total, message))

        waited = await client.call_tool(
            "wait_for_run", {"run_id": alias}, progress_callback=progress
        )
        assert not waited.is_error, text(waited)
        view = waited.structured_content
        assert isinstance(view, dict)
        assert (view["run_id"], view["gate"]) == (started["run_id"], "approval"), view
        assert heard and heard[-1][2] is not None
        assert heard[-1][2].startswith("awaiting_approval"), heard

        approved = await call(client, "approve_run", run_id=alias, max_iterations=2)
        assert approved["run_id"] == started["run_id"] and approved["max_iterations"] == 2
        heard.clear()
        ended = await client.call_tool(
            "wait_for_run", {"run_id": alias}, progress_callback=progress
        )
        done = ended.structured_content
        assert isinstance(done, dict) and done["status"] == "completed", done
        # Notified as it went: more than one step, iterations counted against the limit.
        assert len(heard) > 2 and {total for _, total, _ in heard} == {2}, heard
        assert heard[-1][0] == done["iteration"] and heard[-1][2].startswith("completed")

        status = await call(client, "run_status", run_id=alias)
        assert status["run_id"] == started["run_id"]
        plan = await call(client, "run_trajectory", run_id=alias, step="plan", limit=200)
        assert plan["lines"] and {line["step"] for line in plan["lines"]} == {"plan"}
        answers = [line for line in plan["lines"] if line["kind"] == "assistant"]
        assert answers and all(line["output_tokens"] for line in answers), answers

        origin = httpx.get(f"{base_url}/runs/{started['run_id']}", timeout=30).json()["origin"]
        deadline = time.monotonic() + 60
        learnt: dict[str, Any] = {}
        while time.monotonic() < deadline:
            result = await client.call_tool("playbook", {"repo": origin})
            if not result.is_error and isinstance(result.structured_content, dict):
                learnt = result.structured_content
                if learnt["items"]:
                    break
            await anyio.sleep(0.5)
        assert learnt.get("origin") == origin and learnt["items"], learnt


async def test_start_tools_keep_a_prep_packages_iteration_limit(
    stack: Stack, tmp_path: Path
) -> None:
    """Left out, max_iterations is the API's to decide: a run or graph planned from the
    repository's prep package takes the package's limit (10: it names none), as it does
    for the API's other clients; the tools used to send 4."""
    remote = make_remote(tmp_path, prep=True)
    stack.start_worker()
    _, base_url = stack.start_api()
    asked = {"repo": str(remote), "mode": "interactive"}
    async with Client(server(stack, base_url), read_timeout_seconds=180) as client:
        run = await call(client, "start_run", task="Fix calc", **asked)
        graph = await call(client, "start_graph", goal="Fix calc", **asked)
        waiting = await wait_for(client, run["run_id"], "status", {"awaiting_approval"})
        graph_id = graph["graph_id"]
        deadline = time.monotonic() + 180
        state: dict[str, Any] = {}
        while time.monotonic() < deadline and state.get("status") != "awaiting_approval":
            await anyio.sleep(0.5)
            state = httpx.get(f"{base_url}/graphs/{graph_id}", timeout=30).json()
        await call(client, "stop_run", run_id=run["run_id"])
        await call(client, "stop_graph", graph_id=graph_id)
    assert waiting["max_iterations"] == 10, waiting
    assert (state.get("status"), state.get("max_iterations")) == ("awaiting_approval", 10), state


async def test_loops_mcp_serves_streamable_http_on_loopback(
    tmp_path: Path, refused_port: int
) -> None:
    """`loops mcp --http --port P`: the same tools over streamable HTTP at /mcp; with no
    API there, a tool's error says the API cannot be reached."""
    port, dead = free_port(), refused_port
    env = {**os.environ, "LOOPS_API_URL": f"http://127.0.0.1:{dead}"}
    log = (tmp_path / "mcp.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "loopworks.cli", "mcp", "--http", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for_port(port, timeout=30)
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:
            assert {tool.name for tool in (await client.list_tools()).tools} == TOOLS
            answer = await refused(client, "run_status", run_id="a-20250101-000000-abcdef")
            assert f"cannot reach the API at http://127.0.0.1:{dead}" in answer, answer
    finally:
        process.terminate()
        process.wait(timeout=15)
        log.close()
