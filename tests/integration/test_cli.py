"""The `loops` CLI as a real subprocess against a real API, worker and dev server.

Each test starts its own worker (the offline model, slowed down so runs stay open long
enough to steer) and API, and drives runs only through `python -m loopworks.cli`.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from loopworks.schemas.run import TERMINAL_STATUSES
from tests.integration.stack import ROOT, Stack

pytestmark = pytest.mark.integration

TERMINAL = {status.value for status in TERMINAL_STATUSES}
RUN_ID = re.compile(r"[a-z0-9-]+-\d{8}-\d{6}-[0-9a-f]{6}")
FOLLOW_TIMEOUT = 180.0


@dataclass
class Cli:
    stack: Stack
    base_url: str
    token: str | None = None

    def __call__(
        self, *args: str, timeout: float = 60.0, stdin: str | None = None, **env: str
    ) -> subprocess.CompletedProcess[str]:
        variables = self.stack.env(LOOPS_API_URL=self.base_url, **env)
        if self.token:
            variables["LOOPS_API_TOKEN"] = self.token
        return subprocess.run(
            [sys.executable, "-m", "loopworks.cli", *args],
            cwd=ROOT,
            env=variables,
            input=stdin,
            stdin=None if stdin is not None else subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def ok(self, *args: str, timeout: float = 60.0) -> str:
        proc = self(*args, timeout=timeout)
        assert proc.returncode == 0, f"loops {' '.join(args)}: {proc.stderr}\n{self.logs()}"
        return proc.stdout

    def state(self, run_id: str) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        response = httpx.get(f"{self.base_url}/runs/{run_id}", headers=headers, timeout=30)
        assert response.status_code == 200, response.text
        state: dict[str, Any] = response.json()
        return state

    def wait_for(
        self, run_id: str, check: Callable[[dict[str, Any]], bool], timeout: float = 90.0
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        state: dict[str, Any] = {}
        while time.monotonic() < deadline:
            state = self.state(run_id)
            if check(state):
                return state
            time.sleep(0.2)
        raise AssertionError(f"run {run_id} never got there: {state}\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.output()[-3000:]}" for p in self.stack.processes)


def start(stack: Stack, **worker_env: str) -> Cli:
    stack.start_worker(LOOPS_OFFLINE_LATENCY_MS="100", **worker_env)
    _, base_url = stack.start_api()
    return Cli(stack, base_url)


def slow_producer(tmp_path: Path) -> str:
    """An offline script whose PRODUCE takes two minutes: a run to stop mid-step."""
    script = tmp_path / "slow-producer.json"
    script.write_text(json.dumps({"producer": {"*": {"delay_ms": 120_000}}}))
    return str(script)


def workspaces(stack: Stack, run_id: str) -> list[Path]:
    root = stack.data_dir / "workspaces"
    return [p for p in root.iterdir() if p.name == run_id or p.name.startswith(f"{run_id}.")]


def test_cli_drives_a_run_end_to_end(stack: Stack) -> None:
    loops = start(stack)
    run_id = loops.ok("new", "Write a short guide to reflex loops").strip()
    assert RUN_ID.fullmatch(run_id), run_id

    followed = loops.ok("status", run_id, "--follow", timeout=FOLLOW_TIMEOUT)
    assert "── Iteration 1/4 | Phase A |" in followed, followed
    assert "Stop reason: threshold_reached" in followed, followed
    assert f"══ Run {run_id} completed ══" in followed
    # Not a terminal: plain progress lines, no spinner escapes.
    assert re.search(r"^· (setup|iteration \d+/4 · phase [AB]) · [A-Z_]+$", followed, re.M)
    assert "\x1b" not in followed
    # Every evaluation is summarised once, in order.
    headers = re.findall(r"^── Iteration (\d+)/4 \| Phase ([AB])", followed, re.M)
    assert headers == sorted(set(headers), key=headers.index)

    # Polling gives the same summaries as the live stream (or the API's fallback).
    polled = loops.ok("status", run_id, "--follow", "--poll", timeout=FOLLOW_TIMEOUT)
    assert re.findall(r"^── Iteration.*$", polled, re.M) == re.findall(
        r"^── Iteration.*$", followed, re.M
    )

    line, note, model, *detail = loops.ok("status", run_id).splitlines()
    fields = line.split(" | ")
    assert fields[:2] == ["write-a-short-guide-to-reflex-loops", "completed"], line
    assert re.fullmatch(r"\d+/4", fields[2]) and fields[4] == "DONE", line
    assert note == "stop: threshold_reached"
    # A run on canned answers says so: in `loops status`, its state and its events.
    assert model.startswith("model: offline")
    # What a person steering it reads: the plan, the rules, the verdicts.
    assert re.match(r"plan \(iteration \d+\): \S", detail[0]), detail
    assert any(re.match(r"evaluation \(iteration \d+, phase B\): score", d) for d in detail)
    # How the run is proven: the service's own origin has no tests, the draft is a document.
    assert any(d.startswith("proof: none (") and "not_needed" in d for d in detail), detail
    assert any(d.startswith("critic: PROCEED") for d in detail), detail
    assert any(d.startswith("qa (iteration") for d in detail), detail
    assert loops.state(run_id)["model_source"] == "offline"
    events = httpx.get(f"{loops.base_url}/runs/{run_id}/events", timeout=30).json()
    hydrated = [e for e in events if e["event"] == "hydration_done"]
    assert hydrated and all(e["payload"]["model_source"] == "offline" for e in hydrated)
    assert loops.ok("status").splitlines()[0] == line  # the most recent run

    deadline = time.monotonic() + 15  # visibility is eventually consistent
    while run_id not in (listed := loops.ok("list")) and time.monotonic() < deadline:
        time.sleep(0.3)
    header, *rows = listed.splitlines()
    assert header.split() == ["RUN_ID", "ALIAS", "STATUS", "ITER", "SCORE", "STARTED", "BY"]
    row = next(r for r in rows if r.startswith(run_id)).split()
    assert row[2] == "completed", row
    assert row[-1] == "local", "an open API's runs are started by `local`"

    history = loops.ok("history", run_id).splitlines()
    assert "run_started" in history[0] and "pushed" in history[-1], history
    assert any("evaluation_done" in entry for entry in history)

    artifact = loops.ok("artifact", run_id)
    assert any(text.startswith("# ") for text in artifact.splitlines()), artifact

    finished_stop = loops("stop", run_id)
    assert finished_stop.returncode == 1
    assert "HTTP 409" in finished_stop.stderr and "finished" in finished_stop.stderr

    unknown = loops("status", "no-such-run-20250101-000000-abcdef")
    assert unknown.returncode == 1
    assert "HTTP 404: run no-such-run-20250101-000000-abcdef not found" in unknown.stderr

    blank = loops("new", "")
    assert blank.returncode == 1, blank
    assert "HTTP 422" in blank.stderr and "body.task" in blank.stderr, blank.stderr
    assert blank.stdout == ""

    assert workspaces(stack, run_id), "the run left no workspace to clean"
    # The API removes the clones where it runs: the CLI's own data directory is irrelevant.
    cleaned = loops("clean", run_id, "--yes", LOOPS_DATA_DIR="/nonexistent")
    assert cleaned.returncode == 0, cleaned.stderr
    assert workspaces(stack, run_id) == []


def test_cli_stops_a_running_run_and_cleans_it_once_finished(stack: Stack, tmp_path: Path) -> None:
    loops = start(stack, LOOPS_OFFLINE_SCRIPT=slow_producer(tmp_path))
    run_id = loops.ok("new", "Draft release notes for the next version").strip()
    loops.wait_for(run_id, lambda s: s["current_step"] == "PRODUCE_PREPARE")
    assert loops.ok("status", run_id).startswith(
        "draft-release-notes-for-the-next-version | running | 1/4 | A | PRODUCE_PREPARE"
    )

    live = loops("clean", run_id, "--yes")
    assert live.returncode == 1
    assert f"run {run_id} has not finished; only a finished run's workspace" in live.stderr
    assert workspaces(stack, run_id), "clean deleted a live run's workspace"

    stopped = loops("stop", run_id, "--reason", "enough")
    assert stopped.returncode == 0, stopped.stderr
    # Following a run that did not complete exits 1, after its final summary.
    ended = loops("status", run_id, "--follow", timeout=FOLLOW_TIMEOUT)
    followed = ended.stdout
    assert ended.returncode == 1, ended.stderr
    assert "Stop reason: user_stop" in followed and "Message: enough" in followed, followed

    line, note, model, *detail = loops.ok("status", run_id).splitlines()
    assert line.split(" | ")[1] == "stopped"
    assert note == "stop: user_stop (enough)"
    assert model.startswith("model: offline")
    # Stopped while producing iteration 1: its plan and the critic's review, nothing after.
    assert re.match(r"plan \(iteration 1\): \S", detail[0]), detail
    assert any(d.startswith("critic: PROCEED") for d in detail), detail
    assert not any(d.startswith(("evaluation", "qa", "waits at")) for d in detail), detail

    unconfirmed = loops("clean", run_id)  # stdin is /dev/null: nobody can say yes
    assert unconfirmed.returncode == 1
    assert "pass --yes" in unconfirmed.stderr
    declined = loops("clean", run_id, stdin="y\n")  # piped, still not a terminal
    assert declined.returncode == 1
    assert workspaces(stack, run_id)

    cleaned = loops("clean", run_id, "--yes")
    assert cleaned.returncode == 0, cleaned.stderr
    assert "deleted" in cleaned.stdout
    assert workspaces(stack, run_id) == []


def test_cli_pauses_approves_and_resumes_an_interactive_run(stack: Stack) -> None:
    loops = start(stack)
    run_id = loops.ok("new", "Write a short guide to reflex loops", "--interactive").strip()
    loops.wait_for(run_id, lambda s: s["status"] == "awaiting_approval")
    assert loops.ok("status", run_id).splitlines()[1] == (
        f"awaiting approval (approve with: loops approve {run_id})"
    )

    loops.ok("pause", run_id)
    again = loops("pause", run_id)
    assert again.returncode == 1 and "HTTP 409" in again.stderr, again.stderr
    loops.ok("approve", run_id, "--max-iterations", "2")
    paused = loops.wait_for(run_id, lambda s: s["status"] == "paused")
    assert paused["max_iterations"] == 2
    assert loops.ok("status", run_id).splitlines()[1].startswith("paused")

    loops.ok("resume", run_id)
    not_paused = loops("resume", run_id)
    assert not_paused.returncode == 1 and "HTTP 409" in not_paused.stderr
    followed = loops.ok("status", run_id, "--follow", timeout=FOLLOW_TIMEOUT)
    assert "── Iteration 1/2 |" in followed, followed
    assert "Iteration: " in followed and "/2" in followed


def test_cli_sends_the_token(stack: Stack) -> None:
    _, base_url = stack.start_api(LOOPS_API_TOKENS="s3cret-0123456789,other-0123456789")
    assert httpx.get(f"{base_url}/runs", timeout=30).status_code == 401
    loops = Cli(stack, base_url)
    refused = loops("list")
    assert refused.returncode == 1
    assert "HTTP 401" in refused.stderr and "LOOPS_API_TOKEN" in refused.stderr
    assert loops("list", LOOPS_API_TOKEN="s3cret-0123456789").returncode == 0
    assert loops("--token", "other-0123456789", "list").returncode == 0
    assert loops("list", "--token", "wrong").returncode == 1
