"""The README's run command, as written: `./scripts/up.sh --demo` brings up the dev
server, a worker and the API, prints where they are, and runs a task to the end."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import signal
import sqlite3
import stat
import subprocess
import sys
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import Client, ScheduleDescription

from loopworks.deploy.binaries import find_binary
from loopworks.deploy.demo import DEMO_TASK
from loopworks.deploy.one_machine import PAYLOAD_KEYS_FILE
from tests.integration.stack import ROOT, free_port, wait_for_http

pytestmark = pytest.mark.integration


def _launch(command: list[str], env: dict[str, str], timeout: float) -> tuple[int, str]:
    """Run a launcher to its end: its exit code and everything it printed."""
    process = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # The launcher stops its own children on SIGTERM; signal only its group.
        os.killpg(process.pid, signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
        pytest.fail(f"{' '.join(command)} did not finish:\n{output}")
    return process.returncode, output


def base64_decoded(text: str) -> str:
    """`text` and every base64 string in it decoded: a history's payloads as JSON."""
    found = [text]
    for word in re.findall(r"[A-Za-z0-9+/]{16,}={0,2}", text):
        with contextlib.suppress(ValueError):
            found.append(base64.b64decode(word, validate=True).decode("utf-8", "replace"))
    return "\n".join(found)


def test_up_script_starts_the_stack_and_runs_the_demo(tmp_path: Path) -> None:
    temporal_port, ui_port, api_port = free_port(), free_port(), free_port()
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "TEMPORAL_ADDRESS": f"127.0.0.1:{temporal_port}",
        "LOOPS_TEMPORAL_UI_PORT": str(ui_port),
        "LOOPS_API_PORT": str(api_port),
        "LOOPS_DATA_DIR": str(tmp_path / "data"),
        # As a user gets it: commands sandboxed. The data directory is pytest's, out of
        # reach of the sandbox's user when the suite runs as root: the launcher then puts
        # the workspaces where that user can reach them.
        "LOOPS_SANDBOX": "auto",
        # An API that asks for a token: the demo sends the first one (found by hand: it
        # sent none and was answered 401).
        "LOOPS_API_TOKENS": "first-token-0123456789, second-token-0123456789",
    }
    # As a user without a key gets it: no model chosen. `loops up` (unlike a worker
    # started alone) runs the offline model then, and says so.
    env.pop("ANTHROPIC_API_KEY", None)
    env.pop("LOOPS_LLM", None)
    returncode, output = _launch(
        ["bash", str(ROOT / "scripts" / "up.sh"), "--demo", "--exit-after-demo"], env, 240
    )

    assert returncode == 0, output
    assert "  model:        offline (no ANTHROPIC_API_KEY" in output, output
    keys = tmp_path / "data" / PAYLOAD_KEYS_FILE
    assert f"  encryption:   Temporal payloads, keys from {keys}" in output
    assert stat.S_IMODE(keys.stat().st_mode) == 0o600
    worker_log = (tmp_path / "data" / "logs" / "worker.log").read_text()
    assert "sandbox: bwrap" in worker_log, worker_log[-2000:]
    assert "model offline)" in worker_log, worker_log[-2000:]
    assert f"dashboard:    http://127.0.0.1:{api_port}/ui" in output
    # The gc's Schedule, made by the worker `loops up` runs (docs/operations.md#retention).
    assert "created the retention schedule retention/loopworks" in worker_log, worker_log[-2000:]
    assert f"API docs:     http://127.0.0.1:{api_port}/docs" in output
    assert f"Temporal UI:  http://127.0.0.1:{ui_port}" in output
    match = re.search(r"Run (\S+) completed \(threshold_reached\)", output)
    assert match, output
    run_id = match.group(1)
    assert "phase_switched" in output and "refinement_done" in output
    origin = tmp_path / "data" / "origin.git"
    shown = subprocess.run(
        ["git", "--git-dir", str(origin), "show", f"loops/{run_id}:artifact.md"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "## Verification" in shown.stdout
    # The server's database keeps a write-ahead log, not a journal per transaction (a
    # third of the server's CPU: scripts/bench.py --server-db file); the restart below
    # reads it back.
    database = sqlite3.connect(tmp_path / "data" / "temporal.db")
    try:
        assert database.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        database.close()

    # Runs survive a restart: the dev server keeps its state under the data directory.
    restarted = subprocess.Popen(
        ["bash", str(ROOT / "scripts" / "up.sh")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        base = f"http://127.0.0.1:{api_port}"
        wait_for_http(f"{base}/readyz", timeout=120)
        asked = urllib.request.Request(
            f"{base}/runs/{run_id}", headers={"Authorization": "Bearer second-token-0123456789"}
        )
        with urllib.request.urlopen(asked, timeout=30) as response:
            state = json.loads(response.read())
        assert state["status"] == "completed" and state["stop_reason"] == "threshold_reached"
        # Encrypted from the first run (a key made once in the data directory, read again
        # by the restarted stack): the history shows no task to a reader without it.
        shown = subprocess.run(
            [
                find_binary("temporal"),
                "workflow",
                "show",
                "--workflow-id",
                run_id,
                "--address",
                f"127.0.0.1:{temporal_port}",
                "--output",
                "json",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert "binary/encrypted" in base64_decoded(shown.stdout), shown.stdout[:2000]
        assert DEMO_TASK[:30] not in base64_decoded(shown.stdout)
        # The dev server's UI decodes through the API, which answers the UI's page (its
        # origin, CORS) once the caller holds a token.
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/api/v1/settings") as ui:
            assert json.loads(ui.read())["Codec"]["Endpoint"] == f"{base}/codec"
        started = json.loads(shown.stdout)["events"][0]["workflowExecutionStartedEventAttributes"]
        origin = f"http://127.0.0.1:{ui_port}"
        decode = urllib.request.Request(
            f"{base}/codec/decode",
            data=json.dumps({"payloads": started["input"]["payloads"]}).encode(),
            headers={
                "Authorization": "Bearer first-token-0123456789",
                "Origin": origin,
                "Content-Type": "application/json",
            },
        )
        with urllib.request.urlopen(decode, timeout=30) as response:
            assert response.headers["Access-Control-Allow-Origin"] == origin
            decoded = json.loads(response.read())["payloads"]
        assert DEMO_TASK in base64.b64decode(decoded[0]["data"]).decode()
        # Still there, once: the restarted worker found it.
        schedule = asyncio.run(_describe_schedule(f"127.0.0.1:{temporal_port}"))
        assert schedule.schedule.spec.intervals[0].every == timedelta(hours=24)
    finally:
        restarted.send_signal(signal.SIGTERM)
        restarted.wait(timeout=60)


async def _describe_schedule(address: str) -> ScheduleDescription:
    client = await Client.connect(address)
    return await client.get_schedule_handle("retention/loopworks").describe()


def test_up_says_which_process_ended_and_why_instead_of_a_traceback(tmp_path: Path) -> None:
    """A worker that cannot start (here: a real model asked for, no key) answers no
    query: `loops up --demo` ends at once naming it, its exit code and its last log
    line, and stops the rest."""
    temporal_port, api_port = free_port(), free_port()
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": f"127.0.0.1:{temporal_port}",
        "LOOPS_TEMPORAL_UI_PORT": str(free_port()),
        "LOOPS_API_PORT": str(api_port),
        "LOOPS_DATA_DIR": str(tmp_path / "data"),
        "LOOPS_LLM": "anthropic",
        "LOOPS_SANDBOX": "off",
    }
    env.pop("ANTHROPIC_API_KEY", None)
    loops = Path(sys.executable).parent / "loops"
    returncode, output = _launch([str(loops), "up", "--demo", "--exit-after-demo"], env, 180)

    assert returncode == 1, output
    assert "Traceback" not in output, output
    assert re.search(r"worker \(pid \d+\) exited with code \d+", output), output
    assert "cannot start: LOOPS_LLM=anthropic needs a key" in output, output
    assert "start `loops up` again" in output
