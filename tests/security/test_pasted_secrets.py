"""Secrets a client pastes into a run or a graph come back in no API answer, and what
Temporal stores of them (and of every task) is encrypted: the exploit of a client
pasting the worker's model key, a GitHub token, a git credential's token, the notify
secret and an API token into a task, a goal and a stop reason, then reading them back
through the API, the `temporal` CLI and the raw history.

The processes are set up as docker-compose.yml sets them up: the API and the workers
share Temporal, the git credentials, the notify secret and the payload keys
(loopworks.secrets.env); only workers hold the model key and the machine's GITHUB_TOKEN,
only the API its tokens. So the API cannot recognise two of the five, and the workers
cannot recognise the API's token (api/redaction.py, worker/redacting.py)."""

from __future__ import annotations

import base64
import contextlib
import json
import subprocess
import time
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from loopworks.checks.redaction import REDACTED
from loopworks.deploy.binaries import find_binary
from loopworks.schemas.payload_keys import new_payload_key
from loopworks.schemas.run import TERMINAL_STATUSES
from loopworks.service.codec import ENCRYPTED
from tests.integration.stack import Stack
from tests.integration.test_graphs import sse

MODEL_KEY = "sk-ant-api03-" + "Kq7" * 16
GITHUB_TOKEN = "ghp_" + "Gh5t" * 9
GIT_TOKEN = "gho_" + "CrD8" * 9
NOTIFY_SECRET = "notify-" + "N0t1fy" * 6
API_TOKEN = "api-token-" + "Ap1" * 10
SECRETS = {
    "the model key": MODEL_KEY,
    "a GitHub token": GITHUB_TOKEN,
    "a git credential's token": GIT_TOKEN,
    "the notify secret": NOTIFY_SECRET,
    "an API token": API_TOKEN,
}
# What only the API's processes know, in this deployment's split.
API_KNOWS = {"a git credential's token", "the notify secret", "an API token"}

# Words that must reach no one without the key: past the first 40 characters, which
# become the run's alias, a search attribute Temporal keeps in the clear (SECURITY.md).
PHRASE = "the aurora-borealis deploy checklist"
PASTED = " ".join(SECRETS.values())
TASK = f"Write a short guide to deploying. Cover {PHRASE}; credentials: {PASTED}."
GOAL = f"Ship the deploy guides for every service. Cover {PHRASE}; use {PASTED}."
STOP = f"stopping: {PASTED}"
KEYS = new_payload_key("k1")
AUTH = {"Authorization": f"Bearer {API_TOKEN}"}


def _leaked(text: str) -> list[str]:
    return [name for name, secret in SECRETS.items() if secret in text]


def _wait(http: httpx.Client, path: str, done: Any, timeout: float = 240) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        answer = http.get(path)
        assert answer.status_code == 200, answer.text
        state: dict[str, Any] = answer.json()
        if done(state):
            return state
        assert time.monotonic() < deadline, (state.get("status"), state.get("current_step"))
        time.sleep(0.3)


def _history_text(raw: str) -> str:
    """What a history's JSON shows a reader: the text, and every base64 field decoded."""
    found = [raw]

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, str) and len(value) >= 8:
            with contextlib.suppress(ValueError):
                found.append(base64.b64decode(value, validate=True).decode("utf-8", "replace"))

    for line in raw.splitlines():
        try:
            walk(json.loads(line))
        except ValueError:
            continue
    with contextlib.suppress(ValueError):
        walk(json.loads(raw))
    return "\n".join(found)


def _show(stack: Stack, workflow_id: str, *codec: str) -> subprocess.CompletedProcess[str]:
    """`temporal workflow show` from the venv, as an operator runs it."""
    return subprocess.run(
        [
            find_binary("temporal"),
            "workflow",
            "show",
            "--workflow-id",
            workflow_id,
            "--address",
            stack.server.address,
            "--namespace",
            stack.namespace,
            "--output",
            "json",
            *codec,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.integration
async def test_pasted_secrets_come_back_from_nowhere(stack: Stack) -> None:
    credentials = {"github.com": {"username": "x-access-token", "token": GIT_TOKEN}}
    stack.extra_env.update(
        LOOPS_PAYLOAD_KEYS=KEYS,
        LOOPS_GIT_CREDENTIALS=json.dumps(credentials),
        # A shared API lending git credentials names the repositories runs may use.
        LOOPS_ALLOWED_ORIGINS="https://github.com/acme/",
        LOOPS_NOTIFY_SECRET=NOTIFY_SECRET,
    )
    stack.start_worker(ANTHROPIC_API_KEY=MODEL_KEY, GITHUB_TOKEN=GITHUB_TOKEN)
    _, base_url = stack.start_api(LOOPS_API_TOKENS=f"alice:{API_TOKEN}")
    answers: dict[str, str] = {}
    with httpx.Client(base_url=base_url, timeout=60, headers=AUTH) as http:
        # A run: read while it waits for approval (the workflow's queries), approved (an
        # update's answer), then finished (its result, from history).
        created = http.post(
            "/runs",
            json={
                "task": TASK,
                "mode": "interactive",
                "max_iterations": 1,
                "audit_probability": 0,
                "playbook": False,
            },
        )
        assert created.status_code == 201, created.text
        run_id = created.json()["run_id"]
        waiting = _wait(http, f"/runs/{run_id}", lambda s: s["status"] == "awaiting_approval")
        answers["the waiting run"] = json.dumps(waiting)
        answers["its events"] = http.get(f"/runs/{run_id}/events").text
        approved = http.post(f"/runs/{run_id}/approve", json={})
        assert approved.status_code == 200, approved.text
        answers["the approval's answer"] = approved.text
        streamed = sse(http, f"/runs/{run_id}/events", AUTH)
        answers["its event stream"] = json.dumps(streamed)
        ended = {status.value for status in TERMINAL_STATUSES}
        finished = _wait(http, f"/runs/{run_id}", lambda s: s["status"] in ended)
        answers["the finished run"] = json.dumps(finished)
        answers["its events, finished"] = http.get(f"/runs/{run_id}/events").text
        answers["the run list"] = http.get("/runs").text

        # A graph with its tasks given, waiting for approval, then stopped with a reason.
        task = {
            "id": "T-001",
            "title": f"Guide: {PASTED}",
            "description": f"Write the guide with {PASTED}",
            "acceptance_criteria": [f"names {PASTED}"],
            "verification_command": "true",
        }
        made = http.post("/graphs", json={"goal": GOAL, "tasks": [task], "mode": "interactive"})
        assert made.status_code == 201, made.text
        graph_id = made.json()["graph_id"]
        graph = _wait(http, f"/graphs/{graph_id}", lambda s: s["status"] == "awaiting_approval")
        answers["the waiting graph"] = json.dumps(graph)
        answers["its ledger"] = http.get(f"/graphs/{graph_id}/ledger").text
        stopped = http.post(f"/graphs/{graph_id}/stop", json={"reason": STOP})
        assert stopped.status_code == 202, stopped.text
        answers["the stop's answer"] = stopped.text
        ended = _wait(http, f"/graphs/{graph_id}", lambda s: s["status"] == "stopped")
        answers["the stopped graph"] = json.dumps(ended)
        answers["the graph list"] = http.get("/graphs").text

        # The codec endpoint: refused without a token, decoding with one.
        refused = httpx.post(f"{base_url}/codec/decode", json={"payloads": []})
        assert refused.status_code == 401

    leaks = {where: names for where, text in answers.items() if (names := _leaked(text))}
    assert not leaks, leaks
    # Not vacuous: the task and goal were served, with each secret's place marked.
    for where in ("the waiting run", "the finished run", "the approval's answer"):
        assert PHRASE in answers[where] and answers[where].count(REDACTED) >= len(SECRETS)
    assert f"Cover {PHRASE}" in answers["the waiting graph"]
    assert REDACTED in answers["the waiting graph"]
    assert "run_started" in answers["its events"] and REDACTED in answers["its events"]

    # What Temporal holds: no task text and no secret, in any event of either history.
    client = await Client.connect(stack.server.address, namespace=stack.namespace)
    for workflow_id in (run_id, graph_id):
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        raw = b"".join(event.SerializeToString() for event in history.events)
        text = raw.decode("utf-8", "replace")
        assert PHRASE not in text and not _leaked(text), workflow_id
        assert ENCRYPTED in raw

        # `temporal workflow show`, without the codec: neither.
        plain = _show(stack, workflow_id)
        assert plain.returncode == 0, plain.stderr
        shown = _history_text(plain.stdout)
        assert PHRASE not in shown and not _leaked(shown), workflow_id
        # Through the API's codec endpoint, for a token: the task, its secrets redacted
        # (those the API knows; SECURITY.md says why not the workers' own).
        codec = ["--codec-endpoint", f"{base_url}/codec", "--codec-auth", f"Bearer {API_TOKEN}"]
        decoded = _show(stack, workflow_id, *codec)
        assert decoded.returncode == 0, decoded.stderr
        readable = _history_text(decoded.stdout)
        assert PHRASE in readable, workflow_id
        assert not set(_leaked(readable)) & API_KNOWS, workflow_id
        # And with a token the API does not know, nothing is decoded.
        wrong = ["--codec-endpoint", f"{base_url}/codec", "--codec-auth", "Bearer not-a-token"]
        refused_show = _show(stack, workflow_id, *wrong)
        assert PHRASE not in _history_text(refused_show.stdout + refused_show.stderr)
