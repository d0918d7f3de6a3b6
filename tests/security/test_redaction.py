"""A secret that reaches a tool result goes no further: not to the model, nor into the
trajectory (served or pushed), the events, the history or the logs; neither do the
credentials of a URL. The worker's secrets and URL userinfo are redacted wherever text
leaves it (`loopworks.checks.redaction`); the pieces: test_redaction_units.py."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from loopworks.checks.redaction import REDACTED
from loopworks.schemas.run import TERMINAL_STATUSES
from tests.fakes.literal_messages_api import LiteralMessagesAPI
from tests.integration.stack import Stack, bare_remote, git

# The worker's model key: in its environment only, never in this test process's.
KEY = "sk-ant-api03-" + "q7" * 24
# A token written into a URL in the repository: the worker knows nothing of it.
URL_TOKEN = "ghp_" + "Z9x" * 12
MIRROR = f"https://deploy:{URL_TOKEN}@git.example.com/team/app.git"
NOTES = f"# Deploy notes\n\nANTHROPIC_API_KEY={KEY}\nmirror: {MIRROR}\n"
TERMINAL = {status.value for status in TERMINAL_STATUSES}


def _wait_until_finished(http: httpx.Client, run_id: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state: dict[str, Any] = http.get(f"/runs/{run_id}").json()
        if state["status"] in TERMINAL:
            return state
        time.sleep(0.25)
    raise AssertionError(f"run {run_id} did not finish")


def _origin_with_notes(root: Path) -> Path:
    bare = bare_remote(root)
    scratch = root / "scratch"
    (scratch / "notes.md").write_text(NOTES)
    git("add", "notes.md", cwd=scratch)
    git("-c", "commit.gpgsign=false", "commit", "--quiet", "-m", "notes", cwd=scratch)
    git("push", "--quiet", "origin", "HEAD:refs/heads/main", cwd=scratch)
    return bare


def _everything_pushed(origin: Path) -> str:
    """Every commit message and change the run pushed to the origin: on any ref, not on
    `main` (which holds the notes the test put there)."""
    return subprocess.run(
        ["git", "--git-dir", str(origin), "log", "-p", "--format=%H%n%B", "--all", "--not", "main"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


@pytest.mark.integration
async def test_a_secret_read_by_a_tool_goes_nowhere(stack: Stack, tmp_path: Path) -> None:
    """The agent reads a repository file holding the worker's key and a URL with a token,
    repeats both in its answer, and names the key in a path the guard refuses (and logs)."""
    origin = _origin_with_notes(tmp_path / "origin")
    rule = {
        "id": "mirror-named",
        "description": "the notes name the mirror",
        "check": {"kind": "pattern", "pattern": "^mirror:", "path": "notes.md"},
    }
    with LiteralMessagesAPI(agent_reads=["notes.md", f"../{KEY}"]) as model:
        worker = stack.start_worker(
            LOOPS_LLM="anthropic", ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=KEY
        )
        api, base_url = stack.start_api()
        with httpx.Client(base_url=base_url, timeout=30) as http:
            created = http.post(
                "/runs",
                json={
                    "task": "Write a short deploy guide",
                    "repo": str(origin),
                    "rules": [rule],
                    "max_iterations": 1,
                    "audit_probability": 0,
                },
            )
            assert created.status_code == 201, created.text
            run_id = created.json()["run_id"]
            state = _wait_until_finished(http, run_id, timeout=240)
            trajectory = http.get(f"/runs/{run_id}/trajectory")
            events = http.get(f"/runs/{run_id}/events")
        # What went to the model: prompts and tool results (its own earlier turns, which
        # each request repeats, are what it said, not what it was told).
        sent = [
            json.dumps([r.body.get("system"), [m for m in r.messages if m.get("role") == "user"]])
            for r in model.requests
        ]
    client = await Client.connect(stack.server.address, namespace=stack.namespace)
    history = await client.get_workflow_handle(run_id).fetch_history()

    assert trajectory.status_code == 200 and events.status_code == 200

    surfaces = {
        "the trajectory served": trajectory.text,
        "the events served": events.text,
        "the run's state": json.dumps(state),
        "the branch and every ref pushed": _everything_pushed(origin),
        "what the model was sent": "\n".join(sent),
        "the workflow history": b"".join(e.SerializeToString() for e in history.events).decode(
            "utf-8", "replace"
        ),
        "the worker's log": worker.output(),
        "the API's log": api.output(),
    }
    leaks = {
        surface: [
            name for name, secret in (("key", KEY), ("URL token", URL_TOKEN)) if secret in text
        ]
        for surface, text in surfaces.items()
    }
    found = {surface: names for surface, names in leaks.items() if names}
    assert not found, json.dumps(found)
    # Not vacuous: the agent did read the file (the trajectory records what it held), and
    # the worker logged the path it was refused.
    assert f"ANTHROPIC_API_KEY={REDACTED}" in trajectory.text
    assert "mirror: https://***@git.example.com/team/app.git" in trajectory.text
    assert f"../{REDACTED}" in worker.output()
