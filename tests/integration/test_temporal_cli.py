"""The `temporal` CLI steers a run by its id: the workflow's `stop` signal and
`clear_block` update are usable without loopworks' API or CLI.

Runs are started through the API; only the messages go through `temporal`.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from loopworks.deploy.binaries import find_binary
from loopworks.schemas.run import TERMINAL_STATUSES
from tests.integration.stack import Stack

pytestmark = pytest.mark.integration

TERMINAL = {status.value for status in TERMINAL_STATUSES}


def temporal(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    command = [find_binary("temporal"), "workflow", *args]
    command += ["--address", stack.server.address, "--namespace", "default"]
    return subprocess.run(
        command, env=stack.env(), capture_output=True, text=True, timeout=60, check=False
    )


def start_service(stack: Stack, script: dict[str, Any], tmp_path: Path) -> httpx.Client:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))
    stack.start_worker(LOOPS_OFFLINE_LATENCY_MS="100", LOOPS_OFFLINE_SCRIPT=str(path))
    _, base_url = stack.start_api()
    return httpx.Client(base_url=base_url, timeout=30)


def start_run(http: httpx.Client, **body: Any) -> str:
    response = http.post("/runs", json=body)
    assert response.status_code == 201, response.text
    run_id: str = response.json()["run_id"]
    return run_id


def wait_for(
    http: httpx.Client, run_id: str, check: Callable[[dict[str, Any]], bool], timeout: float = 90
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    state: dict[str, Any] = {}
    while time.monotonic() < deadline:
        response = http.get(f"/runs/{run_id}")
        assert response.status_code == 200, response.text
        state = response.json()
        if check(state):
            return state
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} never got there: {state}")


def finished(state: dict[str, Any]) -> bool:
    return state["status"] in TERMINAL


def test_temporal_cli_stops_a_run(stack: Stack, tmp_path: Path) -> None:
    # PRODUCE takes two minutes: the stop has to cancel it mid-step.
    slow = {"producer": {"*": {"delay_ms": 120_000}}}
    with start_service(stack, slow, tmp_path) as http:
        run_id = start_run(http, task="Draft release notes", audit_probability=0)
        wait_for(http, run_id, lambda s: s["current_step"] == "PRODUCE_PREPARE")

        proc = temporal(
            stack,
            "signal",
            "--workflow-id",
            run_id,
            "--name",
            "stop",
            "--input",
            '"from temporal cli"',
        )
        assert proc.returncode == 0, proc.stderr

        state = wait_for(http, run_id, finished, timeout=60)
        assert (state["status"], state["stop_reason"]) == ("stopped", "user_stop"), state
        assert state["stop"]["message"] == "from temporal cli"
        events = http.get(f"/runs/{run_id}/events").json()
        stopped = [e for e in events if e["event"] == "stopped"]
        assert [e["payload"]["message"] for e in stopped] == ["from temporal cli"]
        assert events[-1]["event"] == "pushed"  # stopping never loses work


def test_temporal_cli_clears_a_block(stack: Stack, tmp_path: Path) -> None:
    block_first_audit = {"custodiet": {"1": {"verdict": "BLOCK", "reason": "x"}}}
    with start_service(stack, block_first_audit, tmp_path) as http:
        run_id = start_run(http, task="Write a short guide to reflex loops", audit_probability=1)
        blocked = wait_for(http, run_id, lambda s: s["status"] == "blocked")
        assert blocked["block"] == {**blocked["block"], "blocked": True, "reason": "x"}

        proc = temporal(
            stack,
            "update",
            "execute",
            "--workflow-id",
            run_id,
            "--name",
            "clear_block",
            "--input",
            '"cleared from cli"',
            "--output",
            "json",
        )
        assert proc.returncode == 0, proc.stderr
        # The update answers with the run's state, already released.
        answer = json.loads(proc.stdout)
        assert answer["result"]["block"]["cleared_note"] == "cleared from cli", answer
        assert answer["result"]["blocked"] is False

        again = temporal(
            stack,
            "update",
            "execute",
            "--workflow-id",
            run_id,
            "--name",
            "clear_block",
            "--input",
            '"twice"',
        )
        # The validator rejects it (or the run has already finished): never a second clear.
        assert again.returncode != 0, again.stdout

        state = wait_for(http, run_id, finished)
        assert state["status"] == "completed", state
        assert state["block"]["cleared_note"] == "cleared from cli"
        events = http.get(f"/runs/{run_id}/events").json()
        cleared = [e["payload"]["note"] for e in events if e["event"] == "block_cleared"]
        assert cleared == ["cleared from cli"]
